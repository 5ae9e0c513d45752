//! The primitives of `StaticTracing.with_trace_context` and its non-block
//! form (`lib/static_tracing/trace_context.rb`, which words what a caller
//! did wrong): push and pop the current fiber's contexts for the recorder,
//! and parse a `traceparent` header. What an id is lives in
//! `stapsdt::trace_context`; each fiber's nesting in `trace_contexts`.

use super::arguments::describe;
use super::errors::{argument_error, type_error};
use crate::internal_probes;
use crate::trace_contexts::{self, PopError};
use magnus::{function, Error, Object, RModule, RString, Ruby, Symbol, Value};
use stapsdt::trace_context::TraceContext;

/// `trace_context_push(trace_id, span_id)`: the current fiber is in this
/// context from now on; returns the token that pops it. ArgumentError
/// names an id that is not one.
fn push(ruby: &Ruby, trace_id: Value, span_id: Value) -> Result<u64, Error> {
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
    // SAFETY: the bytes are copied out before any Ruby code runs.
    let context = unsafe { TraceContext::from_hex(trace_id.as_slice(), span_id.as_slice()) }
        .map_err(|err| argument_error(ruby, err.to_string()))?;
    let token = trace_contexts::push(context);
    internal_probes::trace_context(|| (context.trace_hex(), context.span_hex()));
    Ok(token)
}

/// `trace_context_pop(token, unwind)`: pops the context `token` names from
/// the current fiber. nil when it was popped alone; else `[problem,
/// inner]`, problem `:other_thread`, `:other_fiber`, `:popped` (nothing
/// changed) or `:inner` (contexts pushed inside it, `inner`, as "trace T
/// span S", were still there: popped too with `unwind`, else nothing
/// changed).
fn pop(ruby: &Ruby, token: u64, unwind: bool) -> Option<(Symbol, Vec<String>)> {
    let popped = trace_contexts::pop(token, unwind);
    let changed = match &popped {
        Ok(now) => Some(*now),
        Err(PopError::Inner(_)) if unwind => Some(trace_contexts::current()),
        Err(_) => None,
    };
    if let Some(now) = changed {
        internal_probes::trace_context(|| {
            now.map_or_else(Default::default, |context| {
                (context.trace_hex(), context.span_hex())
            })
        });
    }
    let (problem, inner) = match popped {
        Ok(_) => return None,
        Err(PopError::OtherThread) => ("other_thread", Vec::new()),
        Err(PopError::OtherFiber) => ("other_fiber", Vec::new()),
        Err(PopError::Popped) => ("popped", Vec::new()),
        Err(PopError::Inner(inner)) => ("inner", inner),
    };
    let inner = inner
        .iter()
        .map(|context| format!("trace {} span {}", context.trace_hex(), context.span_hex()))
        .collect();
    Some((ruby.to_symbol(problem), inner))
}

/// `trace_context_current`: `[trace_id, span_id]` of the current fiber's
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

pub fn define_natives(native: RModule) -> Result<(), Error> {
    native.define_singleton_method("trace_context_push", function!(push, 2))?;
    native.define_singleton_method("trace_context_pop", function!(pop, 2))?;
    native.define_singleton_method("trace_context_current", function!(current, 0))?;
    native.define_singleton_method("traceparent", function!(traceparent, 1))?;
    Ok(())
}
