//! Which watched probes have a tracer attached, seen by a thread of our own.
//!
//! Attach mode wraps a traced method only while a tracer is attached to its
//! probe. The kernel shows an attach in one way only: it raises the probe's
//! semaphore, a `u16` in this process's memory (or, for a tracer that sets
//! none, puts a breakpoint on the probe site). It tells the process nothing:
//! no descriptor becomes readable and no signal arrives, because the tracer
//! registers its uprobe from its own side and the kernel writes the
//! semaphore through the page tables. So the watched probes are polled, by a
//! plain thread that never takes the GVL: a scan is two loads per watched
//! probe (a few microseconds for thousands), the thread sleeps `period`
//! between scans, and while nothing is watched it sleeps on a condition
//! variable until something is. When a scan sees a change, it queues it and
//! writes a byte to a pipe that a Ruby thread waits on
//! (lib/static_tracing/watcher.rb): Ruby code runs only when something
//! changed.
//!
//! A scan reads semaphores inside images that providers replace and unmap.
//! Every such change happens in [`while_images_change`], under the lock a
//! scan holds, so a scan never reads a mapping that is going away. The lock
//! is also held across `fork` (see [`hold_across_fork`]): a child must not
//! inherit it locked by a thread it does not have.

use crate::site_slot::SiteSlot;
use stapsdt::site::ProbeSite;
use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

/// A watched probe whose attached state changed: its watch id and whether a
/// tracer is attached now.
pub type Change = (u64, bool);

struct Entry {
    id: u64,
    slot: Arc<SiteSlot>,
    /// The slot's site as of the last image change: a scan reads the
    /// entries' sites in address order, from one vector, rather than
    /// chasing every slot.
    site: Option<ProbeSite>,
    /// As last reported (queued) to Ruby.
    attached: bool,
}

struct Watch {
    entries: Vec<Entry>,
    next_id: u64,
    /// Changes seen and not yet taken by Ruby, oldest first.
    changes: Vec<Change>,
    /// Written to when `changes` stops being empty.
    wake: Option<File>,
    period: Duration,
    /// The process whose poller thread is running, if one is (a thread does
    /// not survive a fork).
    poller_pid: Option<libc::pid_t>,
    /// The poller's thread id, for measuring what it costs.
    poller_tid: Option<libc::pid_t>,
    scans: u64,
    /// Images changed, or entries were added, since the sites were read.
    sites_stale: bool,
}

static WATCH: Mutex<Watch> = Mutex::new(Watch {
    entries: Vec::new(),
    next_id: 1,
    changes: Vec::new(),
    wake: None,
    period: Duration::from_millis(50),
    poller_pid: None,
    poller_tid: None,
    scans: 0,
    sites_stale: false,
});
/// Wakes the poller: something is watched now, or the period changed.
static POKE: Condvar = Condvar::new();

fn lock() -> MutexGuard<'static, Watch> {
    // A panic while holding the lock cannot leave `Watch` half changed in a
    // way that matters: the next scan reports from what is there.
    WATCH.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts watching `slot`'s probe; the id names it in [`take_changes`].
/// A probe attached already is reported by the next scan.
pub fn watch(slot: Arc<SiteSlot>) -> io::Result<u64> {
    let mut watch = lock();
    ensure_poller(&mut watch)?;
    let id = watch.next_id;
    watch.next_id += 1;
    watch.entries.push(Entry {
        id,
        slot,
        site: None,
        attached: false,
    });
    watch.sites_stale = true;
    POKE.notify_all();
    Ok(id)
}

/// Stops watching probe `id`; a change of it not yet taken is dropped.
pub fn unwatch(id: u64) {
    let mut watch = lock();
    watch.entries.retain(|entry| entry.id != id);
    watch.changes.retain(|&(changed, _)| changed != id);
}

/// The changes seen since the last call, oldest first.
pub fn take_changes() -> Vec<Change> {
    std::mem::take(&mut lock().changes)
}

/// Sets where changes are announced (the write end of a pipe, which is
/// duplicated: the caller keeps its own) and how long the poller sleeps
/// between scans; starts the poller if something is watched and this
/// process has none.
pub fn configure(wake_fd: RawFd, period: Duration) -> io::Result<()> {
    // SAFETY: the caller passes a descriptor it holds open for this call;
    // it is only duplicated here, never closed.
    let wake = unsafe { BorrowedFd::borrow_raw(wake_fd) }.try_clone_to_owned()?;
    let mut watch = lock();
    // Also in a forked child, whose poller did not come along; while
    // nothing is watched there is no poller ([`watch`] starts one).
    if !watch.entries.is_empty() {
        ensure_poller(&mut watch)?;
    }
    watch.wake = Some(File::from(wake));
    watch.period = period;
    if !watch.changes.is_empty() {
        announce(&watch);
    }
    POKE.notify_all();
    Ok(())
}

