//! Exception classes: defined once, in `lib/static_tracing/errors.rb`, and
//! resolved here when the extension loads, so that raising one later can
//! neither fail nor panic.

use super::root;
use magnus::{value::Opaque, Error, ExceptionClass, Module, Ruby};
use std::sync::OnceLock;

struct ErrorClasses {
    base: Opaque<ExceptionClass>,
    provider_load: Opaque<ExceptionClass>,
    recorder: Opaque<ExceptionClass>,
    trace_context: Opaque<ExceptionClass>,
    internal: Opaque<ExceptionClass>,
}

static CLASSES: OnceLock<ErrorClasses> = OnceLock::new();

/// Resolves the gem's exception classes; the extension does not load
/// without them.
pub fn init(ruby: &Ruby) -> Result<(), Error> {
    if CLASSES.get().is_some() {
        return Ok(());
    }
    let classes = ErrorClasses {
        base: resolve(ruby, "Error")?.into(),
        provider_load: resolve(ruby, "ProviderLoadError")?.into(),
        recorder: resolve(ruby, "RecorderError")?.into(),
        trace_context: resolve(ruby, "TraceContextError")?.into(),
        internal: resolve(ruby, "InternalError")?.into(),
    };
    let _ = CLASSES.set(classes);
    Ok(())
}

fn resolve(ruby: &Ruby, name: &str) -> Result<ExceptionClass, Error> {
    let class: ExceptionClass = root(ruby).const_get(name).map_err(|err| {
        Error::new(
            ruby.exception_load_error(),
            format!(
                "static_tracing: StaticTracing::{name} must be an exception class defined before \
                 the native extension loads (lib/static_tracing/errors.rb): {err}"
            ),
        )
    })?;
    // Held for the life of the process, and pinned: the statics above keep
    // it by address, whatever becomes of the constant.
    ruby.gc_register_mark_object(class);
    Ok(class)
}

/// The class `pick` chooses, or RuntimeError if `init` has not run (it runs
/// first when the extension loads, so only a broken build gets there).
fn class(ruby: &Ruby, pick: fn(&ErrorClasses) -> Opaque<ExceptionClass>) -> ExceptionClass {
    CLASSES
        .get()
        .map(|classes| ruby.get_inner(pick(classes)))
        .unwrap_or_else(|| ruby.exception_runtime_error())
}

/// `StaticTracing::InternalError`, which a panic at an entry point raises
/// (`ruby_glue::panics::guard`).
pub fn internal_error_class(ruby: &Ruby) -> ExceptionClass {
    class(ruby, |classes| classes.internal)
}

/// `StaticTracing::Error`, the base of the gem's own errors.
pub fn base_error(ruby: &Ruby, message: String) -> Error {
    Error::new(class(ruby, |classes| classes.base), message)
}

/// `StaticTracing::ProviderLoadError`: an image could not be loaded anywhere.
pub fn provider_load_error(ruby: &Ruby, message: String) -> Error {
    Error::new(class(ruby, |classes| classes.provider_load), message)
}

/// `StaticTracing::RecorderError`: the recorder could not start, or snapshot.
pub fn recorder_error(ruby: &Ruby, message: String) -> Error {
    Error::new(class(ruby, |classes| classes.recorder), message)
}

/// `StaticTracing::TraceContextError`: a trace context cleared where it
/// was not set, or before those set inside it.
pub fn trace_context_error(ruby: &Ruby, message: String) -> Error {
    Error::new(class(ruby, |classes| classes.trace_context), message)
}

pub fn argument_error(ruby: &Ruby, message: String) -> Error {
    Error::new(ruby.exception_arg_error(), message)
}

pub fn type_error(ruby: &Ruby, message: String) -> Error {
    Error::new(ruby.exception_type_error(), message)
}

pub fn range_error(ruby: &Ruby, message: String) -> Error {
    Error::new(ruby.exception_range_error(), message)
}
