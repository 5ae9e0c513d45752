//! A panic at a native entry point, raised as a Ruby exception of the
//! gem's own (or Ruby's `RuntimeError` where the gem has none) with what
//! it said, instead of the `fatal` that nothing rescues. Every entry point
//! of a library that reads what another process wrote runs its work
//! through [`guard`]; work done without the GVL ([`crate::gvl`]) brings its
//! panic back to the thread that holds the GVL first.

use magnus::{Error, ExceptionClass};
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `work`; a panic in it becomes an exception of `class` saying what
/// failed and that it is a bug.
pub fn guard<T>(
    class: ExceptionClass,
    work: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    match catch_unwind(AssertUnwindSafe(work)) {
        Ok(result) => result,
        Err(panic) => Err(Error::new(
            class,
            format!(
                "internal error: {} (a bug in static_tracing: please report it)",
                message(&*panic)
            ),
        )),
    }
}

/// What a panic said.
pub fn message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic")
}
