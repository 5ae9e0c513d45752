//! Which image files a forked child maps: claims, taken in the fork handlers.
//!
//! A forked child maps every image of its parent, and a file must not be
//! rewritten under a process that maps it. So a child holds a *claim* on each
//! such file: an open file description of its own carrying a read lock
//! (`F_OFD_SETLK`). The description is opened in the parent just before the
//! fork, so the claim exists before `fork` returns; the parent then closes its
//! copy, which leaves the child as the only holder. The descriptor is
//! close-on-exec, so a child that execs (as `system` does) or exits drops its
//! claim. A creator sees claims with `F_OFD_GETLK`.
//!
//! The tables are lock-free because the fork handlers run where a lock taken
//! by another thread of the parent could never be released.

#[cfg(target_os = "linux")]
use super::{set_whole_file_lock, whole_file_lock};
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// How many image files can be tracked at once; more are taken as shared.
const SLOTS: usize = 4096;

/// The image files this process maps, and the claims it holds on them.
struct ForkTables {
    /// Descriptor of each mapped image file, -1 when the slot is free.
    mapped: [AtomicI32; SLOTS],
    /// This process's claim on that file (in children), -1 when none.
    claim: [AtomicI32; SLOTS],
    /// A claim opened for the child about to be forked.
    pending: [AtomicI32; SLOTS],
}

static TABLES: ForkTables = ForkTables {
    mapped: [const { AtomicI32::new(-1) }; SLOTS],
    claim: [const { AtomicI32::new(-1) }; SLOTS],
    pending: [const { AtomicI32::new(-1) }; SLOTS],
};

/// Forks so far, and forks after which a child could not be given a claim:
/// for images this process cannot track, any such fork means "maybe shared".
static FORKS: AtomicU64 = AtomicU64::new(0);
static UNCLAIMED_FORKS: AtomicU64 = AtomicU64::new(0);

/// Opens a new description of the file behind `fd` and read-locks it.
#[cfg(target_os = "linux")]
fn open_claim(fd: RawFd) -> Option<RawFd> {
    let mut path = [0u8; 32];
    let mut cursor = std::io::Cursor::new(&mut path[..]);
    std::io::Write::write_fmt(&mut cursor, format_args!("/proc/self/fd/{fd}\0")).ok()?;
    // SAFETY: `path` is NUL-terminated; the new descriptor is ours.
    let claim = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if claim < 0 {
        return None;
    }
    // Read locks never conflict: this fails only for want of resources.
    if set_whole_file_lock(claim, libc::F_RDLCK).is_err() {
        // SAFETY: closing the descriptor we just opened.
        unsafe { libc::close(claim) };
        return None;
    }
    Some(claim)
}

/// Open file description locks are Linux's: elsewhere a child gets no
/// claim, and the fork is counted as one after which files may be shared.
#[cfg(not(target_os = "linux"))]
fn open_claim(_fd: RawFd) -> Option<RawFd> {
    None
}

extern "C" fn prepare_claims_before_fork() {
    for (mapped, pending) in TABLES.mapped.iter().zip(&TABLES.pending) {
        let fd = mapped.load(Ordering::SeqCst);
        if fd >= 0 {
            match open_claim(fd) {
                Some(claim) => pending.store(claim, Ordering::SeqCst),
                None => {
                    UNCLAIMED_FORKS.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }
}

extern "C" fn drop_claims_in_parent() {
    FORKS.fetch_add(1, Ordering::SeqCst);
    for pending in &TABLES.pending {
        let claim = pending.swap(-1, Ordering::SeqCst);
        if claim >= 0 {
            // SAFETY: the parent's copy of a descriptor it opened before the
            // fork; the child's copy keeps the lock alive.
            unsafe { libc::close(claim) };
        }
    }
}

extern "C" fn keep_claims_in_child() {
    for (claim, pending) in TABLES.claim.iter().zip(&TABLES.pending) {
        let new = pending.swap(-1, Ordering::SeqCst);
        if new >= 0 {
            let inherited = claim.swap(new, Ordering::SeqCst);
            if inherited >= 0 {
                // SAFETY: this child's copy of its parent's own claim; the
                // parent still holds that description, and the new claim
                // stands for this child. close is async-signal-safe.
                unsafe { libc::close(inherited) };
            }
        }
    }
}

/// Whether the fork handlers are in place (registered on first use). Without
/// them no fork is seen: every image must be taken as shared.
pub fn fork_handlers_registered() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| {
        // SAFETY: the handlers touch only atomics and call open, fcntl and close.
        let status = unsafe {
            libc::pthread_atfork(
                Some(prepare_claims_before_fork),
                Some(drop_claims_in_parent),
                Some(keep_claims_in_child),
            )
        };
        status == 0
    })
}

/// Lets future children of this process claim `file`. Returns false if it
/// could not be tracked (more than [`SLOTS`] images at once, or no fork handlers).
pub fn track_mapped_file(file: &File) -> bool {
    if !fork_handlers_registered() {
        return false;
    }
    let fd = file.as_raw_fd();
    TABLES.mapped.iter().any(|slot| {
        slot.compare_exchange(-1, fd, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    })
}

/// Forgets `file` and drops this process's claim on it; call before closing it.
pub fn untrack_mapped_file(file: &File) {
    let fd = file.as_raw_fd();
    for (mapped, claim) in TABLES.mapped.iter().zip(&TABLES.claim) {
        if mapped.load(Ordering::SeqCst) == fd {
            let held = claim.swap(-1, Ordering::SeqCst);
            if held >= 0 {
                // SAFETY: our own claim descriptor, no longer referenced.
                unsafe { libc::close(held) };
            }
            mapped.store(-1, Ordering::SeqCst);
        }
    }
}

/// Forks so far, counting as well those after which a child holds no claim.
pub fn forks_so_far() -> (u64, u64) {
    (
        FORKS.load(Ordering::SeqCst),
        UNCLAIMED_FORKS.load(Ordering::SeqCst),
    )
}

/// Whether another process (or another description in this one) holds a
/// claim on `file`, that is: whether some process other than its creator maps it.
#[cfg(target_os = "linux")]
pub fn claimed_by_another_process(file: &File) -> bool {
    let mut lock = whole_file_lock(libc::F_WRLCK as libc::c_short);
    // SAFETY: F_OFD_GETLK fills `lock` with a conflicting lock, or F_UNLCK.
    let status = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut lock) };
    // Unknown means in use: rewriting a file another process maps is unsafe.
    status != 0 || lock.l_type != libc::F_UNLCK as libc::c_short
}

#[cfg(not(target_os = "linux"))]
pub fn claimed_by_another_process(_file: &File) -> bool {
    true
}
