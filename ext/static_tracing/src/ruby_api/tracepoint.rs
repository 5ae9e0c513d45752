//! `StaticTracing::Tracepoint`: one probe of a provider; fires it.

use super::arguments::{self, Registers};
use super::errors::{argument_error, type_error};
use super::provider::Provider;
use super::receiver::{self, receiver};
use super::root;
use super::signals::nsec;
use crate::recording::{Mark, NO_TRIGGER};
use crate::site_slot::SiteSlot;
use magnus::rb_sys::AsRawValue;
use magnus::{
    gc::Marker, prelude::*, typed_data::Obj, value::Opaque, DataTypeFunctions, Error, RArray, Ruby,
    Symbol, TypedData, Value,
};
use stapsdt::{ArgType, ProbeSpec};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

#[derive(TypedData)]
#[magnus(class = "StaticTracing::Tracepoint", free_immediately, mark)]
pub struct Tracepoint {
    provider: Opaque<Obj<Provider>>,
    /// `provider:probe`, for messages.
    label: String,
    spec: ProbeSpec,
    slot: Arc<SiteSlot>,
    /// Whether the recorder records this probe, and as what.
    mark: Mark,
    /// A recorded latency above this (ns) fires the recorder's trigger.
    trigger_above: AtomicU64,
    /// Which argument holds a latency, and which a folded stack, as the
    /// recording that armed this probe was told (see `Roles`).
    roles: Roles,
    /// `fire_if_enabled` has run its block once unwanted, to check it.
    block_checked: AtomicBool,
}

impl DataTypeFunctions for Tracepoint {
    fn mark(&self, marker: &Marker) {
        marker.mark(self.provider);
    }
}

/// `tracepoint provider:probe`: how messages name a tracepoint. Every
/// declaration makes one: joined, it costs a fraction of a `format!`.
pub fn label(provider: &str, probe: &str) -> String {
    ["tracepoint ", provider, ":", probe].concat()
}

impl Tracepoint {
    pub fn new(provider: Obj<Provider>, spec: ProbeSpec, slot: Arc<SiteSlot>) -> Tracepoint {
        Tracepoint {
            label: label(provider.name(), spec.name()),
            provider: provider.into(),
            spec,
            slot,
            mark: Mark::default(),
            trigger_above: AtomicU64::new(NO_TRIGGER),
            roles: Roles::default(),
            block_checked: AtomicBool::new(false),
        }
    }

    pub fn roles(&self) -> &Roles {
        &self.roles
    }

    pub fn mark(&self) -> &Mark {
        &self.mark
    }

    pub fn trigger_above(&self) -> &AtomicU64 {
        &self.trigger_above
    }

    pub fn provider_name(&self, ruby: &Ruby) -> String {
        ruby.get_inner(self.provider).name().to_owned()
    }

    /// The probe: its name and argument types.
    pub fn spec(&self) -> &ProbeSpec {
        &self.spec
    }

    /// Where this tracepoint's probe is loaded, if it is.
    pub fn slot(&self) -> &Arc<SiteSlot> {
        &self.slot
    }