/// Runs `change`, which replaces or unmaps images, while no scan runs.
pub fn while_images_change<R>(change: impl FnOnce() -> R) -> R {
    let mut watch = lock();
    watch.sites_stale = true;
    change()
}

/// The poller's thread id (`/proc/self/task/TID`) and the scans it made.
pub fn poller() -> (Option<libc::pid_t>, u64) {
    let watch = lock();
    (watch.poller_tid.filter(|_| is_ours(&watch)), watch.scans)
}

fn is_ours(watch: &Watch) -> bool {
    watch.poller_pid == Some(current_pid())
}

fn current_pid() -> libc::pid_t {
    std::process::id() as libc::pid_t
}

fn ensure_poller(watch: &mut Watch) -> io::Result<()> {
    if is_ours(watch) {
        return Ok(());
    }
    hold_across_fork()?;
    std::thread::Builder::new()
        .name("static_tracing attach".into())
        .spawn(poll)?;
    watch.poller_pid = Some(current_pid());
    Ok(())
}

fn poll() {
    let mut watch = lock();
    // SAFETY: gettid has no preconditions.
    watch.poller_tid = Some(unsafe { libc::gettid() });
    loop {
        if watch.entries.is_empty() {
            watch = POKE.wait(watch).unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        scan(&mut watch);
        let period = watch.period;
        watch = POKE
            .wait_timeout(watch, period)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

fn scan(watch: &mut Watch) {
    if watch.sites_stale {
        for entry in &mut watch.entries {
            entry.site = entry.slot.get();
        }
        watch
            .entries
            .sort_unstable_by_key(|entry| entry.site.map(|site| site.semaphore));
        watch.sites_stale = false;
    }
    let quiet = watch.changes.is_empty();
    let Watch {
        entries, changes, ..
    } = watch;
    for entry in entries.iter_mut() {
        // SAFETY: the site was read from its slot since the last image
        // change (`sites_stale`), so it belongs to a loaded image; images
        // are only replaced or unmapped inside `while_images_change`, which
        // waits for the lock this scan holds.
        let attached = entry.site.is_some_and(|site| unsafe { site.is_enabled() });
        if attached != entry.attached {
            entry.attached = attached;
            changes.push((entry.id, attached));
        }
    }
    watch.scans += 1;
    if quiet && !watch.changes.is_empty() {
        announce(watch);
    }
}

/// One byte tells the Ruby thread to take the changes; a full pipe already
/// has one waiting, so a failed write loses nothing.
fn announce(watch: &Watch) {
    if let Some(mut wake) = watch.wake.as_ref() {
        let _ = wake.write(&[0]);
    }
}

thread_local! {
    /// The lock, held by the forking thread from just before a fork until
    /// just after it, in parent and child.
    static HELD_ACROSS_FORK: RefCell<Option<MutexGuard<'static, Watch>>> = const { RefCell::new(None) };
}

/// Makes every fork take the lock first, so that the child never starts
/// with it held by the poller, a thread the child does not have.
fn hold_across_fork() -> io::Result<()> {
    static REGISTERED: OnceLock<libc::c_int> = OnceLock::new();
    extern "C" fn before_fork() {
        HELD_ACROSS_FORK.with(|held| *held.borrow_mut() = Some(lock()));
    }
    extern "C" fn after_fork_in_parent() {
        HELD_ACROSS_FORK.with(|held| drop(held.borrow_mut().take()));
    }
    extern "C" fn after_fork_in_child() {
        HELD_ACROSS_FORK.with(|held| {
            if let Some(mut watch) = held.borrow_mut().take() {
                // The poller did not come along, and the pipe is the parent's;
                // the tracers attached are the parent's too.
                watch.poller_pid = None;
                watch.poller_tid = None;
                watch.wake = None;
                watch.changes.clear();
                for entry in &mut watch.entries {
                    entry.attached = false;
                }
            }
        });
    }
    // SAFETY: three handlers that only take, release and update the lock,
    // registered once.
    let result = *REGISTERED.get_or_init(|| unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_in_parent),
            Some(after_fork_in_child),
        )
    });
    match result {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}
