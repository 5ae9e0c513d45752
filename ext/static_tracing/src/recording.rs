//! The process's recorder: at most one ring at a time (see
//! `stapsdt::ring_file`), and which tracepoints it records.
//!
//! A tracepoint carries a [`Mark`]: the generation of the recording that
//! armed it and its probe's id in that ring. A mark of an older generation
//! (a recording stopped, another started) counts for nothing, so a mark
//! can never send records into a ring whose probe table does not hold it.
//!
//! # Why the references handed out here hold
//!
//! The current recording is an `Arc` whose pointer is in `CURRENT`. It is
//! installed or taken out only by [`install`] and [`stop`], which the
//! binding calls with the GVL held; records are written only by
//! `Tracepoint#fire` and `#fire_latency`, which hold the GVL from start to
//! end and never release it. So no thread is writing into a ring while it
//! is unmapped. A snapshot, which copies the ring with the GVL released,
//! holds an `Arc` of its own ([`current`]): a recording stopped meanwhile is
//! unmapped when the snapshot is done with it. The one exception is a
//! forked child, where the fork handler takes the parent's ring away before
//! any Ruby code runs in the child (see [`forget_inherited`]).

use crate::trace_contexts;
use stapsdt::ring::{Arg, Ring, RingConfig, Window, DEFAULT_TABLE_CAPACITY, MAX_TABLE_CAPACITY};
use stapsdt::ring_file::{RingFile, RingFileError};
use stapsdt::snapshot_file::{write_within_budget, Budget, Outcome};
use stapsdt::trace_context::TraceContext;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{BorrowedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A recording: its ring, and what makes it write a snapshot.
pub struct Recording {
    file: RingFile,
    generation: u32,
    /// Written to when a call exceeds its trigger's threshold.
    wake: Option<File>,
    /// Set by the first call over a threshold; taken by [`take_trigger`].
    triggered: AtomicBool,
    /// The probe id, latency and time (when it ended, on the ring's
    /// clock) of the call that set `triggered`.
    trigger_probe: AtomicU32,
    trigger_latency: AtomicU64,
    trigger_time: AtomicU64,
    /// The trace context that call was made in, if any.
    trigger_context: Mutex<Option<TraceContext>>,
    /// No trigger wakes anyone before this time (monotonic ns): at most
    /// one snapshot an interval.
    quiet_until: AtomicU64,
}

/// The call that fired a trigger, as [`Recording::take_trigger`] hands it
/// over: what its snapshot's window and its line are made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trigger {
    pub probe: u32,
    pub latency_ns: u64,
    /// When it ended, on the ring's clock.
    pub time_ns: u64,
    /// The trace context it was made in, if any.
    pub context: Option<TraceContext>,
}

static CURRENT: AtomicPtr<Recording> = AtomicPtr::new(std::ptr::null_mut());
/// The recording a forked child inherited from its parent: not written to,
/// only let go of (see [`forget_inherited`]).
static INHERITED: AtomicPtr<Recording> = AtomicPtr::new(std::ptr::null_mut());
static GENERATION: AtomicU32 = AtomicU32::new(0);
/// Forks so far in this process's line: a thread id cached before a fork
/// is not the child's.
static FORKS: AtomicU32 = AtomicU32::new(0);

/// Which recording records a tracepoint, and as which probe of its ring:
/// `generation << 32 | (id + 1)`, 0 for none, `generation << 32 |
/// TABLE_FULL` when the ring's probe table had no room (its calls are
/// counted as dropped).
#[derive(Default, Debug)]
pub struct Mark(AtomicU64);

const TABLE_FULL: u64 = u32::MAX as u64;

/// What a marked tracepoint records into.
pub struct Target<'a> {
    recording: &'a Recording,
    /// None: the probe table was full.
    probe: Option<u32>,
}

impl Mark {
    fn set(&self, generation: u32, probe: Option<u32>) {
        let id = probe.map_or(TABLE_FULL, |id| u64::from(id) + 1);
        self.0
            .store(u64::from(generation) << 32 | id, Ordering::Relaxed);
    }