    fn from_receiver<'a>(ruby: &Ruby, value: &'a Value) -> Result<&'a Tracepoint, Error> {
        receiver::<Tracepoint>(value).ok_or_else(|| {
            type_error(
                ruby,
                format!(
                    "{} is not a StaticTracing::Tracepoint",
                    arguments::describe(ruby, *value)
                ),
            )
        })
    }

    /// Fires the probe with `args` if a tracer is attached; returns whether
    /// it fired. Count and types are checked either way.
    fn fire(ruby: &Ruby, rb_self: Value, args: &[Value]) -> Result<bool, Error> {
        let rb_self = Self::from_receiver(ruby, &rb_self)?;
        let types = rb_self.spec.args();
        if args.len() != types.len() {
            return Err(argument_error(
                ruby,
                format!(
                    "{} takes {} argument{} {}, {} given",
                    rb_self.label,
                    types.len(),
                    if types.len() == 1 { "" } else { "s" },
                    arguments::signature(types),
                    args.len()
                ),
            ));
        }
        let site = rb_self.slot.get();
        // SAFETY: a site in the slot belongs to a loaded image, and the GVL we
        // hold keeps it loaded until this method returns.
        let traced = site.is_some_and(|site| unsafe { site.is_enabled() });
        let recording = rb_self.mark.target();
        let fire = traced || recording.is_some();
        let mut registers = Registers::new();
        for (index, (&arg, &value)) in types.iter().zip(args).enumerate() {
            registers.set(ruby, &rb_self.label, index, arg, value, fire)?;
        }
        if let Some(recording) = recording {
            let now = nsec() as u64;
            if types == [ArgType::Int64] {
                recording.record_integer(now, registers.values[0] as i64);
            } else {
                // Where a cut stack is put together (allocated only then).
                let mut cut_stack = Vec::new();
                // SAFETY: the strings' bytes stay valid until `registers` is
                // dropped, after the call (no Ruby code runs meanwhile).
                let mut args = unsafe { registers.recorded(types) };
                if let Some(stack) = rb_self.roles.stack() {
                    args.keep_stack_end(stack, &mut cut_stack);
                }
                recording.record(now, &args);
            }
            if let Some(latency) = rb_self.roles.latency() {
                let latency = registers.values[latency] as i64;
                recording.check_trigger(&rb_self.trigger_above, now, latency);
            }
        }
        if let (true, Some(site)) = (traced, site) {
            // SAFETY: as above; string pointers in the registers stay valid
            // until `registers` is dropped, after the call.
            unsafe { site.fire(&registers.values) };
        }
        Ok(fire)
    }

    /// `fire_latency(started)`: reads the clock and fires the time since
    /// `started` (what `latency_start` returned), in nanoseconds, as the
    /// probe's one Integer argument; returns whether it fired. The second
    /// half of a timed call's single crossing each way (see `latency_start`).
    fn fire_latency(ruby: &Ruby, rb_self: Value, started: Value) -> Result<bool, Error> {
        let now = nsec();
        let rb_self = Self::from_receiver(ruby, &rb_self)?;
        if rb_self.spec.args() != [ArgType::Int64] {
            return Err(argument_error(
                ruby,
                format!(
                    "{} is declared {}: fire_latency fires one Integer (Integer)",
                    rb_self.label,
                    arguments::signature(rb_self.spec.args())
                ),
            ));
        }
        let Some(started) = magnus::Integer::from_value(started).and_then(|i| i.to_i64().ok())
        else {
            return Err(type_error(
                ruby,
                format!(
                    "{} fire_latency takes the Integer latency_start returned, got {}",
                    rb_self.label,
                    arguments::describe(ruby, started)
                ),
            ));
        };
        Ok(rb_self.fire_duration(now, started))
    }

    /// Fires `now - started`, the duration of a call, if the probe (of one
    /// Integer) is wanted; returns whether it was. Cannot raise.
    fn fire_duration(&self, now: i64, started: i64) -> bool {
        // SAFETY: as in `fire`: a site in the slot belongs to a loaded image,
        // kept loaded by the GVL this call holds.
        let site = (self.slot.get()).filter(|site| unsafe { site.is_enabled() });
        let recording = self.mark.target();
        if site.is_none() && recording.is_none() {
            return false;
        }
        let latency = now.wrapping_sub(started);
        if let Some(recording) = recording {
            recording.record_integer(now as u64, latency);
            recording.check_trigger(&self.trigger_above, now as u64, latency);
        }
        if let Some(site) = site {
            let mut registers = [0u64; 6];
            registers[0] = latency as u64;
            // SAFETY: as above; the only argument is an integer.
            unsafe { site.fire(&registers) };
        }
        true
    }

    /// Whether the probe is wanted: a tracer is attached, or the recorder
    /// records it.
    fn wanted(&self) -> bool {
        // SAFETY: as in `fire`: a site in the slot belongs to a loaded image,
        // kept loaded by the GVL this call holds.
        self.slot
            .get()
            .is_some_and(|site| unsafe { site.is_enabled() })
            || self.mark.is_recorded()
    }

    fn name(ruby: &Ruby, rb_self: &Tracepoint) -> Symbol {
        ruby.to_symbol(rb_self.spec.name())
    }

    fn label(&self) -> String {
        self.label.clone()
    }

    fn provider(ruby: &Ruby, rb_self: &Tracepoint) -> Obj<Provider> {
        ruby.get_inner(rb_self.provider)
    }

    fn types(ruby: &Ruby, rb_self: &Tracepoint) -> RArray {
        let types = ruby.ary_from_iter(
            rb_self
                .spec
                .args()
                .iter()
                .map(|&arg| arguments::type_class(ruby, arg)),
        );
        types.freeze();
        types
    }
}

