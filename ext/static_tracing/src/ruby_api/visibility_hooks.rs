//! `StaticTracing::MethodTracing::VisibilityHooks`: `private`, `protected`,
//! `public` and `module_function` of a traced class, seen by the tracer.
//!
//! A wrapper lives in a prepended module, so when a class makes a wrapped
//! method private after defining it (`private def index`, `private :index`)
//! the wrapper must follow, or the method would stay callable from outside.
//! Ruby calls no hook for that. The hooks cannot be written in Ruby: the
//! argument-less form (`private` on its own line) changes the visibility of
//! the scope that called it, and a Ruby method in between would become that
//! scope. C frames are skipped when Ruby looks for the scope, so these
//! hooks are C functions that call `super` and then tell Ruby which names
//! changed.

use super::root;
use magnus::{rb_sys::AsRawValue, Error, Module, RModule, Ruby};
use rb_sys::{rb_ary_new_from_values, rb_call_super, rb_funcallv, rb_intern2, VALUE};
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Calls the original method, then `MethodTracing.visibility_changed(self, names)`.
///
/// A raw C function rather than a magnus method: it must add no Ruby frame,
/// and it holds no Rust value that needs dropping, so an exception raised by
/// either call may unwind through it.
unsafe extern "C" fn change_visibility(argc: c_int, argv: *const VALUE, module: VALUE) -> VALUE {
    // SAFETY: Ruby passes `argc` valid VALUEs in `argv`, and the current
    // method's super method is Module#private and friends.
    unsafe {
        let result = rb_call_super(argc, argv);
        if argc > 0 {
            let tracing = NOTIFY_TARGET.load(Ordering::Relaxed) as VALUE;
            let names = rb_ary_new_from_values(argc as _, argv);
            let method = rb_intern2(c"visibility_changed".as_ptr(), 18);
            let args = [module, names];
            rb_funcallv(tracing, method, 2, args.as_ptr());
        }
        result
    }
}

/// `StaticTracing::MethodTracing`, set once at init and registered with the
/// GC as a mark object there: pinned and kept alive, so the address stays
/// valid even if the constant is removed or the heap compacted. (A constant
/// alone guarantees neither: `remove_const` drops it, and compaction may
/// move what only a constant refers to.)
static NOTIFY_TARGET: AtomicUsize = AtomicUsize::new(0);

pub fn init(ruby: &Ruby) -> Result<(), Error> {
    let tracing: RModule = root(ruby).define_module("MethodTracing")?;
    let hooks = tracing.define_module("VisibilityHooks")?;
    ruby.gc_register_mark_object(tracing);
    NOTIFY_TARGET.store(tracing.as_raw() as usize, Ordering::Relaxed);
    for name in [c"private", c"protected", c"public", c"module_function"] {
        // SAFETY: a valid module, a NUL-terminated name, and a function with
        // the (argc, argv, self) signature arity -1 requires.
        unsafe {
            rb_sys::rb_define_method(
                hooks.as_raw(),
                name.as_ptr(),
                Some(std::mem::transmute::<
                    unsafe extern "C" fn(c_int, *const VALUE, VALUE) -> VALUE,
                    unsafe extern "C" fn() -> VALUE,
                >(change_visibility)),
                -1,
            );
        }
    }
    Ok(())
}