    pub fn clear(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    /// Where this tracepoint's calls are recorded now, if they are. The
    /// caller holds the GVL (see the module docs), which keeps the
    /// recording alive for as long as it holds the reference.
    #[inline]
    pub fn target(&self) -> Option<Target<'_>> {
        let mark = self.0.load(Ordering::Relaxed);
        if mark == 0 {
            return None;
        }
        // SAFETY: see the module docs: the pointer is either null or a
        // recording that is dropped only by a caller holding the GVL, as
        // ours does until it is done with the reference.
        let recording = unsafe { CURRENT.load(Ordering::Acquire).as_ref() }?;
        if u64::from(recording.generation) != mark >> 32 {
            return None;
        }
        let id = mark & 0xffff_ffff;
        Some(Target {
            recording,
            probe: (id != TABLE_FULL).then(|| (id - 1) as u32),
        })
    }

    /// Whether a recording records this tracepoint now.
    #[inline]
    pub fn is_recorded(&self) -> bool {
        self.target().is_some()
    }
}

impl Target<'_> {
    fn ring(&self) -> &Ring {
        self.recording.file.ring()
    }

    /// Records a call of a probe with one Integer argument.
    #[inline]
    pub fn record_integer(&self, time_ns: u64, value: i64) {
        match self.probe {
            Some(probe) => {
                let maker = trace_contexts::maker(self.recording, time_ns);
                self.ring().record_integer_by(probe, time_ns, maker, value);
            }
            None => self.ring().count_dropped(),
        }
    }

    /// Records a call with any arguments.
    pub fn record(&self, time_ns: u64, args: &[Arg<'_>]) {
        match self.probe {
            Some(probe) => {
                let maker = trace_contexts::maker(self.recording, time_ns);
                self.ring().record_by(probe, time_ns, maker, args);
            }
            None => self.ring().count_dropped(),
        }
    }

    /// A latency was measured: past `threshold`, the first such call an
    /// interval wakes the thread that writes snapshots.
    #[inline]
    pub fn check_trigger(&self, threshold: &AtomicU64, now: u64, latency: i64) {
        if latency <= 0 || latency as u64 <= threshold.load(Ordering::Relaxed) {
            return;
        }
        let recording = self.recording;
        if now < recording.quiet_until.load(Ordering::Relaxed)
            || recording.triggered.swap(true, Ordering::AcqRel)
        {
            return;
        }
        recording
            .trigger_probe
            .store(self.probe.unwrap_or(u32::MAX), Ordering::Relaxed);
        recording
            .trigger_latency
            .store(latency as u64, Ordering::Relaxed);
        recording.trigger_time.store(now, Ordering::Relaxed);
        if let Ok(mut context) = recording.trigger_context.lock() {
            *context = trace_contexts::current();
        }
        if let Some(mut wake) = recording.wake.as_ref() {
            // A full pipe has a byte waiting already: nothing is lost.
            let _ = wake.write(&[0]);
        }
    }
}

/// The probe table of a ring whose probes, as it starts, take `needed`
/// bytes of entries: room for them all, and for as many probes declared
/// later as a default table holds, within the format's bound (past it, a
/// probe's calls are counted as dropped, and the recorder says which).
pub fn table_capacity(needed: u64) -> u64 {
    needed
        .next_multiple_of(stapsdt::ring::format::PAGE)
        .saturating_add(DEFAULT_TABLE_CAPACITY)
        .min(MAX_TABLE_CAPACITY)
}

/// The trigger threshold of a tracepoint that has none.
pub const NO_TRIGGER: u64 = u64::MAX;

/// A ring made and not yet recorded into: [`prepare`] makes it, with the
/// GVL released if the caller likes (it takes time in proportion to its
/// size), [`install`] starts recording into it.
pub struct Prepared {
    file: RingFile,
    wake: Option<File>,
}

/// Keeps a duplicate of `wake_fd`, the descriptor a trigger writes to; the
/// caller holds the original open for this call.
pub fn keep_wake(wake_fd: Option<RawFd>) -> Result<Option<File>, String> {
    wake_fd
        .map(|fd| {
            // SAFETY: the caller passes a descriptor it holds open for this
            // call; it is only duplicated here, never closed.
            unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()
        })
        .transpose()
        .map(|wake| wake.map(File::from))
        .map_err(|err| format!("cannot keep the trigger's pipe: {err}"))
}

