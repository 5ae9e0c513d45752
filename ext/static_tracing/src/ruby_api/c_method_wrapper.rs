//! Wrappers of C methods (`String#gsub`, `Array#at`, ...), written in C.
//!
//! A wrapper written in Ruby has a Ruby frame, and a C method such as
//! `String#gsub` sets `$~` and `$_` in the nearest Ruby frame: that would be
//! the wrapper's, so a block passed to `gsub` (which reads `$~` in its own
//! home frame, the caller's) would see none, and neither would the caller
//! after the call. A C function has no Ruby frame, so through this wrapper
//! the C method sets them where it does untraced. Defined with the traced
//! method's own arity (any number, or 0 to 15), it also reports the same
//! `parameters` and `arity`.
//!
//! What a wrapper does, by kind, mirrors the Ruby templates of
//! lib/static_tracing/method_tracing/templates.rb (which says why):
//! `:latency` times the call with `latency_start`/`fire_latency`, `:stack`
//! fires the folded stack before the call.
//!
//! The method each wrapper traces is found from its own frame (owner module
//! and name) in a Hash the wrappers module holds in a hidden instance
//! variable: marked by the GC through the module, collected with it, and
//! nothing is kept on the Rust side.

use super::{errors, frames, root};
use magnus::{
    prelude::*,
    rb_sys::{AsRawValue, FromRawValue},
    value::ReprValue,
    Error, RArray, RHash, RModule, RString, Ruby, Symbol, Value,
};
use rb_sys::{
    rb_call_super_kw, rb_ensure, rb_frame_method_id_and_class, rb_funcallv, rb_ivar_get,
    rb_keyword_given_p, rb_protect, rb_ractor_local_key_t, rb_ractor_local_storage_value_lookup,
    rb_ractor_local_storage_value_newkey, rb_ractor_local_storage_value_set, rb_set_errinfo, ID,
    VALUE,
};
use std::ffi::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

/// Not a valid Ruby instance variable name, which hides it from the
/// application (`instance_variables` does not list it).
const TABLE_IVAR: &str = "__static_tracing_c_wrappers__";

/// The largest fixed arity a C method can have.
const MAX_ARITY: i32 = 15;

/// A key of ractor-local storage set only in the main Ractor: the wrappers
/// trace there and call straight through elsewhere (this extension is not
/// Ractor-safe; the wrapper functions alone are declared safe, to be
/// callable at all in another Ractor).
static MAIN_RACTOR_KEY: AtomicPtr<rb_sys::rb_ractor_local_key_struct> =
    AtomicPtr::new(std::ptr::null_mut());

/// The kinds of wrapper, as MethodTracing names them.
#[derive(Clone, Copy)]
enum Kind {
    Latency,
    Stack,
}

impl Kind {
    fn of(ruby: &Ruby, kind: Symbol) -> Result<Kind, Error> {
        match kind.name()?.as_ref() {
            "latency" => Ok(Kind::Latency),
            "stack" => Ok(Kind::Stack),
            other => Err(errors::argument_error(
                ruby,
                format!("unknown wrapper kind :{other}, expected :latency or :stack"),
            )),
        }
    }

    fn index(self) -> i64 {
        match self {
            Kind::Latency => 0,
            Kind::Stack => 1,
        }
    }
}

fn intern(name: &str) -> ID {
    // SAFETY: a valid pointer and length; rb_intern2 copies the bytes.
    unsafe { rb_sys::rb_intern2(name.as_ptr().cast(), name.len() as _) }
}

/// The names a wrapper calls and reads, interned once: a wrapper runs on
/// every call of a traced C method, and interning is a symbol-table lookup.
/// An ID interned from a C string is never freed, so keeping it is sound.
struct Names {
    latency_start: ID,
    fire_latency: ID,
    enabled: ID,
    fire: ID,
    table: ID,
}

static NAMES: OnceLock<Names> = OnceLock::new();

/// Interned at init, in the main Ractor; a wrapper reads them only there.
fn names() -> &'static Names {
    NAMES.get_or_init(|| Names {
        latency_start: intern("latency_start"),
        fire_latency: intern("fire_latency"),
        enabled: intern("enabled?"),
        fire: intern("fire"),
        table: intern(TABLE_IVAR),
    })
}

