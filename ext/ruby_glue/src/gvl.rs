//! Work done with the GVL released, so that the process's other Ruby
//! threads run meanwhile: what takes time in proportion to a ring's size
//! (creating its file, copying it into a snapshot) must never stop them.

use std::any::Any;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `work` with the GVL released and returns what it returns. `work`
/// must not touch a Ruby object nor call into Ruby: other threads hold the
/// GVL meanwhile. A panic in it is resumed once the GVL is held again, so
/// that it reaches Ruby as the binding's panics do (as an exception).
///
/// Ruby does not release the GVL when an interrupt (a signal, Thread#raise)
/// is pending as this is called; then `work` runs with the GVL held, and the
/// interrupt is handled after it, at Ruby's next check. No interrupt is
/// ever raised through this frame.
pub fn without_gvl<F: FnOnce() -> R, R>(work: F) -> R {
    let mut call: Call<F, R> = Call {
        work: Some(work),
        result: None,
    };
    // SAFETY: `trampoline::<F, R>` gets a pointer to `call`, which outlives
    // this call into Ruby; Ruby calls it at most once, on this thread,
    // before returning. rb_thread_call_without_gvl2 never raises (it returns
    // instead of running the function when interrupted), so no longjmp
    // crosses the Rust frames above it. No unblocking function: the work
    // runs to its end whatever Ruby would like to interrupt.
    unsafe {
        rb_sys::rb_thread_call_without_gvl2(
            Some(trampoline::<F, R>),
            std::ptr::from_mut(&mut call).cast(),
            None,
            std::ptr::null_mut(),
        );
    }
    let result = match call.result {
        Some(result) => result,
        // Interrupted before it started: run it here, with the GVL.
        None => catch_unwind(AssertUnwindSafe(
            call.work.take().expect("work left to run"),
        )),
    };
    result.unwrap_or_else(|panic: Box<dyn Any + Send>| std::panic::resume_unwind(panic))
}

struct Call<F, R> {
    work: Option<F>,
    result: Option<std::thread::Result<R>>,
}

/// Runs the work of the `Call` at `data`; a panic is kept in it, never
/// unwound into Ruby's C frames.
unsafe extern "C" fn trampoline<F: FnOnce() -> R, R>(data: *mut c_void) -> *mut c_void {
    // SAFETY: `data` is the `Call<F, R>` that `without_gvl` passed, alive and
    // borrowed by nothing else until Ruby returns to it.
    let call = unsafe { &mut *data.cast::<Call<F, R>>() };
    if let Some(work) = call.work.take() {
        call.result = Some(catch_unwind(AssertUnwindSafe(work)));
    }
    std::ptr::null_mut()
}
