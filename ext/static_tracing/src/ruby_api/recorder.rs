//! The primitives of `StaticTracing::Recorder` (lib/static_tracing/recorder.rb)
//! and of its control channel (lib/static_tracing/control.rb): start and
//! stop the ring, mark which tracepoints it records, take snapshots.
//! What the recording does on each call is in `Tracepoint#fire`.

use super::errors::{recorder_error, type_error};
use super::receiver::receiver;
use super::tracepoint::Tracepoint;
use crate::recording::{self, NO_TRIGGER};
use magnus::{Error, Ruby, Value};
use ruby_glue::gvl::without_gvl;
use stapsdt::ring::format::entry_size;
use stapsdt::ring::{RingConfig, Window};
use stapsdt::snapshot_file::{Budget, Outcome};
use std::io;
use std::os::fd::IntoRawFd;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

fn tracepoint<'a>(ruby: &Ruby, value: &'a Value) -> Result<&'a Tracepoint, Error> {
    receiver::<Tracepoint>(value).ok_or_else(|| {
        type_error(
            ruby,
            "only a StaticTracing::Tracepoint can be recorded".into(),
        )
    })
}

fn not_recording(ruby: &Ruby) -> Error {
    recorder_error(ruby, "nothing is being recorded".into())
}

/// `recorder_start(slots_bytes, overwrite, wake_fd, probes)`: a new ring
/// whose slots take `slots_bytes` (rounded up to a power of two), whose
/// probe table holds `probes` (`[provider, name]` pairs: those the
/// recording arms as it starts) and room for later ones; returns `[path,
/// on_disk]`: its path, and the name of its file system when that is on a
/// disk (nil in memory).
/// Its file is made with the GVL released: reserving and mapping a large
/// ring takes seconds, and the process's other threads run meanwhile.
pub(super) fn start(
    ruby: &Ruby,
    slots_bytes: u64,
    overwrite: bool,
    wake_fd: Option<i32>,
    probes: Vec<(String, String)>,
) -> Result<(String, Option<String>), Error> {
    let failed = |message| recorder_error(ruby, message);
    let mut config = RingConfig::for_size(slots_bytes, overwrite)
        .map_err(|err| recorder_error(ruby, err.to_string()))?;
    config.table_capacity = recording::table_capacity(
        probes
            .iter()
            .map(|(provider, name)| entry_size(provider.len(), name.len()) as u64)
            .sum(),
    );
    if recording::is_recording() {
        return Err(failed("a recording is running already".into()));
    }
    let wake = recording::keep_wake(wake_fd).map_err(failed)?;
    let prepared = without_gvl(|| recording::prepare(config, wake)).map_err(failed)?;
    recording::install(prepared).map_err(failed)
}

/// Stops the recording; its ring is unmapped and removed with the GVL
/// released (a ring of gigabytes takes tens of milliseconds to let go of).
pub(super) fn stop() {
    if let Some(recording) = recording::stop() {
        without_gvl(|| drop(recording));
    }
}

/// `recorder_arm(tracepoint, latency_arg, stack_arg)`: records the
/// tracepoint's calls; returns its probe id in the ring, or nil when the
/// ring's probe table had no room (its calls are then counted as dropped).
pub(super) fn arm(
    ruby: &Ruby,
    tracepoint_value: Value,
    latency_arg: Option<u8>,
    stack_arg: Option<u8>,
) -> Result<Option<u32>, Error> {
    let tracepoint = tracepoint(ruby, &tracepoint_value)?;
    let provider = tracepoint.provider_name(ruby);
    tracepoint
        .roles()
        .set(tracepoint.spec().args(), latency_arg, stack_arg);
    recording::with_current(|recording| {
        recording.arm(
            tracepoint.mark(),
            &provider,
            tracepoint.spec().name(),
            tracepoint.spec().args(),
            latency_arg,
            stack_arg,
        )
    })
    .ok_or_else(|| not_recording(ruby))
}

pub(super) fn disarm(ruby: &Ruby, tracepoint_value: Value) -> Result<(), Error> {
    let tracepoint = tracepoint(ruby, &tracepoint_value)?;
    tracepoint.mark().clear();
    tracepoint
        .trigger_above()
        .store(NO_TRIGGER, Ordering::Relaxed);
    Ok(())
}

/// `recorder_trigger(tracepoint, threshold_ns)`: a recorded latency above
/// the threshold fires the trigger; nil removes it.
pub(super) fn set_trigger(
    ruby: &Ruby,
    tracepoint_value: Value,
    threshold_ns: Option<u64>,
) -> Result<(), Error> {
    let tracepoint = tracepoint(ruby, &tracepoint_value)?;
    tracepoint
        .trigger_above()
        .store(threshold_ns.unwrap_or(NO_TRIGGER), Ordering::Relaxed);
    Ok(())
}

