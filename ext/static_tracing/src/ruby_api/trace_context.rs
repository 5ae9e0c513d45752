//! `StaticTracing.with_trace_context`, `set_trace_context` and
//! `clear_trace_context`, each one native call (a request sets and clears
//! a context: no Ruby method between), the pair dealing in an Integer
//! token, as OpenTelemetry's `Context.attach` and `detach` do (nothing is
//! allocated per request); the ids `lib/static_tracing/trace_context.rb`
//! makes a `StaticTracing::TraceContext` of; parsing a `traceparent`
//! header. What an id is lives in `stapsdt::trace_context`; each fiber's
//! nesting in `trace_contexts`.

use super::arguments::describe;
use super::errors::{argument_error, trace_context_error, type_error};
use super::root;
use crate::fibers;
use crate::internal_probes;
use crate::trace_contexts::{self, PopError};
use magnus::rb_sys::{protect, FromRawValue};
use magnus::{Error, Integer, Object, RModule, RString, Ruby, Value};
use rb_sys::VALUE;
use stapsdt::trace_context::TraceContext;

/// The ids of the context `trace_id` and `span_id` name. TypeError for
/// one that is not a String, ArgumentError (saying the form expected) for
/// one that is not an id.
fn parse_ids(ruby: &Ruby, trace_id: Value, span_id: Value) -> Result<TraceContext, Error> {
    let text = |value: Value, what: &str| {
        RString::from_value(value).ok_or_else(|| {
            type_error(
                ruby,
                format!(
                    "a {what} is a String of lowercase hex digits, got {}",
                    describe(ruby, value)
                ),
            )
        })
    };
    let (trace_id, span_id) = (text(trace_id, "trace id")?, text(span_id, "span id")?);
    // SAFETY: the bytes are read before any Ruby code runs.
    unsafe { TraceContext::from_hex(trace_id.as_slice(), span_id.as_slice()) }
        .map_err(|err| argument_error(ruby, err.to_string()))
}

/// The current fiber's context changed to `now`. Inlined: while no tracer
/// is attached, this is the probe's semaphore check and nothing more.
#[inline]
fn fire_changed(now: Option<TraceContext>) {
    internal_probes::trace_context(|| shown_ids(now));
}

/// The probe's arguments, made only while a tracer is attached.
#[cold]
#[inline(never)]
fn shown_ids(now: Option<TraceContext>) -> (String, String) {
    now.map_or_else(Default::default, |context| {
        (context.trace_hex(), context.span_hex())
    })
}

/// `StaticTracing.set_trace_context(trace_id, span_id)`: puts the current
/// fiber in the context until `clear_trace_context` is given the token
/// this returns.
fn set_trace_context(ruby: &Ruby, trace_id: Value, span_id: Value) -> Result<u64, Error> {
    let context = parse_ids(ruby, trace_id, span_id)?;
    let token = trace_contexts::push(context);
    fire_changed(Some(context));
    Ok(token)
}

/// `StaticTracing.clear_trace_context(token)`: the current fiber is back
/// in the context it was in before the one `token` set. A context set on
/// another thread or fiber, cleared already, or set outside contexts still
/// set is a TraceContextError, and changes nothing.
fn clear_trace_context(ruby: &Ruby, token: Value) -> Result<(), Error> {
    let Some(token) = Integer::from_value(token).and_then(|token| token.to_u64().ok()) else {
        return Err(type_error(
            ruby,
            format!(
                "clear_trace_context takes the token set_trace_context returned, got {}",
                describe(ruby, token)
            ),
        ));
    };
    match trace_contexts::pop(token, false) {
        Ok(now) => {
            fire_changed(now);
            Ok(())
        }
        Err(problem) => Err(trace_context_error(ruby, pop_refused(token, problem))),
    }
}