/// `Native.define_c_wrapper(mod, name, arity, tracepoint, kind, label)`:
/// defines in `mod` the wrapper of C method `name`, of `arity` (-1, or 0 to
/// 15), firing `tracepoint` as `kind` does; `label` ("Foo#bar") is the
/// stack kind's innermost frame.
pub(super) fn define(
    ruby: &Ruby,
    module: RModule,
    name: Symbol,
    arity: i32,
    tracepoint: Value,
    kind: Symbol,
    label: RString,
) -> Result<Symbol, Error> {
    let kind = Kind::of(ruby, kind)?;
    let function = function_for(arity).ok_or_else(|| {
        errors::argument_error(
            ruby,
            format!("a C method's arity is -1 or 0 to {MAX_ARITY}, got {arity}"),
        )
    })?;
    let table = match RHash::from_value(module.ivar_get::<_, Value>(TABLE_IVAR)?) {
        Some(table) => table,
        None => {
            let table = ruby.hash_new();
            module.ivar_set(TABLE_IVAR, table)?;
            table
        }
    };
    let kind_value = ruby.integer_from_i64(kind.index()).as_value();
    let entry = ruby.ary_new_from_values(&[tracepoint, kind_value, label.as_value()]);
    entry.freeze();
    table.aset(name, entry)?;
    // SAFETY: a live Symbol.
    let method_id = unsafe { rb_sys::rb_sym2id(name.as_raw()) };
    // SAFETY: a live module, an ID, and a function whose signature matches
    // `arity` (function_for). Ractor-safe only for this definition: the
    // function checks the Ractor before touching anything but `super`.
    unsafe {
        rb_sys::rb_ext_ractor_safe(true);
        rb_sys::rb_define_method_id(module.as_raw(), method_id, Some(function), arity);
        rb_sys::rb_ext_ractor_safe(false);
    }
    Ok(name)
}

fn in_main_ractor() -> bool {
    let key: rb_ractor_local_key_t = MAIN_RACTOR_KEY.load(Ordering::Relaxed);
    let mut value: VALUE = 0;
    // SAFETY: a key made by rb_ractor_local_storage_value_newkey at init;
    // `value` is a valid out pointer.
    !key.is_null() && unsafe { rb_ractor_local_storage_value_lookup(key, &mut value) }
}

/// The arguments of the `super` call, for rb_ensure's body.
struct SuperCall {
    argc: c_int,
    argv: *const VALUE,
    kw_splat: c_int,
}

/// What fires once the call returned, for rb_ensure's ensure function.
struct LatencyEnd {
    tracepoint: VALUE,
    started: VALUE,
}

unsafe extern "C" fn call_super(data: VALUE) -> VALUE {
    // SAFETY: `data` is the address of a SuperCall on the wrapper's stack,
    // live for the whole rb_ensure; the current frame is still the wrapper's.
    unsafe {
        let call = &*(data as *const SuperCall);
        rb_call_super_kw(call.argc, call.argv, call.kw_splat)
    }
}

unsafe extern "C" fn fire_latency(data: VALUE) -> VALUE {
    // SAFETY: `data` is the address of a LatencyEnd on the wrapper's stack,
    // live for the whole rb_ensure.
    unsafe {
        let end = &*(data as *const LatencyEnd);
        rb_funcallv(end.tracepoint, names().fire_latency, 1, &end.started)
    }
}

/// `receiver.method_name` with no arguments, for rb_protect.
unsafe extern "C" fn call_check(data: VALUE) -> VALUE {
    // SAFETY: `data` is the address of a (receiver, method) pair on the
    // caller's stack, live for the whole rb_protect.
    unsafe {
        let (receiver, method) = *(data as *const (VALUE, ID));
        rb_funcallv(receiver, method, 0, std::ptr::null())
    }
}

/// `tracepoint.method`, or nil when it raises (swallowed: tracing never
/// raises into the traced call, as the Ruby templates' rescue).
fn checked(tracepoint: VALUE, method: ID) -> Value {
    let call = (tracepoint, method);
    let mut state: c_int = 0;
    // SAFETY: `call` lives until rb_protect returns; a raised exception is
    // caught there and cleared.
    unsafe {
        let result = rb_protect(
            Some(call_check),
            &call as *const (VALUE, ID) as VALUE,
            &mut state,
        );
        if state != 0 {
            rb_set_errinfo(rb_sys::Qnil as VALUE);
            return Value::from_raw(rb_sys::Qnil as VALUE);
        }
        Value::from_raw(result)
    }
}

