//! A panic at a native entry point, raised as a Ruby exception of the
//! gem's own (or Ruby's `RuntimeError` where the gem has none) with what
//! it said, instead of the `fatal` that nothing rescues. Every entry point
//! of a library that reads what another process wrote runs its work
//! through [`guard`]; work done without the GVL ([`crate::gvl`]) brings its
//! panic back to the thread that holds the GVL first.

use magnus::{Error, ExceptionClass};
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `work`; a panic in it becomes an exception of the class `class`
/// gives (asked only then: a method's every call runs through here)
/// saying what failed and that it is a bug.
pub fn guard<T>(
    class: impl FnOnce() -> ExceptionClass,
    work: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    match catch_unwind(AssertUnwindSafe(work)) {
        Ok(result) => result,
        Err(panic) => Err(Error::new(
            class(),
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

/// `magnus::method!` with the method's work run through [`guard`]: a panic
/// in it (or in converting its arguments or its result) raises an
/// exception of the class `$class(ruby)` names, not `fatal`. A binding
/// defines every method through it (a contract spec holds them to it).
///
/// ```ignore
/// class.define_method("scrape", guarded_method!(internal_error, Tally::scrape, 1))?;
/// ```
#[macro_export]
macro_rules! guarded_method {
    ($class:path, $name:expr, -1) => {
        ::magnus::method!(
            |ruby: &::magnus::Ruby, rb_self: ::magnus::Value, args: &[::magnus::Value]| {
                $crate::panics::guard(|| $class(ruby), || {
                    use ::magnus::method::{MethodCAry, RubyMethodCAry};
                    // SAFETY: `args` is the slice of arguments Ruby passed,
                    // alive for the call: its length and start are a valid
                    // (argc, argv) pair.
                    unsafe {
                        $name.call_convert_value(
                            ruby,
                            args.len() as ::std::ffi::c_int,
                            args.as_ptr(),
                            rb_self,
                        )
                    }
                })
            },
            -1
        )
    };
    ($class:path, $name:expr, 0) => { $crate::guarded_method!(@ $class, $name, 0, Method0, RubyMethod0;) };
    ($class:path, $name:expr, 1) => { $crate::guarded_method!(@ $class, $name, 1, Method1, RubyMethod1; a) };
    ($class:path, $name:expr, 2) => { $crate::guarded_method!(@ $class, $name, 2, Method2, RubyMethod2; a, b) };
    ($class:path, $name:expr, 3) => { $crate::guarded_method!(@ $class, $name, 3, Method3, RubyMethod3; a, b, c) };
    ($class:path, $name:expr, 4) => { $crate::guarded_method!(@ $class, $name, 4, Method4, RubyMethod4; a, b, c, d) };
    (@ $class:path, $name:expr, $arity:tt, $method:ident, $ruby_method:ident; $($arg:ident),*) => {
        ::magnus::method!(
            |ruby: &::magnus::Ruby, rb_self: ::magnus::Value $(, $arg: ::magnus::Value)*| {
                $crate::panics::guard(|| $class(ruby), || {
                    use ::magnus::method::{$method, $ruby_method};
                    $name.call_convert_value(ruby, rb_self $(, $arg)*)
                })
            },
            $arity
        )
    };
}

/// `magnus::function!` through [`guard`], as [`guarded_method!`] is
/// `magnus::method!`.
#[macro_export]
macro_rules! guarded_function {
    ($class:path, $name:expr, -1) => {
        ::magnus::function!(
            |ruby: &::magnus::Ruby, args: &[::magnus::Value]| {
                $crate::panics::guard(|| $class(ruby), || {
                    use ::magnus::method::{FunctionCAry, RubyFunctionCAry};
                    // SAFETY: `args` is the slice of arguments Ruby passed,
                    // alive for the call: its length and start are a valid
                    // (argc, argv) pair.
                    unsafe {
                        $name.call_convert_value(
                            ruby,
                            args.len() as ::std::ffi::c_int,
                            args.as_ptr(),
                        )
                    }
                })
            },
            -1
        )
    };
    ($class:path, $name:expr, 0) => { $crate::guarded_function!(@ $class, $name, 0, Function0, RubyFunction0;) };
    ($class:path, $name:expr, 1) => { $crate::guarded_function!(@ $class, $name, 1, Function1, RubyFunction1; a) };
    ($class:path, $name:expr, 2) => { $crate::guarded_function!(@ $class, $name, 2, Function2, RubyFunction2; a, b) };
    ($class:path, $name:expr, 3) => { $crate::guarded_function!(@ $class, $name, 3, Function3, RubyFunction3; a, b, c) };
    ($class:path, $name:expr, 4) => { $crate::guarded_function!(@ $class, $name, 4, Function4, RubyFunction4; a, b, c, d) };
    ($class:path, $name:expr, 6) => {
        $crate::guarded_function!(@ $class, $name, 6, Function6, RubyFunction6; a, b, c, d, e, f)
    };
    (@ $class:path, $name:expr, $arity:tt, $function:ident, $ruby_function:ident; $($arg:ident),*) => {
        ::magnus::function!(
            |ruby: &::magnus::Ruby $(, $arg: ::magnus::Value)*| {
                $crate::panics::guard(|| $class(ruby), || {
                    use ::magnus::method::{$function, $ruby_function};
                    $name.call_convert_value(ruby $(, $arg)*)
                })
            },
            $arity
        )
    };
}
