//! The toggle signal, caught with signal-hook-registry.
//!
//! In signal context the action only counts the signal and writes a byte to
//! a pipe. A Ruby thread waiting on the pipe (lib/static_tracing/signal_toggle.rb)
//! takes the count and applies the toggle with the GVL held: no Ruby code
//! runs in signal context.
//!
//! The handler that was installed when the signal is taken keeps running.
//! The registry chains to the one it found the first time, and never
//! uninstalls itself; so giving the signal back is done here, by putting
//! back the disposition found when it was taken. A handler installed in
//! between (e.g. a `Signal.trap` while tracing was in another mode) is
//! called from `on_signal`, since the registry does not know about it.

use libc::c_int;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

/// The signal that toggles tracing now; 0 when none.
static ARMED: AtomicI32 = AtomicI32::new(0);
/// Toggle signals received and not yet applied.
static RECEIVED: AtomicU64 = AtomicU64::new(0);
/// Write end of the pipe the Ruby thread waits on; -1 when none.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

/// The handler found over the registry's default when the signal was last
/// taken, which the registry would not call. Only one signal is taken at a
/// time; these are written only while the registry's handler is not
/// installed for `CHAINED_SIGNAL`, so `on_signal` never sees them half set.
static CHAINED_SIGNAL: AtomicI32 = AtomicI32::new(0);
static CHAINED_HANDLER: AtomicUsize = AtomicUsize::new(0);
static CHAINED_SIGINFO: AtomicBool = AtomicBool::new(false);

struct Registration {
    signal: c_int,
    /// The disposition the registry found, and chains to, forever.
    first: libc::sigaction,
    /// The registry's handler, to reinstall when the signal is taken again.
    registry: libc::sigaction,
    /// The disposition found when the signal was last taken, put back when
    /// it is given back.
    given_back: libc::sigaction,
}

// SAFETY: plain C structs of integers and function addresses.
unsafe impl Send for Registration {}

static REGISTRATIONS: Mutex<Vec<Registration>> = Mutex::new(Vec::new());

/// Runs in signal context: only atomics, the chained handler and write(2).
fn on_signal(signal: c_int, info: &libc::siginfo_t) {
    if CHAINED_SIGNAL.load(Ordering::SeqCst) == signal {
        call_chained(signal, info);
    }
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

fn call_chained(signal: c_int, info: &libc::siginfo_t) {
    let handler = CHAINED_HANDLER.load(Ordering::SeqCst);
    if handler == 0 {
        return;
    }
    let info = (info as *const libc::siginfo_t).cast_mut();
    // SAFETY: `handler` is the address of a handler that was installed for
    // this signal, called the way its flags say. The registry gives its
    // actions no ucontext to pass on: the handler gets a null one.
    unsafe {
        if CHAINED_SIGINFO.load(Ordering::SeqCst) {
            let action: extern "C" fn(c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(handler as *const ());
            action(signal, info, std::ptr::null_mut());
        } else {
            let action: extern "C" fn(c_int) = std::mem::transmute(handler as *const ());
            action(signal);
        }
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

/// Has `on_signal` call `action` for `signal`, or nothing when it is not a
/// handler function.
fn chain(signal: c_int, action: Option<&libc::sigaction>) {
    CHAINED_SIGNAL.store(0, Ordering::SeqCst);
    match action {
        Some(action) if is_handler_function(action) => {
            CHAINED_HANDLER.store(action.sa_sigaction, Ordering::SeqCst);
            CHAINED_SIGINFO.store(action.sa_flags & libc::SA_SIGINFO != 0, Ordering::SeqCst);
            CHAINED_SIGNAL.store(signal, Ordering::SeqCst);
        }
        _ => CHAINED_HANDLER.store(0, Ordering::SeqCst),
    }
}

/// Puts the registry's handler back on a signal it registered before,
/// chained with whatever is installed now.
fn retake(registration: &mut Registration) -> Result<(), String> {
    let signal = registration.signal;
    let error = |err: io::Error| format!("signal {signal}: {err}");
    let now = disposition(signal).map_err(error)?;
    if now.sa_sigaction == registration.registry.sa_sigaction {
        return Ok(());
    }
    if now.sa_sigaction == registration.first.sa_sigaction {
        chain(signal, None);
    } else if is_handler_function(&registration.first) {
        // The registry calls the handler it first found: it would run
        // although it was replaced, and the new one would not.
        return Err(format!(
            "signal {signal} got another handler since static_tracing first used it, \
             and static_tracing would call the replaced one; choose another signal"
        ));
    } else {
        chain(signal, Some(&now));
    }
    install(signal, &registration.registry).map_err(error)?;
    registration.given_back = now;
    Ok(())
}

/// Makes `signal` the toggle signal, waking the Ruby side through `wake_fd`.
/// Taking the armed signal again makes sure the registry's handler is the
/// installed one.
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
    let previous = ARMED.load(Ordering::SeqCst);
    if previous != 0 && previous != signal {
        return Err(format!(
            "signal {previous} is armed; disarm it before arming signal {signal}"
        ));
    }
    match registrations.iter_mut().find(|r| r.signal == signal) {
        None => {
            let error = |err: io::Error| format!("signal {signal}: {err}");
            let first = disposition(signal).map_err(error)?;
            // SAFETY: the action is async-signal-safe (see `on_signal`).
            unsafe {
                signal_hook_registry::register_sigaction(signal, move |info| {
                    on_signal(signal, info)
                })
            }
            .map_err(error)?;
            let registry = disposition(signal).map_err(error)?;
            registrations.push(Registration {
                signal,
                first,
                registry,
                given_back: first,
            });
        }
        Some(registration) => retake(registration)?,
    }
    WAKE_FD.store(wake_fd, Ordering::SeqCst);
    ARMED.store(signal, Ordering::SeqCst);
    Ok(())
}

/// Stops toggling on the armed signal and gives the signal back: the
/// disposition found when it was taken is installed again, unless another
/// handler replaced the registry's since.
pub fn disarm() {
    let registrations = REGISTRATIONS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let signal = ARMED.swap(0, Ordering::SeqCst);
    WAKE_FD.store(-1, Ordering::SeqCst);
    if signal == 0 {
        return;
    }
    let Some(registration) = registrations.iter().find(|r| r.signal == signal) else {
        return;
    };
    let still_ours =
        disposition(signal).is_ok_and(|now| now.sa_sigaction == registration.registry.sa_sigaction);
    // Best effort: if it fails, or another handler replaced the registry's,
    // the registry's handler only calls the handlers it chains to now.
    if still_ours && install(signal, &registration.given_back).is_ok() {
        chain(signal, None);
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