/// Makes the ring file of a new recording laid out as `config` says (pid
/// and clock anchors are filled in here), `wake` written to when a trigger
/// fires. Touches nothing of Ruby's and nothing a recording uses.
pub fn prepare(mut config: RingConfig, wake: Option<File>) -> Result<Prepared, String> {
    let key = stapsdt::stub_dir::ProcessKey::current();
    config.pid = key.pid as u64;
    config.pid_namespace = key.pid_namespace;
    (config.anchor_monotonic_ns, config.anchor_realtime_ns) = clock_anchors();
    let file = RingFile::create(&config).map_err(|err: RingFileError| err.to_string())?;
    Ok(Prepared { file, wake })
}

/// Records into `prepared` from now on; returns its file's path, and the
/// file system it is on when that is a disk's (see `RingFile::on_disk`).
/// Refused while another recording runs (the prepared ring is then removed).
pub fn install(prepared: Prepared) -> Result<(String, Option<String>), String> {
    on_fork();
    if is_recording() {
        return Err("a recording is running already".into());
    }
    let path = prepared.file.path().display().to_string();
    let on_disk = prepared.file.on_disk();
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    let recording = Arc::new(Recording {
        file: prepared.file,
        generation,
        wake: prepared.wake,
        triggered: AtomicBool::new(false),
        trigger_probe: AtomicU32::new(0),
        trigger_latency: AtomicU64::new(0),
        trigger_time: AtomicU64::new(0),
        trigger_context: Mutex::new(None),
        quiet_until: AtomicU64::new(0),
    });
    CURRENT.store(Arc::into_raw(recording).cast_mut(), Ordering::Release);
    Ok((path, on_disk))
}

/// Whether a recording runs (in this process: not one inherited from a parent).
pub fn is_recording() -> bool {
    !CURRENT.load(Ordering::Acquire).is_null()
}

/// Stops the recording, if one runs: every mark of it counts for nothing
/// from now on. Returns it: once the caller and any snapshot copying it
/// let go of it, its ring is unmapped and its file removed (the caller has
/// read what it wanted from it), which takes time in proportion to its
/// size: drop it with the GVL released.
pub fn stop() -> Option<Arc<Recording>> {
    let current = CURRENT.swap(std::ptr::null_mut(), Ordering::AcqRel);
    // SAFETY: made by `Arc::into_raw` in `install` and taken out of CURRENT
    // just now: this is the reference CURRENT held. No thread writes into
    // it any more (see the module docs: writers hold the GVL, as our caller
    // does, and load CURRENT again at each record).
    (!current.is_null()).then(|| unsafe { Arc::from_raw(current) })
}

/// The current recording, held for as long as the caller keeps it, even
/// past a [`stop`]: for work done with the GVL released. Called with the GVL.
pub fn current() -> Option<Arc<Recording>> {
    let current = CURRENT.load(Ordering::Acquire);
    if current.is_null() {
        return None;
    }
    // SAFETY: made by `Arc::into_raw` in `install`, and still CURRENT's
    // reference: only `stop` gives that up, with the GVL, which our caller
    // holds. Counting one more reference first makes the one returned ours.
    unsafe {
        Arc::increment_strong_count(current);
        Some(Arc::from_raw(current))
    }
}

/// Runs `f` on the current recording, if there is one.
pub fn with_current<R>(f: impl FnOnce(&Recording) -> R) -> Option<R> {
    // SAFETY: as in `Mark::target`: our caller holds the GVL.
    unsafe { CURRENT.load(Ordering::Acquire).as_ref() }.map(f)
}

impl Recording {
    pub fn ring(&self) -> &Ring {
        self.file.ring()
    }

    /// Which recording of this process this is (see [`Mark`]).
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Adds a probe to the ring's table and marks `mark` with it; returns
    /// its id, or None when the table is full: the probe's calls are then
    /// counted as dropped.
    pub fn arm(
        &self,
        mark: &Mark,
        provider: &str,
        probe: &str,
        types: &[stapsdt::ArgType],
        latency_arg: Option<u8>,
        stack_arg: Option<u8>,
    ) -> Option<u32> {
        let id = self
            .ring()
            .add_probe(provider, probe, types, latency_arg, stack_arg)
            .ok();
        mark.set(self.generation, id);
        id
    }

