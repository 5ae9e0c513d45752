//! The toggle signal, caught with signal-hook-registry.
//!
//! In signal context the action only counts the signal and writes a byte to
//! a pipe. A Ruby thread waiting on the pipe (lib/static_tracing/signal_toggle.rb)
//! takes the count and applies the toggle with the GVL held: no Ruby code
//! runs in signal context.
//!
//! The registry calls whatever handler was installed before it took the
//! signal, so the application's own handler keeps running. It never
//! uninstalls itself, so giving a signal back is done here: when the signal
//! had no handler before (default or ignored), that disposition is restored
//! as it was; when it had one, the registry keeps calling it, which is what
//! the process did before. Taking the signal again puts the registry's
//! handler back, if nobody installed another one in between.

use libc::c_int;
use std::io;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Mutex, Once};

/// The signal that toggles tracing now; 0 when none.
static ARMED: AtomicI32 = AtomicI32::new(0);
/// Toggle signals received and not yet applied.
static RECEIVED: AtomicU64 = AtomicU64::new(0);
/// Write end of the pipe the Ruby thread waits on; -1 when none.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

struct Registration {
    signal: c_int,
    /// The disposition before the registry took the signal (it chains to it).
    before: libc::sigaction,
    /// The registry's handler, to reinstall after giving the signal back.
    registry: libc::sigaction,
}

// SAFETY: plain C structs of integers and function addresses.
unsafe impl Send for Registration {}

static REGISTRATIONS: Mutex<Vec<Registration>> = Mutex::new(Vec::new());

/// Runs in signal context: only atomics and write(2), both async-signal-safe.
fn on_signal(signal: c_int) {
    if ARMED.load(Ordering::SeqCst) != signal {
        return;
    }
    RECEIVED.fetch_add(1, Ordering::SeqCst);
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        let byte = 0u8;
        // SAFETY: writing one byte from a live stack variable; the descriptor
        // is non-blocking, so a full pipe loses a wake-up byte, never a count.
        unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
    }
}

/// A child starts with nothing received, and no pipe until Ruby gives it its
/// own (signals that arrive before that are counted and picked up then).
extern "C" fn reset_in_child() {
    RECEIVED.store(0, Ordering::SeqCst);
    WAKE_FD.store(-1, Ordering::SeqCst);
}

fn disposition(signal: c_int) -> io::Result<libc::sigaction> {
    // SAFETY: a null new action only reads the current one into `current`.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signal, std::ptr::null(), &mut current) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(current)
    }
}

fn install(signal: c_int, action: &libc::sigaction) -> io::Result<()> {
    // SAFETY: `action` is a disposition read from the kernel earlier.
    if unsafe { libc::sigaction(signal, action, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn is_handler_function(action: &libc::sigaction) -> bool {
    action.sa_sigaction != libc::SIG_DFL && action.sa_sigaction != libc::SIG_IGN
}

/// Makes `signal` the toggle signal, waking the Ruby side through `wake_fd`.
pub fn arm(signal: c_int, wake_fd: c_int) -> Result<(), String> {
    if signal <= 0 || signal >= 65 || signal_hook_registry::FORBIDDEN.contains(&signal) {
        return Err(format!("signal {signal} cannot be caught"));
    }
    static CHILD_RESET: Once = Once::new();
    CHILD_RESET.call_once(|| {
        // SAFETY: the handler only stores to atomics.
        unsafe { libc::pthread_atfork(None, None, Some(reset_in_child)) };
    });
    // SAFETY: F_SETFL on a descriptor the caller owns; a failure would only
    // make a full pipe block the handler, so it is reported.
    let nonblocking = unsafe {
        let flags = libc::fcntl(wake_fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(wake_fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    if !nonblocking {
        return Err(format!(
            "cannot use descriptor {wake_fd}: {}",
            io::Error::last_os_error()
        ));
    }

    let mut registrations = REGISTRATIONS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let error = |err: io::Error| format!("signal {signal}: {err}");
    match registrations.iter().find(|r| r.signal == signal) {
        None => {
            let before = disposition(signal).map_err(error)?;
            // SAFETY: the action is async-signal-safe (see `on_signal`).
            unsafe { signal_hook_registry::register_sigaction(signal, move |_| on_signal(signal)) }
                .map_err(error)?;
            let registry = disposition(signal).map_err(error)?;
            registrations.push(Registration {
                signal,
                before,
                registry,
            });
        }
        Some(registration) => {
            let now = disposition(signal).map_err(error)?;
            if now.sa_sigaction != registration.registry.sa_sigaction {
                if now.sa_sigaction != registration.before.sa_sigaction {
                    return Err(format!(
                        "signal {signal} got another handler since static_tracing last used it, \
                         and that handler would not be called; choose another signal"
                    ));
                }
                install(signal, &registration.registry).map_err(error)?;
            }
        }
    }
    WAKE_FD.store(wake_fd, Ordering::SeqCst);
    ARMED.store(signal, Ordering::SeqCst);
    Ok(())
}

/// Stops toggling on the armed signal and gives the signal back.
pub fn disarm() {
    let signal = ARMED.swap(0, Ordering::SeqCst);
    WAKE_FD.store(-1, Ordering::SeqCst);
    if signal == 0 {
        return;
    }
    let registrations = REGISTRATIONS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let Some(registration) = registrations.iter().find(|r| r.signal == signal) else {
        return;
    };
    let still_ours =
        disposition(signal).is_ok_and(|now| now.sa_sigaction == registration.registry.sa_sigaction);
    if still_ours && !is_handler_function(&registration.before) {
        // Best effort: if it fails the registry's handler stays, and with no
        // action armed it does nothing.
        let _ = install(signal, &registration.before);
    }
}

/// The signal armed now, 0 if none.
pub fn armed() -> c_int {
    ARMED.load(Ordering::SeqCst)
}

/// Takes the count of toggle signals received since the last call.
pub fn take_received() -> u64 {
    RECEIVED.swap(0, Ordering::SeqCst)
}

/// Monotonic nanoseconds.
pub fn nsec() -> i64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec * 1_000_000_000 + now.tv_nsec
}