/// Why `clear_trace_context(token)` changed nothing, as its error says.
fn pop_refused(token: u64, problem: PopError) -> String {
    let named = |context: Option<TraceContext>| {
        context.map_or_else(
            || format!("context of token {token}"),
            |context| context.to_string(),
        )
    };
    let elsewhere = "clear a context on the thread and fiber that set it";
    match problem {
        PopError::OtherThread => format!("the {} was set on another thread: {elsewhere}", named(None)),
        PopError::OtherFiber(context) => {
            format!("the {context} was set on another fiber of this thread: {elsewhere}")
        }
        PopError::Popped(context) => format!("the {} was cleared already", named(context)),
        PopError::NeverSet => format!(
            "no context was set with token {token} on this thread: clear_trace_context takes what \
             set_trace_context returned"
        ),
        PopError::Inner { context, inner } => format!(
            "the {} was cleared before the contexts set inside it, still set: {}; clear those first",
            context,
            listed(&inner)
        ),
    }
}

/// `StaticTracing.with_trace_context(trace_id, span_id) { }`: runs the
/// block in the context, then pops it, also when the block raises, breaks
/// or throws; contexts the block left set inside it are popped too, and
/// (when the block returned) a TraceContextError says so. Native: a Ruby
/// method over the pair cost 1.6x this (on Ruby 3.1 its `block_given?`
/// alone is a C method call). The block is yielded under one
/// `rb_protect`: whatever ended it is raised again once the context is
/// popped and this function's frames are gone.
fn with_trace_context(ruby: &Ruby, trace_id: Value, span_id: Value) -> Result<Value, Error> {
    if !ruby.block_given() {
        return Err(argument_error(
            ruby,
            "with_trace_context needs a block (set_trace_context has none)".to_owned(),
        ));
    }
    let context = parse_ids(ruby, trace_id, span_id)?;
    // The block runs in this fiber, and returns to it.
    let (token, fiber_key) = trace_contexts::push_keyed(context);
    fire_changed(Some(context));
    // SAFETY: yields to the block given to this method; whatever ends it
    // other than returning is caught by `protect` and returned here.
    let yielded = protect(|| unsafe { rb_sys::rb_yield(rb_sys::Qundef as VALUE) });
    let left = match trace_contexts::pop_on(fiber_key, token, true) {
        Ok(now) => {
            fire_changed(now);
            Vec::new()
        }
        Err(PopError::Inner { inner, .. }) => {
            fire_changed(trace_contexts::current());
            inner
        }
        // The block never sees the token: nothing else can have popped it.
        Err(_) => Vec::new(),
    };
    // SAFETY: what the block returned, a live Ruby value.
    let value = unsafe { Value::from_raw(yielded?) };
    if left.is_empty() {
        return Ok(value);
    }
    Err(trace_context_error(
        ruby,
        format!(
            "contexts set inside the {} were left set, and are cleared: {}",
            context,
            listed(&left)
        ),
    ))
}

fn listed(contexts: &[TraceContext]) -> String {
    contexts
        .iter()
        .map(TraceContext::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `trace_context_current`: the ids of the current fiber's innermost
/// context, or nil.
fn current() -> Option<(String, String)> {
    trace_contexts::current().map(|context| (context.trace_hex(), context.span_hex()))
}

/// `traceparent(header)`: `[trace_id, span_id]` (the parent id) of a valid
/// W3C `traceparent` header, nil for any other (ignored, never an error).
fn traceparent(header: RString) -> Option<(String, String)> {
    // SAFETY: the bytes are read before any Ruby code runs.
    unsafe { TraceContext::from_traceparent(header.as_slice()) }
        .map(|context| (context.trace_hex(), context.span_hex()))
}

pub fn define_natives(ruby: &Ruby, native: RModule) -> Result<(), Error> {
    let root = root(ruby);
    root.define_singleton_method("with_trace_context", function!(with_trace_context, 2))?;
    root.define_singleton_method("set_trace_context", function!(set_trace_context, 2))?;
    root.define_singleton_method("clear_trace_context", function!(clear_trace_context, 1))?;
    native.define_singleton_method("trace_context_current", function!(current, 0))?;
    native.define_singleton_method("traceparent", function!(traceparent, 1))?;
    native.define_singleton_method("fiber_key_kind", function!(fibers::key_kind, 0))?;
    Ok(())
}
