//! `StaticTracing.with_trace_context`, `set_trace_context` and
//! `clear_trace_context`, each one native call (a request sets and clears
//! a context: no Ruby layer between), and the `StaticTracing::TraceContext`
//! objects they deal in (`lib/static_tracing/trace_context.rb` adds their
//! Ruby methods); parsing a `traceparent` header. What an id is lives in
//! `stapsdt::trace_context`; each fiber's nesting in `trace_contexts`.

use super::arguments::describe;
use super::errors::{argument_error, trace_context_error, type_error};
use super::root;
use crate::internal_probes;
use crate::trace_contexts::{self, PopError};
use magnus::rb_sys::{protect, AsRawValue, FromRawValue};
use magnus::value::Opaque;
use magnus::{Error, Object, RClass, RModule, RString, Ruby, Value};
use rb_sys::VALUE;
use stapsdt::trace_context::TraceContext;
use std::sync::OnceLock;

/// `StaticTracing::TraceContext`: a Struct of `trace_id`, `span_id` and
/// `token`, defined here (Ruby adds its methods), made only here, pinned.
static CONTEXT_CLASS: OnceLock<Opaque<RClass>> = OnceLock::new();

/// Its members, by position.
const TRACE_ID: i64 = 0;
const SPAN_ID: i64 = 1;
const TOKEN: i64 = 2;

fn context_class() -> VALUE {
    // Set in `define_natives`, before any method of this file can run.
    let class = CONTEXT_CLASS
        .get()
        .expect("StaticTracing::TraceContext is defined when the extension loads");
    // SAFETY: we hold the GVL (every caller is a Ruby method).
    unsafe { Ruby::get_unchecked() }.get_inner(*class).as_raw()
}

/// Member `index` of a TraceContext.
fn member(context: VALUE, index: i64) -> Value {
    // SAFETY: `context` is a live TraceContext, a Struct with the member;
    // we hold the GVL.
    unsafe {
        Value::from_raw(rb_sys::rb_struct_aref(
            context,
            rb_sys::rb_int2inum(index as _),
        ))
    }
}

/// A frozen TraceContext of these ids, and of the token that pops it (nil
/// for a context read back rather than set): a Struct made without its
/// `initialize`, as a request's `set_trace_context` makes one.
fn context_object(trace_id: VALUE, span_id: VALUE, token: Option<u64>) -> Value {
    // SAFETY: the GVL is held; the class is a pinned Struct class of three
    // members; the values stored are live (the caller's arguments, on its
    // stack, or made just now and on this stack, which the collector
    // scans).
    unsafe {
        let object = rb_sys::rb_struct_alloc_noinit(context_class());
        let token = token.map_or(rb_sys::Qnil as VALUE, |token| rb_sys::rb_ull2inum(token));
        for (index, value) in [(TRACE_ID, trace_id), (SPAN_ID, span_id), (TOKEN, token)] {
            rb_sys::rb_struct_aset(object, rb_sys::rb_int2inum(index as _), value);
        }
        rb_sys::rb_obj_freeze(object);
        Value::from_raw(object)
    }
}

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

/// The current fiber's context changed to `now`.
fn fire_changed(now: Option<TraceContext>) {
    internal_probes::trace_context(|| {
        now.map_or_else(Default::default, |context| {
            (context.trace_hex(), context.span_hex())
        })
    });
}

/// `StaticTracing.with_trace_context(trace_id, span_id) { }`: runs the
/// block in the context, then pops it, also when the block raises, breaks
/// or throws; contexts the block left set inside it are popped too, and
/// (when the block returned) a TraceContextError says so. The block is
/// yielded under one `rb_protect`: whatever ended it is raised again once
/// the context is popped and this function's frames are gone.
fn with_trace_context(ruby: &Ruby, trace_id: Value, span_id: Value) -> Result<Value, Error> {
    if !ruby.block_given() {
        return Err(argument_error(
            ruby,
            "with_trace_context needs a block (set_trace_context has none)".to_owned(),
        ));
    }
    let context = parse_ids(ruby, trace_id, span_id)?;
    // The block runs in this fiber, and returns to it.
    let fiber = trace_contexts::current_fiber();
    let token = trace_contexts::push_on(fiber, context);
    fire_changed(Some(context));
    // SAFETY: yields to the block given to this method; whatever ends it
    // other than returning is caught by `protect` and returned here.
    let yielded = protect(|| unsafe { rb_sys::rb_yield(rb_sys::Qundef as VALUE) });
    let left = match trace_contexts::pop_on(fiber, token, true) {
        Ok(now) => {
            fire_changed(now);
            Vec::new()
        }
        Err(PopError::Inner(inner)) => {
            fire_changed(trace_contexts::current());
            inner
        }
        // The block cannot reach its own token: nothing to pop.
        Err(_) => Vec::new(),
    };
    // SAFETY: what the block returned, a live Ruby value.
    let value = unsafe { Value::from_raw(yielded?) };
    if left.is_empty() {
        return Ok(value);
    }
    let left: Vec<String> = left.iter().map(shown).collect();
    Err(trace_context_error(
        ruby,
        format!(
            "contexts set inside the {} were left set, and are cleared: {}",
            ids_shown(trace_id, span_id),
            left.join(", ")
        ),
    ))
}