/// The arguments a recording reads for more than their value: a latency
/// (checked against a trigger's threshold) and a folded stack (which keeps
/// its innermost frames when it is cut). Set as the probe is armed.
#[derive(Debug)]
pub struct Roles {
    latency: AtomicU8,
    stack: AtomicU8,
}

const NO_ROLE: u8 = u8::MAX;

impl Default for Roles {
    fn default() -> Roles {
        Roles {
            latency: AtomicU8::new(NO_ROLE),
            stack: AtomicU8::new(NO_ROLE),
        }
    }
}

impl Roles {
    /// Only indexes of this probe's arguments of the right type are kept.
    pub fn set(&self, types: &[ArgType], latency: Option<u8>, stack: Option<u8>) {
        let checked = |index: Option<u8>, wanted| {
            index
                .filter(|&index| types.get(usize::from(index)) == Some(&wanted))
                .unwrap_or(NO_ROLE)
        };
        self.latency
            .store(checked(latency, ArgType::Int64), Ordering::Relaxed);
        self.stack
            .store(checked(stack, ArgType::String), Ordering::Relaxed);
    }

    fn latency(&self) -> Option<usize> {
        let index = self.latency.load(Ordering::Relaxed);
        (index != NO_ROLE).then_some(usize::from(index))
    }

    fn stack(&self) -> Option<usize> {
        let index = self.stack.load(Ordering::Relaxed);
        (index != NO_ROLE).then_some(usize::from(index))
    }
}

