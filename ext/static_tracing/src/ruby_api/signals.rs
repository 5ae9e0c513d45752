//! The toggle signal, caught by a handler of our own, installed with
//! `sigaction` and given back the same way.
//!
//! In signal context the handler only counts the signal and writes a byte to
//! a pipe. A Ruby thread waiting on the pipe (lib/static_tracing/signal_toggle.rb)
//! takes the count and applies the toggle with the GVL held: no Ruby code
//! runs in signal context.
//!
//! The handler found when the signal is taken keeps running: `on_signal`
//! calls it first, with the same siginfo and ucontext, the way its flags
//! say. Giving the signal back puts that handler back, unless another one
//! replaced ours since (a `Signal.trap`, say), which then stays. Taking the
//! signal again chains whatever handler is there at that moment.

use libc::{c_int, c_void, siginfo_t};
use magnus::{Error, Object, RModule, Ruby};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// The signal that toggles tracing now; 0 when none.
static ARMED: AtomicI32 = AtomicI32::new(0);
/// Toggle signals received and not yet applied.
static RECEIVED: AtomicU64 = AtomicU64::new(0);
/// Write end of the pipe the Ruby thread waits on; -1 when none.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

/// The handler `on_signal` calls first for `CHAINED_SIGNAL`. Written only
/// while `on_signal` is not installed for that signal (see `take`), so it
/// never sees them half set.
static CHAINED_SIGNAL: AtomicI32 = AtomicI32::new(0);
static CHAINED_HANDLER: AtomicUsize = AtomicUsize::new(0);
static CHAINED_SIGINFO: AtomicBool = AtomicBool::new(false);

/// The signal `on_signal` is installed for, and the disposition it
/// replaced, to put back when the signal is given back.
struct Taken {
    signal: c_int,
    replaced: libc::sigaction,
}

// SAFETY: a plain C struct of integers and function addresses.
unsafe impl Send for Taken {}

static TAKEN: Mutex<Option<Taken>> = Mutex::new(None);

/// Signals no handler may take over: uncatchable, or raised by faults that
/// a handler returning normally would only raise again.
const FORBIDDEN: [c_int; 5] = [
    libc::SIGKILL,
    libc::SIGSTOP,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGSEGV,
];