/// `StaticTracing.set_trace_context(trace_id, span_id)`: puts the current
/// fiber in the context until `clear_trace_context` is given what this
/// returns, a TraceContext.
fn set_trace_context(ruby: &Ruby, trace_id: Value, span_id: Value) -> Result<Value, Error> {
    let context = parse_ids(ruby, trace_id, span_id)?;
    let token = trace_contexts::push(context);
    fire_changed(Some(context));
    Ok(context_object(
        trace_id.as_raw(),
        span_id.as_raw(),
        Some(token),
    ))
}

/// The token of a TraceContext `set_trace_context` returned.
fn token_of(context: Value) -> Option<u64> {
    // SAFETY: the GVL is held; the class is live.
    let is_context = unsafe { rb_sys::rb_obj_is_kind_of(context.as_raw(), context_class()) };
    if is_context != rb_sys::Qtrue as VALUE {
        return None;
    }
    magnus::Integer::from_value(member(context.as_raw(), TOKEN))?
        .to_u64()
        .ok()
}

/// `StaticTracing.clear_trace_context(context)`: the current fiber is back
/// in the context it was in before `context` was set. A context set on
/// another thread or fiber, cleared already, or set outside contexts still
/// set is a TraceContextError, and changes nothing.
fn clear_trace_context(ruby: &Ruby, context: Value) -> Result<(), Error> {
    let Some(token) = token_of(context) else {
        return Err(type_error(
            ruby,
            format!(
                "clear_trace_context takes what set_trace_context returned, got {}",
                describe(ruby, context)
            ),
        ));
    };
    let problem = match trace_contexts::pop(token, false) {
        Ok(now) => {
            fire_changed(now);
            return Ok(());
        }
        Err(problem) => problem,
    };
    let this = context_shown(context);
    let message = match problem {
        PopError::OtherThread | PopError::OtherFiber => {
            let where_set = if problem == PopError::OtherThread {
                "another thread"
            } else {
                "another fiber of this thread"
            };
            format!(
                "the {this} was set on {where_set}: clear a context on the thread and fiber that \
                 set it"
            )
        }
        PopError::Popped => format!("the {this} was cleared already"),
        PopError::Inner(inner) => {
            let inner: Vec<String> = inner.iter().map(shown).collect();
            format!(
                "the {this} was cleared before the contexts set inside it, still set: {}; clear \
                 those first",
                inner.join(", ")
            )
        }
    };
    Err(trace_context_error(ruby, message))
}

/// A TraceContext object as the messages show it (`TraceContext#to_s`).
fn context_shown(context: Value) -> String {
    ids_shown(
        member(context.as_raw(), TRACE_ID),
        member(context.as_raw(), SPAN_ID),
    )
}

/// The context of ids `parse_ids` took, as the messages show it.
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

/// `trace_context_current`: the current fiber's innermost context, a
/// TraceContext, or nil.
fn current(ruby: &Ruby) -> Option<Value> {
    let context = trace_contexts::current()?;
    let (trace_id, span_id) = (
        ruby.str_new(&context.trace_hex()),
        ruby.str_new(&context.span_hex()),
    );
    Some(context_object(trace_id.as_raw(), span_id.as_raw(), None))
}

/// `traceparent(header)`: `[trace_id, span_id]` (the parent id) of a valid
/// W3C `traceparent` header, nil for any other (ignored, never an error).
fn traceparent(header: RString) -> Option<(String, String)> {
    // SAFETY: the bytes are read before any Ruby code runs.
    unsafe { TraceContext::from_traceparent(header.as_slice()) }
        .map(|context| (context.trace_hex(), context.span_hex()))
}

pub fn define_natives(ruby: &Ruby, native: RModule) -> Result<(), Error> {
    // SAFETY: the GVL is held; NUL-terminated names, the list ended by a
    // null pointer; a constant of that name already there raises, caught.
    let class = protect(|| unsafe {
        rb_sys::rb_struct_define_under(
            root(ruby).as_raw(),
            c"TraceContext".as_ptr(),
            c"trace_id".as_ptr(),
            c"span_id".as_ptr(),
            c"token".as_ptr(),
            std::ptr::null::<std::ffi::c_char>(),
        )
    })?;
    // SAFETY: the class just defined.
    let class = RClass::from_value(unsafe { Value::from_raw(class) }).ok_or_else(|| {
        type_error(
            ruby,
            "StaticTracing::TraceContext is not a class".to_owned(),
        )
    })?;
    // Pinned for the life of the process: kept by address above.
    ruby.gc_register_mark_object(class);
    let _ = CONTEXT_CLASS.set(class.into());
    let root = root(ruby);
    root.define_singleton_method("with_trace_context", function!(with_trace_context, 2))?;
    root.define_singleton_method("set_trace_context", function!(set_trace_context, 2))?;
    root.define_singleton_method("clear_trace_context", function!(clear_trace_context, 1))?;
    native.define_singleton_method("trace_context_current", function!(current, 0))?;
    native.define_singleton_method("traceparent", function!(traceparent, 1))?;
    Ok(())
}