/// The table entry of the method running in the current (C) frame.
fn current_entry() -> Option<RArray> {
    let mut method_id: ID = 0;
    let mut owner: VALUE = 0;
    // SAFETY: valid out pointers; the current frame is the wrapper's.
    let found = unsafe { rb_frame_method_id_and_class(&mut method_id, &mut owner) };
    if found == 0 {
        return None;
    }
    // SAFETY: `owner` is the live module the running method belongs to.
    let table = unsafe { Value::from_raw(rb_ivar_get(owner, names().table)) };
    let table = RHash::from_value(table)?;
    // SAFETY: an ID the VM just gave.
    let name = unsafe { Value::from_raw(rb_sys::rb_id2sym(method_id)) };
    RArray::from_value(table.get(name)?)
}

/// The body every wrapper runs. Holds no value needing drop: an exception
/// raised by a call in here may unwind through it.
fn call_wrapped(argc: c_int, argv: *const VALUE, kw_splat: c_int) -> VALUE {
    let call = SuperCall {
        argc,
        argv,
        kw_splat,
    };
    let through = |call: &SuperCall| {
        // SAFETY: the arguments this method received, and its frame is current.
        unsafe { rb_call_super_kw(call.argc, call.argv, call.kw_splat) }
    };
    if !in_main_ractor() {
        return through(&call);
    }
    let Some(entry) = current_entry() else {
        return through(&call);
    };
    let (Ok(tracepoint), Ok(kind)) = (entry.entry::<Value>(0), entry.entry::<i64>(1)) else {
        return through(&call);
    };
    if kind == Kind::Latency.index() {
        let started = checked(tracepoint.as_raw(), names().latency_start);
        if started.is_nil() {
            return through(&call);
        }
        let end = LatencyEnd {
            tracepoint: tracepoint.as_raw(),
            started: started.as_raw(),
        };
        // SAFETY: both structs outlive rb_ensure, which runs fire_latency
        // whether the call returns or raises.
        return unsafe {
            rb_ensure(
                Some(call_super),
                &call as *const SuperCall as VALUE,
                Some(fire_latency),
                &end as *const LatencyEnd as VALUE,
            )
        };
    }
    if checked(tracepoint.as_raw(), names().enabled).to_bool() {
        fire_stack(tracepoint, entry);
    }
    through(&call)
}

/// Fires the folded stack, this wrapper's frame left out and the label
/// innermost, as StackTracer's Ruby template does.
fn fire_stack(tracepoint: Value, entry: RArray) {
    let Ok(ruby) = Ruby::get() else { return };
    let Ok(label) = entry.entry::<RString>(2) else {
        return;
    };
    let max_bytes = root(&ruby)
        .const_get::<_, RModule>("StackTracer")
        .and_then(|tracer| tracer.funcall::<_, _, usize>("max_bytes", ()));
    let Ok(max_bytes) = max_bytes else { return };
    let stack = frames::folded_stack(&ruby, label, 1, max_bytes);
    // SAFETY: live values; an exception from fire propagates as from the
    // Ruby template's fire, and nothing here needs dropping.
    unsafe {
        rb_funcallv(tracepoint.as_raw(), names().fire, 1, &stack.as_raw());
    }
}

unsafe extern "C" fn wrapper_any(argc: c_int, argv: *const VALUE, _recv: VALUE) -> VALUE {
    // SAFETY: called by the VM as the method, in its own frame.
    let kw_splat = unsafe { rb_keyword_given_p() };
    call_wrapped(argc, argv, kw_splat)
}

/// A wrapper of fixed arity: its arguments as an array, never keywords (a
/// C method of fixed arity takes keywords as a positional Hash).
macro_rules! fixed_arity {
    ($name:ident $(, $arg:ident)*) => {
        unsafe extern "C" fn $name(_recv: VALUE $(, $arg: VALUE)*) -> VALUE {
            let args: &[VALUE] = &[$($arg),*];
            call_wrapped(args.len() as c_int, args.as_ptr(), 0)
        }
    };
}