/// `recorder_dump(path)`: what the ring holds now, as the new trace file
/// `path` (mode 0600, never over anything, sized to its records). The copy
/// and the write are done with the GVL released: the process's threads go
/// on, recording too, while a large ring is copied.
pub(super) fn dump(ruby: &Ruby, path: PathBuf) -> Result<(), Error> {
    let recording = recording::current().ok_or_else(|| not_recording(ruby))?;
    without_gvl(|| recording.write_snapshot(&path)).map_err(|err| {
        recorder_error(
            ruby,
            format!("cannot write {}: {}", path.display(), write_reason(&err)),
        )
    })
}

/// `recorder_trigger_dump(dir, name, since_ns, max_records, max_files,
/// max_bytes)`: a trigger's snapshot, the records made from `since_ns` on
/// (the ring's clock) and `max_records` of them at most, as the new file
/// `name` in `dir`, within the directory's budget of `max_files` trace
/// files and `max_bytes` bytes. Returns `[true, bytes, records]` when
/// written, `[false, files, bytes]` (what the directory holds) when the
/// budget has no room for it. Copied and written with the GVL released.
pub(super) fn trigger_dump(
    ruby: &Ruby,
    dir: PathBuf,
    name: String,
    since_ns: u64,
    max_records: u64,
    max_files: u64,
    max_bytes: u64,
) -> Result<(bool, u64, u64), Error> {
    let recording = recording::current().ok_or_else(|| not_recording(ruby))?;
    let window = Window {
        since_ns: Some(since_ns),
        max_records: Some(max_records),
    };
    let budget = Budget {
        files: max_files,
        bytes: max_bytes,
    };
    let path = dir.join(&name);
    match without_gvl(|| recording.write_trigger_snapshot(&dir, &name, window, budget)) {
        Ok(Outcome::Written { bytes, records }) => Ok((true, bytes, records)),
        Ok(Outcome::OverBudget { files, bytes, .. }) => Ok((false, files, bytes)),
        Err(err) => Err(recorder_error(
            ruby,
            format!("cannot write {}: {}", path.display(), write_reason(&err)),
        )),
    }
}

/// Why a snapshot could not be written, in the words a user acts on.
fn write_reason(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(libc::EEXIST) => {
            "a file of that name exists already (a snapshot never replaces one)".into()
        }
        Some(libc::ELOOP) => {
            "it is a symbolic link (a snapshot is never written through one)".into()
        }
        Some(libc::EFBIG) => {
            format!("{err}: it would be larger than this process may make a file (see ulimit -f)")
        }
        _ => err.to_string(),
    }
}

/// `[probe_id, latency_ns, time_ns, trace_id]` of the call that fired the
/// trigger since the last call (its time: when it ended, on the ring's
/// clock, that of `StaticTracing.nsec`; its trace id in hex, nil outside
/// any trace context), or nil; no trigger fires again before
/// `quiet_until_ns`.
pub(super) fn take_trigger(quiet_until_ns: u64) -> Option<(u32, u64, u64, Option<String>)> {
    recording::with_current(|recording| recording.take_trigger(quiet_until_ns))
        .flatten()
        .map(|trigger| {
            let trace_id = trigger.context.map(|context| context.trace_hex());
            (trigger.probe, trigger.latency_ns, trigger.time_ns, trace_id)
        })
}

/// In a forked child: lets go of the parent's ring.
pub(super) fn after_fork() {
    recording::forget_inherited();
}

/// `[fd, path]`: this process's control FIFO, created where its state
/// file is; the descriptor is the caller's to close.
pub(super) fn open_control(ruby: &Ruby) -> Result<(i32, String), Error> {
    stapsdt::control::open()
        .map(|(reader, path)| (reader.into_raw_fd(), path.display().to_string()))
        .map_err(|err| {
            recorder_error(
                ruby,
                format!("cannot create the control channel for static-tracing: {err}"),
            )
        })
}

/// The recorder's primitives on `StaticTracing::Native`, and the control
/// channel its commands come through.
pub(super) fn define_natives(native: magnus::RModule) -> Result<(), Error> {
    use magnus::Object;
    native.define_singleton_method("recorder_start", function!(start, 4))?;
    native.define_singleton_method("recorder_stop", function!(stop, 0))?;
    native.define_singleton_method("recorder_arm", function!(arm, 3))?;
    native.define_singleton_method("recorder_disarm", function!(disarm, 1))?;
    native.define_singleton_method("recorder_trigger", function!(set_trigger, 2))?;
    native.define_singleton_method("recorder_dump", function!(dump, 1))?;
    native.define_singleton_method("recorder_trigger_dump", function!(trigger_dump, 6))?;
    native.define_singleton_method("recorder_take_trigger", function!(take_trigger, 1))?;
    native.define_singleton_method("recorder_after_fork", function!(after_fork, 0))?;
    native.define_singleton_method("open_control", function!(open_control, 0))?;
    Ok(())
}
