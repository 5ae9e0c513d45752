//! The primitives of `StaticTracing.with_trace_context` and its non-block
//! form (`lib/static_tracing/trace_context.rb`, which words what a caller
//! did wrong): push and pop the current fiber's contexts for the recorder,
//! and parse a `traceparent` header. What an id is lives in
//! `stapsdt::trace_context`; each fiber's nesting in `trace_contexts`.

use super::arguments::describe;
use super::errors::{argument_error, trace_context_error, type_error};
use super::root;
use crate::internal_probes;
use crate::trace_contexts::{self, PopError};
use magnus::rb_sys::{protect, FromRawValue};
use magnus::{Error, Object, RModule, RString, Ruby, Symbol, Value};
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
    match &popped {
        Ok(now) => fire_changed(*now),
        Err(PopError::Inner(_)) if unwind => fire_changed(trace_contexts::current()),
        Err(_) => {}
    }
    let (problem, inner) = match popped {
        Ok(_) => return None,
        Err(PopError::OtherThread) => ("other_thread", Vec::new()),
        Err(PopError::OtherFiber) => ("other_fiber", Vec::new()),
        Err(PopError::Popped) => ("popped", Vec::new()),
        Err(PopError::Inner(inner)) => ("inner", inner),
    };
    let inner = inner.iter().map(shown).collect();
    Some((ruby.to_symbol(problem), inner))
}

/// What `with_trace_context`'s ensure found: the token it pops, and the
/// contexts the block left set inside it (popped with it).
struct Within {
    token: u64,
    left: Vec<TraceContext>,
}

/// `StaticTracing.with_trace_context(trace_id, span_id) { }`: runs the
/// block in the context, then pops it, also when the block raises;
/// contexts the block left set inside it are popped too, and (when the
/// block returned) a TraceContextError. One native call, the block yielded
/// from here: the whole of setting and clearing a context around a request.
fn with_trace_context(ruby: &Ruby, trace_id: Value, span_id: Value) -> Result<Value, Error> {
    if !ruby.block_given() {
        return Err(argument_error(
            ruby,
            "with_trace_context needs a block (set_trace_context has none)".to_owned(),
        ));
    }
    let mut within = Within {
        token: push(ruby, trace_id, span_id)?,
        left: Vec::new(),
    };
    let data = &mut within as *mut Within as rb_sys::VALUE;
    // SAFETY: `body` only yields and `ensure` only reads and writes
    // `within`, which outlives the call; an exception of the block leaves
    // `rb_ensure` (after `ensure` ran) to `protect`, which returns it here,
    // so that no Rust frame of ours is jumped over.
    let result = protect(|| unsafe { rb_sys::rb_ensure(Some(body), 0, Some(ensure), data) })?;
    if !within.left.is_empty() {
        let this = ids_shown(trace_id, span_id);
        let left: Vec<String> = within.left.iter().map(shown).collect();
        return Err(trace_context_error(
            ruby,
            format!(
                "contexts set inside the {this} were left set, and are cleared: {}",
                left.join(", ")
            ),
        ));
    }
    // SAFETY: what the block returned, a live Ruby value.
    Ok(unsafe { Value::from_raw(result) })
}

/// The context of ids `push` took, as the messages show it.
fn ids_shown(trace_id: Value, span_id: Value) -> String {
    let text = |value: Value| RString::from_value(value).and_then(|text| text.to_string().ok());
    match (text(trace_id), text(span_id)) {
        (Some(trace_id), Some(span_id)) => format!("trace {trace_id} span {span_id}"),
        _ => "context".to_owned(),
    }
}

/// A context as the messages show it (`TraceContext#to_s`).
fn shown(context: &TraceContext) -> String {
    format!("trace {} span {}", context.trace_hex(), context.span_hex())
}

extern "C" fn body(_: rb_sys::VALUE) -> rb_sys::VALUE {
    // SAFETY: called by rb_ensure with the GVL, the block given to
    // with_trace_context to yield to.
    unsafe { rb_sys::rb_yield(rb_sys::Qnil as rb_sys::VALUE) }
}

extern "C" fn ensure(data: rb_sys::VALUE) -> rb_sys::VALUE {
    // SAFETY: `data` is the `Within` of the with_trace_context call that
    // is running rb_ensure, alive until it returns.
    let within = unsafe { &mut *(data as *mut Within) };
    match trace_contexts::pop(within.token, true) {
        Ok(now) => fire_changed(now),
        Err(PopError::Inner(inner)) => {
            fire_changed(trace_contexts::current());
            within.left = inner;
        }
        // The block cannot reach its own token: nothing to pop.
        Err(_) => {}
    }
    rb_sys::Qnil as rb_sys::VALUE
}

fn fire_changed(now: Option<TraceContext>) {
    internal_probes::trace_context(|| {
        now.map_or_else(Default::default, |context| {
            (context.trace_hex(), context.span_hex())
        })
    });
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

pub fn define_natives(ruby: &Ruby, native: RModule) -> Result<(), Error> {
    root(ruby).define_singleton_method("with_trace_context", function!(with_trace_context, 2))?;
    native.define_singleton_method("trace_context_push", function!(push, 2))?;
    native.define_singleton_method("trace_context_pop", function!(pop, 2))?;
    native.define_singleton_method("trace_context_current", function!(current, 0))?;
    native.define_singleton_method("traceparent", function!(traceparent, 1))?;
    Ok(())
}
