//! The primitives of `StaticTracing.with_trace_context` and its non-block
//! form (`lib/static_tracing/trace_context.rb`, which keeps each fiber's
//! nesting and says what a caller did wrong): set and clear the current
//! fiber's context for the recorder, and parse a `traceparent` header.
//! The rules of what an id is live in `stapsdt::trace_context`.

use super::errors::argument_error;
use crate::{internal_probes, trace_contexts};
use magnus::{function, Error, Object, RModule, RString, Ruby};
use stapsdt::trace_context::TraceContext;

/// `trace_context_set(trace_id, span_id)`: the current fiber is in this
/// context from now on; ArgumentError names an id that is not one.
fn set(ruby: &Ruby, trace_id: RString, span_id: RString) -> Result<(), Error> {
    // SAFETY: the bytes are copied out before any Ruby code runs.
    let context = unsafe { TraceContext::from_hex(trace_id.as_slice(), span_id.as_slice()) }
        .map_err(|err| argument_error(ruby, err.to_string()))?;
    trace_contexts::set(context);
    internal_probes::trace_context(|| (context.trace_hex(), context.span_hex()));
    Ok(())
}

/// `trace_context_clear`: the current fiber is in no context from now on.
fn clear() {
    trace_contexts::clear();
    internal_probes::trace_context(|| (String::new(), String::new()));
}

/// `traceparent(header)`: `[trace_id, span_id]` (the parent id) of a valid
/// W3C `traceparent` header, nil for any other (ignored, never an error).
fn traceparent(header: RString) -> Option<(String, String)> {
    // SAFETY: the bytes are read before any Ruby code runs.
    unsafe { TraceContext::from_traceparent(header.as_slice()) }
        .map(|context| (context.trace_hex(), context.span_hex()))
}

pub fn define_natives(native: RModule) -> Result<(), Error> {
    native.define_singleton_method("trace_context_set", function!(set, 2))?;
    native.define_singleton_method("trace_context_clear", function!(clear, 0))?;
    native.define_singleton_method("traceparent", function!(traceparent, 1))?;
    Ok(())
}