pub fn init(ruby: &Ruby) -> Result<(), Error> {
    let class = root(ruby).define_class("Tracepoint", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_method("fire", method!(Tracepoint::fire, -1))?;
    receiver::define_plain_method0(class, c"enabled?", is_enabled);
    receiver::define_plain_method0(class, c"latency_start", latency_start);
    receiver::define_plain_method0(class, c"measure", measure);
    receiver::define_plain_method0(class, c"fire_if_enabled", fire_if_enabled);
    class.define_method("fire_latency", method!(Tracepoint::fire_latency, 1))?;
    class.define_method("name", method!(Tracepoint::name, 0))?;
    class.define_method("label", method!(Tracepoint::label, 0))?;
    class.define_method("provider", method!(Tracepoint::provider, 0))?;
    class.define_method("types", method!(Tracepoint::types, 0))?;
    Ok(())
}

/// Whether the probe of `rb_self`, a receiver Ruby passed to one of our
/// plain methods, is wanted: a tracer is attached, or the recorder records
/// it. Never raises.
fn attached(rb_self: rb_sys::VALUE) -> bool {
    plain_receiver(rb_self).is_some_and(Tracepoint::wanted)
}

/// The Tracepoint a plain method was called on. Ruby only calls them on
/// instances of Tracepoint (`bind_call` refuses others, and the class has
/// no allocator), so this is None only for a broken build.
fn plain_receiver<'a>(rb_self: rb_sys::VALUE) -> Option<&'a Tracepoint> {
    // SAFETY: a live VALUE passed by Ruby as the receiver; the Tracepoint
    // it wraps is a heap value of its own, neither moved nor freed while
    // the receiver is alive, which it is for the whole call.
    let value = unsafe { <Value as magnus::rb_sys::FromRawValue>::from_raw(rb_self) };
    let tracepoint: Option<&Tracepoint> = receiver::<Tracepoint>(&value);
    // SAFETY: see above: the data outlives the call, not just `value`.
    tracepoint.map(|tracepoint| unsafe { &*std::ptr::from_ref(tracepoint) })
}

/// `Tracepoint#latency_start`: the monotonic clock in nanoseconds when a
/// tracer is attached to this probe, else nil. With `fire_latency`, a timed
/// call crosses into native code once before and once after, instead of an
/// `enabled?` check, two `StaticTracing.nsec` and a `fire`. Cannot raise,
/// as `enabled?`; the clock value is always a Fixnum (no allocation).
unsafe extern "C" fn latency_start(rb_self: rb_sys::VALUE) -> rb_sys::VALUE {
    if !attached(rb_self) {
        return rb_sys::Qnil as rb_sys::VALUE;
    }
    // Monotonic nanoseconds stay far below the Fixnum limit (2^62) for
    // about 146 years of uptime.
    let now = nsec();
    ((now as rb_sys::VALUE) << 1) | rb_sys::FIXNUM_FLAG as rb_sys::VALUE
}

/// `Tracepoint#enabled?`: whether a tracer is attached to this probe now.
/// Ruby only calls it on instances of Tracepoint (`bind_call` refuses
/// others, and the class has no allocator), so the receiver check cannot
/// fail; nothing here can raise.
unsafe extern "C" fn is_enabled(rb_self: rb_sys::VALUE) -> rb_sys::VALUE {
    (if attached(rb_self) {
        rb_sys::Qtrue
    } else {
        rb_sys::Qfalse
    }) as rb_sys::VALUE
}

/// What `measure` fires once its block is done.
struct Measured<'a> {
    tracepoint: &'a Tracepoint,
    started: i64,
}

unsafe extern "C" fn yield_block(_data: rb_sys::VALUE) -> rb_sys::VALUE {
    // SAFETY: called by rb_ensure inside `measure`, whose block it yields to.
    unsafe { rb_sys::rb_yield_values(0) }
}

unsafe extern "C" fn fire_measured(data: rb_sys::VALUE) -> rb_sys::VALUE {
    // SAFETY: `data` is the address of a Measured on `measure`'s stack,
    // live for the whole rb_ensure.
    let measured = unsafe { &*(data as *const Measured) };
    measured.tracepoint.fire_duration(nsec(), measured.started);
    rb_sys::Qnil as rb_sys::VALUE
}

/// Why `measure` cannot run on this call, as the exception to raise: no
/// block, or a probe that is not of one Integer. Built here, so that
/// nothing needing a drop is alive where it is raised.
fn measure_problem(tracepoint: &Tracepoint) -> Option<rb_sys::VALUE> {
    // SAFETY: called from a method Ruby is running, with its frame current.
    if unsafe { rb_sys::rb_block_given_p() } == 0 {
        return missing_block(tracepoint, "measure", "the call it times");
    }
    if tracepoint.spec.args() == [ArgType::Int64] {
        return None;
    }
    argument_error_value(&format!(
        "{} is declared {}: measure fires one Integer (Integer), the block's duration",
        tracepoint.label,
        arguments::signature(tracepoint.spec.args())
    ))
}

/// The ArgumentError of a block method (`measure`, `fire_if_enabled`)
/// called without its block, which `needs` says what it is for.
fn missing_block(tracepoint: &Tracepoint, method: &str, needs: &str) -> Option<rb_sys::VALUE> {
    argument_error_value(&format!(
        "{} {method} needs a block: {needs}",
        tracepoint.label
    ))
}