fixed_arity!(wrapper_0);
fixed_arity!(wrapper_1, a0);
fixed_arity!(wrapper_2, a0, a1);
fixed_arity!(wrapper_3, a0, a1, a2);
fixed_arity!(wrapper_4, a0, a1, a2, a3);
fixed_arity!(wrapper_5, a0, a1, a2, a3, a4);
fixed_arity!(wrapper_6, a0, a1, a2, a3, a4, a5);
fixed_arity!(wrapper_7, a0, a1, a2, a3, a4, a5, a6);
fixed_arity!(wrapper_8, a0, a1, a2, a3, a4, a5, a6, a7);
fixed_arity!(wrapper_9, a0, a1, a2, a3, a4, a5, a6, a7, a8);
fixed_arity!(wrapper_10, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9);
fixed_arity!(wrapper_11, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10);
fixed_arity!(wrapper_12, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11);
fixed_arity!(wrapper_13, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12);
fixed_arity!(wrapper_14, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13);
fixed_arity!(wrapper_15, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14);

/// The wrapper function for `arity`, as rb_define_method takes it.
fn function_for(arity: i32) -> Option<unsafe extern "C" fn() -> VALUE> {
    type Any = unsafe extern "C" fn() -> VALUE;
    macro_rules! erase {
        ($function:expr, $signature:ty) => {
            // SAFETY: only a function pointer's type changes; Ruby calls it
            // with the signature `arity` stands for, which is its own.
            Some(unsafe { std::mem::transmute::<$signature, Any>($function) })
        };
    }
    type V = VALUE;
    match arity {
        -1 => erase!(wrapper_any, unsafe extern "C" fn(c_int, *const V, V) -> V),
        0 => erase!(wrapper_0, unsafe extern "C" fn(V) -> V),
        1 => erase!(wrapper_1, unsafe extern "C" fn(V, V) -> V),
        2 => erase!(wrapper_2, unsafe extern "C" fn(V, V, V) -> V),
        3 => erase!(wrapper_3, unsafe extern "C" fn(V, V, V, V) -> V),
        4 => erase!(wrapper_4, unsafe extern "C" fn(V, V, V, V, V) -> V),
        5 => erase!(wrapper_5, unsafe extern "C" fn(V, V, V, V, V, V) -> V),
        6 => erase!(wrapper_6, unsafe extern "C" fn(V, V, V, V, V, V, V) -> V),
        7 => erase!(wrapper_7, unsafe extern "C" fn(V, V, V, V, V, V, V, V) -> V),
        8 => erase!(
            wrapper_8,
            unsafe extern "C" fn(V, V, V, V, V, V, V, V, V) -> V
        ),
        9 => erase!(
            wrapper_9,
            unsafe extern "C" fn(V, V, V, V, V, V, V, V, V, V) -> V
        ),
        10 => erase!(
            wrapper_10,
            unsafe extern "C" fn(V, V, V, V, V, V, V, V, V, V, V) -> V
        ),
        11 => erase!(
            wrapper_11,
            unsafe extern "C" fn(V, V, V, V, V, V, V, V, V, V, V, V) -> V
        ),
        12 => erase!(
            wrapper_12,
            unsafe extern "C" fn(V, V, V, V, V, V, V, V, V, V, V, V, V) -> V
        ),
        13 => erase!(
            wrapper_13,
            unsafe extern "C" fn(V, V, V, V, V, V, V, V, V, V, V, V, V, V) -> V
        ),
        14 => erase!(
            wrapper_14,
            unsafe extern "C" fn(V, V, V, V, V, V, V, V, V, V, V, V, V, V, V) -> V
        ),
        15 => erase!(
            wrapper_15,
            unsafe extern "C" fn(V, V, V, V, V, V, V, V, V, V, V, V, V, V, V, V) -> V
        ),
        _ => None,
    }
}

/// Marks the main Ractor, where the wrappers trace, and interns the names
/// they use.
pub fn init() {
    names();
    // SAFETY: called once, in the main Ractor, at load; the stored value is
    // an immediate (true), nothing for the GC to mark.
    unsafe {
        let key = rb_ractor_local_storage_value_newkey();
        rb_ractor_local_storage_value_set(key, rb_sys::Qtrue as VALUE);
        MAIN_RACTOR_KEY.store(key, Ordering::Relaxed);
    }
}

/// `StaticTracing::Native.define_c_wrapper`.
pub(super) fn define_natives(native: RModule) -> Result<(), Error> {
    use magnus::Object;
    native.define_singleton_method("define_c_wrapper", function!(define, 6))?;
    Ok(())
}