/// Runs in signal context: only atomics, the chained handler and write(2).
extern "C" fn on_signal(signal: c_int, info: *mut siginfo_t, context: *mut c_void) {
    // SAFETY: reading and restoring this thread's errno, which write(2)
    // below may change under the code the signal interrupted.
    let errno = unsafe { *libc::__errno_location() };
    if CHAINED_SIGNAL.load(Ordering::SeqCst) == signal {
        call_chained(signal, info, context);
    }
    if ARMED.load(Ordering::SeqCst) == signal {
        RECEIVED.fetch_add(1, Ordering::SeqCst);
        let fd = WAKE_FD.load(Ordering::SeqCst);
        if fd >= 0 {
            let byte = 0u8;
            // SAFETY: writing one byte from a live stack variable; the
            // descriptor is non-blocking, so a full pipe loses a wake-up
            // byte, never a count.
            unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

fn call_chained(signal: c_int, info: *mut siginfo_t, context: *mut c_void) {
    let handler = CHAINED_HANDLER.load(Ordering::SeqCst);
    if handler == 0 {
        return;
    }
    // SAFETY: `handler` is the address of the handler that was installed
    // for this signal, called the way its flags say, with the siginfo and
    // ucontext the kernel gave this call.
    unsafe {
        if CHAINED_SIGINFO.load(Ordering::SeqCst) {
            let action: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) =
                std::mem::transmute(handler as *const ());
            action(signal, info, context);
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

/// Registers `reset_in_child`, once; a failure is remembered and reported
/// by every `arm`.
fn child_reset_registered() -> Result<(), String> {
    static STATUS: OnceLock<c_int> = OnceLock::new();
    // SAFETY: the handler only stores to atomics.
    let status =
        *STATUS.get_or_init(|| unsafe { libc::pthread_atfork(None, None, Some(reset_in_child)) });
    if status != 0 {
        return Err(format!(
            "cannot register the fork handler that gives forked children their own toggle \
             count (pthread_atfork: {})",
            io::Error::from_raw_os_error(status)
        ));
    }
    Ok(())
}

fn on_signal_address() -> usize {
    on_signal as extern "C" fn(c_int, *mut siginfo_t, *mut c_void) as usize
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
    // SAFETY: `action` is a disposition read from the kernel earlier, or
    // ours (see `take`).
    if unsafe { libc::sigaction(signal, action, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn is_handler_function(action: &libc::sigaction) -> bool {
    action.sa_sigaction != libc::SIG_DFL && action.sa_sigaction != libc::SIG_IGN
}

/// Has `on_signal` call `action` first for `signal`, or nothing when it is
/// not a handler function.
fn chain(signal: c_int, action: &libc::sigaction) {
    CHAINED_SIGNAL.store(0, Ordering::SeqCst);
    if is_handler_function(action) {
        CHAINED_HANDLER.store(action.sa_sigaction, Ordering::SeqCst);
        CHAINED_SIGINFO.store(action.sa_flags & libc::SA_SIGINFO != 0, Ordering::SeqCst);
        CHAINED_SIGNAL.store(signal, Ordering::SeqCst);
    } else {
        CHAINED_HANDLER.store(0, Ordering::SeqCst);
    }
}

/// Installs `on_signal` for `signal`, chained with the handler there now,
/// unless it is installed already.
fn take(signal: c_int, taken: &mut Option<Taken>) -> io::Result<()> {
    let now = disposition(signal)?;
    if now.sa_sigaction == on_signal_address() {
        return Ok(());
    }
    chain(signal, &now);
    // SAFETY: all-zero is a valid sigaction (an empty mask); the fields
    // that matter are set below.
    let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
    ours.sa_sigaction = on_signal_address();
    ours.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
    install(signal, &ours)?;
    *taken = Some(Taken {
        signal,
        replaced: now,
    });
    Ok(())
}

/// Makes `signal` the toggle signal, waking the Ruby side through `wake_fd`.
/// Taking the armed signal again puts `on_signal` back if another handler
/// replaced it, chained with that handler.
pub fn arm(signal: c_int, wake_fd: c_int) -> Result<(), String> {
    let highest = libc::SIGRTMAX();
    if !(1..=highest).contains(&signal) || FORBIDDEN.contains(&signal) {
        return Err(format!(
            "signal {signal} cannot be caught: a signal from 1 to {highest} is expected, other \
             than SIGKILL, SIGSTOP, SIGILL, SIGFPE and SIGSEGV"
        ));
    }
    child_reset_registered()?;
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

    let mut taken = TAKEN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let previous = ARMED.load(Ordering::SeqCst);
    if previous != 0 && previous != signal {
        return Err(format!(
            "signal {previous} is armed; disarm it before arming signal {signal}"
        ));
    }
    take(signal, &mut taken).map_err(|err| format!("signal {signal}: {err}"))?;
    WAKE_FD.store(wake_fd, Ordering::SeqCst);
    ARMED.store(signal, Ordering::SeqCst);
    Ok(())
}

/// Stops toggling on the armed signal and gives the signal back: the
/// handler `on_signal` replaced is installed again, unless another handler
/// replaced `on_signal` since.
pub fn disarm() {
    let mut taken = TAKEN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let signal = ARMED.swap(0, Ordering::SeqCst);
    WAKE_FD.store(-1, Ordering::SeqCst);
    let Some(given_back) = taken.take_if(|taken| taken.signal == signal) else {
        return;
    };
    let still_ours = disposition(signal).is_ok_and(|now| now.sa_sigaction == on_signal_address());
    // Best effort: if it fails, `on_signal` stays and only calls the handler
    // it chains to, as it does for a handler that chains to it.
    if still_ours && install(signal, &given_back.replaced).is_err() {
        *taken = Some(given_back);
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

/// Real signals raised in this test process. The toggle state is
/// process-wide, so the tests take turns.
/// The toggle signal's primitives on `StaticTracing::Native`.
pub(super) fn define_natives(native: RModule) -> Result<(), Error> {
    native.define_singleton_method("arm_signal", function!(arm_with_error, 2))?;
    native.define_singleton_method("disarm_signal", function!(disarm, 0))?;
    native.define_singleton_method("armed_signal", function!(armed, 0))?;
    native.define_singleton_method("take_signals", function!(take_received, 0))?;
    Ok(())
}

fn arm_with_error(ruby: &Ruby, signal: i32, wake_fd: i32) -> Result<(), Error> {
    arm(signal, wake_fd).map_err(|message| super::errors::base_error(ruby, message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    static TURN: Mutex<()> = Mutex::new(());

    /// What the chained C-level handler saw: calls, and the instruction
    /// pointer it read from its ucontext (0 for a null one).
    static CHAINED_CALLS: AtomicUsize = AtomicUsize::new(0);
    static CHAINED_SAW_CONTEXT: AtomicUsize = AtomicUsize::new(0);

    extern "C" fn reads_its_ucontext(_signal: c_int, _info: *mut siginfo_t, context: *mut c_void) {
        CHAINED_CALLS.fetch_add(1, Ordering::SeqCst);
        let context = context.cast::<libc::ucontext_t>();
        // As a handler that inspects the interrupted code does: it trusts
        // the kernel's ucontext to be there.
        // SAFETY: the kernel passes a valid ucontext to an SA_SIGINFO
        // handler; a null one would fault here, which is what is tested.
        let pc = unsafe { (*context).uc_mcontext.gregs[libc::REG_RIP as usize] };
        CHAINED_SAW_CONTEXT.store(pc as usize, Ordering::SeqCst);
    }

    fn install_siginfo_handler(signal: c_int) {
        // SAFETY: a zeroed sigaction with a handler of the SA_SIGINFO signature.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction =
                reads_its_ucontext as extern "C" fn(c_int, *mut siginfo_t, *mut c_void) as usize;
            action.sa_flags = libc::SA_SIGINFO;
            assert_eq!(libc::sigaction(signal, &action, std::ptr::null_mut()), 0);
        }
    }

    fn pipe() -> (c_int, c_int) {
        let mut fds = [0; 2];
        // SAFETY: a valid out-array of two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        (fds[0], fds[1])
    }

    fn close(fds: (c_int, c_int)) {
        // SAFETY: descriptors this test opened and no longer uses.
        unsafe {
            libc::close(fds.0);
            libc::close(fds.1);
        }
    }

    fn raise(signal: c_int) {
        // SAFETY: the handlers installed for `signal` return normally.
        assert_eq!(unsafe { libc::raise(signal) }, 0);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_chained_handler_gets_the_real_ucontext() {
        let _turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let signal = libc::SIGUSR1;
        install_siginfo_handler(signal);
        let fds = pipe();
        // The tests run in any order and share the chained handler's counts.
        let calls = CHAINED_CALLS.load(Ordering::SeqCst);
        CHAINED_SAW_CONTEXT.store(0, Ordering::SeqCst);
        arm(signal, fds.1).unwrap();
        raise(signal);
        assert_eq!(CHAINED_CALLS.load(Ordering::SeqCst), calls + 1);
        assert_ne!(CHAINED_SAW_CONTEXT.load(Ordering::SeqCst), 0);
        assert_eq!(take_received(), 1, "counted too");
        disarm();
        let given_back = disposition(signal).unwrap();
        assert_eq!(
            given_back.sa_sigaction,
            reads_its_ucontext as extern "C" fn(c_int, *mut siginfo_t, *mut c_void) as usize,
            "the replaced handler is back"
        );
        raise(signal);
        assert_eq!(CHAINED_CALLS.load(Ordering::SeqCst), calls + 2);
        assert_eq!(take_received(), 0, "no longer counted");
        close(fds);
    }

    #[test]
    fn a_signal_replaced_since_it_was_given_back_is_taken_again_chained_with_the_new_handler() {
        let _turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let signal = libc::SIGUSR2;
        let fds = pipe();
        arm(signal, fds.1).unwrap();
        disarm();
        install_siginfo_handler(signal);
        let calls = CHAINED_CALLS.load(Ordering::SeqCst);
        arm(signal, fds.1).unwrap();
        raise(signal);
        assert_eq!(CHAINED_CALLS.load(Ordering::SeqCst), calls + 1);
        assert_eq!(take_received(), 1);
        disarm();
        close(fds);
    }

    #[test]
    fn signals_past_sigrtmax_or_forbidden_are_refused_naming_the_range() {
        let _turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let highest = libc::SIGRTMAX();
        for signal in [0, -1, highest + 1, libc::SIGKILL, libc::SIGSEGV] {
            let message = arm(signal, 0).unwrap_err();
            assert!(message.contains(&format!("signal {signal} ")), "{message}");
            assert!(message.contains(&highest.to_string()), "{message}");
        }
        assert_eq!(armed(), 0);
    }
}