/// An ArgumentError with `message`, to raise where nothing needing a drop
/// is alive.
fn argument_error_value(message: &str) -> Option<rb_sys::VALUE> {
    let ruby = Ruby::get().ok()?;
    let message = ruby.str_new(message);
    // SAFETY: a live class and String.
    Some(unsafe { rb_sys::rb_exc_new_str(ruby.exception_arg_error().as_raw(), message.as_raw()) })
}

/// `Tracepoint#measure { ... }`: runs the block once and returns what it
/// returns; while the probe is wanted (a tracer attached, or the recorder
/// recording it), fires how long the block took, in nanoseconds, whether
/// it returned or raised. For a probe of one Integer (a latency probe).
/// Not wanted, it costs the call and a yield: a probe held in a constant
/// times a hot block for almost nothing. Holds nothing that needs a drop:
/// the block may raise through it.
unsafe extern "C" fn measure(rb_self: rb_sys::VALUE) -> rb_sys::VALUE {
    let Some(tracepoint) = plain_receiver(rb_self) else {
        // SAFETY: as in `yield_block`.
        return unsafe { rb_sys::rb_yield_values(0) };
    };
    if let Some(error) = measure_problem(tracepoint) {
        // SAFETY: a live exception; nothing in this frame needs dropping.
        unsafe { rb_sys::rb_exc_raise(error) };
    }
    if !tracepoint.wanted() {
        // SAFETY: as in `yield_block`.
        return unsafe { rb_sys::rb_yield_values(0) };
    }
    let measured = Measured {
        tracepoint,
        started: nsec(),
    };
    // SAFETY: `measured` outlives rb_ensure, which runs fire_measured
    // whether the block returns or raises.
    unsafe {
        rb_sys::rb_ensure(
            Some(yield_block),
            rb_sys::Qnil as rb_sys::VALUE,
            Some(fire_measured),
            &measured as *const Measured as rb_sys::VALUE,
        )
    }
}

/// `Tracepoint#fire_if_enabled { values }`: the block runs only while the
/// probe is wanted, and what it returns is fired (see StaticTracing.tracepoint
/// for the rules of its values and its mistakes, which
/// `Blocks.fire_from_block`, in Ruby, applies). The one exception: the
/// first call of each tracepoint runs the block, unwanted, to check it.
/// Unwanted and checked, it costs the call: no block runs, nothing is
/// allocated.
unsafe extern "C" fn fire_if_enabled(rb_self: rb_sys::VALUE) -> rb_sys::VALUE {
    let nil = rb_sys::Qnil as rb_sys::VALUE;
    let Some(tracepoint) = plain_receiver(rb_self) else {
        return nil;
    };
    // SAFETY: called from a method Ruby is running, with its frame current.
    if unsafe { rb_sys::rb_block_given_p() } == 0 {
        if let Some(error) = missing_block(tracepoint, "fire_if_enabled", "the values to fire") {
            // SAFETY: a live exception; nothing in this frame needs dropping.
            unsafe { rb_sys::rb_exc_raise(error) };
        }
        return nil;
    }
    let wanted = tracepoint.wanted();
    if !wanted && tracepoint.block_checked.swap(true, Ordering::Relaxed) {
        return nil;
    }
    let Some(blocks) = Ruby::get()
        .ok()
        .and_then(|ruby| root(&ruby).const_get::<_, magnus::RModule>("Blocks").ok())
    else {
        return nil;
    };
    let wanted = if wanted {
        rb_sys::Qtrue
    } else {
        rb_sys::Qfalse
    } as rb_sys::VALUE;
    let args = [rb_self, wanted];
    // SAFETY: a live module, an interned name and live arguments; the
    // block passes on. Nothing here needs dropping: what the block or
    // the rules raise propagates as from a Ruby method.
    unsafe {
        let method = rb_sys::rb_intern(c"fire_from_block".as_ptr());
        rb_sys::rb_funcall_passing_block(blocks.as_raw(), method, 2, args.as_ptr())
    }
}
