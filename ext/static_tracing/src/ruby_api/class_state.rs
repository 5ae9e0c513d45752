//! What method tracing knows about a class, kept by the class itself.
//!
//! Tracing must not keep a class alive: classes made at run time
//! (`Class.new(Base)`, a reloaded constant) have to be collectable like any
//! other. So the per-class state (`StaticTracing::MethodTracing::TracedClass`)
//! hangs off the class in a *hidden* instance variable: an ID without `@`,
//! as CRuby stores a class's own path. The class marks it for the GC, it
//! dies with the class, and `instance_variables` does not list it, so the
//! traced class looks to the application as it did.

use magnus::{prelude::*, Error, RClass, RModule, Ruby, Value};

/// Not a valid Ruby instance variable name, which is what hides it.
const HIDDEN_NAME: &str = "__static_tracing__";

/// A class or a module: what can carry the state.
enum Holder {
    Class(RClass),
    Module(RModule),
}

impl Holder {
    fn of(ruby: &Ruby, value: Value) -> Result<Holder, Error> {
        RClass::from_value(value)
            .map(Holder::Class)
            .or_else(|| RModule::from_value(value).map(Holder::Module))
            .ok_or_else(|| {
                Error::new(
                    ruby.exception_type_error(),
                    format!("a class or module was expected, got {}", value.class()),
                )
            })
    }
}

/// The state stored on `klass`, or nil.
pub(super) fn get(ruby: &Ruby, klass: Value) -> Result<Value, Error> {
    match Holder::of(ruby, klass)? {
        Holder::Class(class) => class.ivar_get(HIDDEN_NAME),
        Holder::Module(module) => module.ivar_get(HIDDEN_NAME),
    }
}

/// Stores `state` on `klass`; a frozen class raises FrozenError.
pub(super) fn set(ruby: &Ruby, klass: Value, state: Value) -> Result<Value, Error> {
    match Holder::of(ruby, klass)? {
        Holder::Class(class) => class.ivar_set(HIDDEN_NAME, state)?,
        Holder::Module(module) => module.ivar_set(HIDDEN_NAME, state)?,
    }
    Ok(state)
}

/// The classes' state on `StaticTracing::Native`, for method wrappers.
pub(super) fn define_natives(native: magnus::RModule) -> Result<(), magnus::Error> {
    use magnus::Object;
    native.define_singleton_method("class_state", function!(get, 1))?;
    native.define_singleton_method("set_class_state", function!(set, 2))?;
    Ok(())
}