    /// Writes what the ring holds now as the new trace file `path` (see
    /// `Ring::snapshot_within` and `stapsdt::snapshot_file::write_snapshot`),
    /// straight from its copy: a mapping of its own, handed back once
    /// written, so that a dump leaves nothing behind in malloc's arenas.
    /// Takes time in proportion to what the ring holds: call it with the
    /// GVL released.
    pub fn write_snapshot(&self, path: &Path) -> io::Result<()> {
        let snapshot = self.ring().snapshot_within(Window::WHOLE)?;
        stapsdt::snapshot_file::write_snapshot(path, &snapshot)
    }

    /// A trigger's snapshot: the records of `window` as the new file
    /// `name` of `dir`, if the directory's budget has room for it (see
    /// `stapsdt::snapshot_file::write_within_budget`). Takes time in
    /// proportion to the window: call it with the GVL released.
    pub fn write_trigger_snapshot(
        &self,
        dir: &Path,
        name: &str,
        window: Window,
        budget: Budget,
    ) -> io::Result<Outcome> {
        write_within_budget(dir, name, budget, || self.ring().snapshot_within(window))
    }

    /// The call that fired a trigger since the last call, if one did: its
    /// probe id, latency, time and trace context (see [`Trigger`]); no
    /// trigger fires again before `quiet_until`.
    pub fn take_trigger(&self, quiet_until: u64) -> Option<Trigger> {
        if !self.triggered.load(Ordering::Acquire) {
            return None;
        }
        self.quiet_until.store(quiet_until, Ordering::Relaxed);
        let taken = Trigger {
            probe: self.trigger_probe.load(Ordering::Relaxed),
            latency_ns: self.trigger_latency.load(Ordering::Relaxed),
            time_ns: self.trigger_time.load(Ordering::Relaxed),
            context: self
                .trigger_context
                .lock()
                .ok()
                .and_then(|context| *context),
        };
        self.triggered.store(false, Ordering::Release);
        Some(taken)
    }
}

/// A forked child lets go of the ring it inherited from its parent (the
/// fork handler took it out of use at once; dropping it needs locks that
/// only the GVL-holding side may take). The parent's file stays.
pub fn forget_inherited() {
    let inherited = INHERITED.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !inherited.is_null() {
        // SAFETY: made by `Arc::into_raw` in `install`, moved here by the
        // fork handler, and taken out just now: this is the reference
        // CURRENT held. The child never wrote into it.
        drop(unsafe { Arc::from_raw(inherited) });
    }
}

/// Forks so far in this process's line: a thread id cached before a fork
/// is not the child's (see `trace_contexts`, which caches it).
#[inline]
pub fn forks() -> u32 {
    FORKS.load(Ordering::Relaxed)
}

/// CLOCK_MONOTONIC and CLOCK_REALTIME read together: the second between
/// two reads of the first, so that the anchor is off by half a read at most.
fn clock_anchors() -> (u64, i64) {
    let read = |clock| {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a valid out-pointer; both clocks always exist.
        unsafe { libc::clock_gettime(clock, &mut now) };
        now.tv_sec * 1_000_000_000 + now.tv_nsec
    };
    let before = read(libc::CLOCK_MONOTONIC);
    let realtime = read(libc::CLOCK_REALTIME);
    let after = read(libc::CLOCK_MONOTONIC);
    ((before + (after - before) / 2) as u64, realtime)
}

/// Registers, once, the fork handler that takes the parent's recording
/// out of use in the child before anything in it runs: the child's calls
/// must not go into its parent's ring (nor be counted as recorded).
fn on_fork() {
    static REGISTERED: OnceLock<libc::c_int> = OnceLock::new();
    extern "C" fn in_child() {
        FORKS.fetch_add(1, Ordering::Relaxed);
        let inherited = CURRENT.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !inherited.is_null() {
            INHERITED.store(inherited, Ordering::Release);
        }
    }
    // SAFETY: a handler that only touches atomics, registered once.
    REGISTERED.get_or_init(|| unsafe { libc::pthread_atfork(None, None, Some(in_child)) });
}
