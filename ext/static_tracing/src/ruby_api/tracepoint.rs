//! `StaticTracing::Tracepoint`: one probe of a provider; fires it.

use super::arguments::{self, Registers};
use super::errors::{argument_error, type_error};
use super::provider::Provider;
use super::receiver::{self, receiver};
use super::root;
use super::signals::nsec;
use crate::recorder::{Mark, NO_TRIGGER};
use crate::site_slot::SiteSlot;
use magnus::{
    gc::Marker, method, prelude::*, typed_data::Obj, value::Opaque, DataTypeFunctions, Error,
    RArray, Ruby, Symbol, TypedData, Value,
};
use stapsdt::{ArgType, ProbeSpec};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
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
                // SAFETY: the strings' bytes stay valid until `registers` is
                // dropped, after the call (no Ruby code runs meanwhile).
                let mut args = unsafe { registers.recorded(types) };
                if let Some(stack) = rb_self.roles.stack() {
                    args.keep_stack_end(stack);
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
        // SAFETY: as in `fire`: a site in the slot belongs to a loaded image,
        // kept loaded by the GVL this call holds.
        let site = (rb_self.slot.get()).filter(|site| unsafe { site.is_enabled() });
        let recording = rb_self.mark.target();
        if site.is_none() && recording.is_none() {
            return Ok(false);
        }
        let latency = now.wrapping_sub(started);
        if let Some(recording) = recording {
            recording.record_integer(now as u64, latency);
            recording.check_trigger(&rb_self.trigger_above, now as u64, latency);
        }
        if let Some(site) = site {
            let mut registers = [0u64; 6];
            registers[0] = latency as u64;
            // SAFETY: as above; the only argument is an integer.
            unsafe { site.fire(&registers) };
        }
        Ok(true)
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
    // SAFETY: a live VALUE passed by Ruby as the receiver.
    let value = unsafe { <Value as magnus::rb_sys::FromRawValue>::from_raw(rb_self) };
    // SAFETY: as in `fire`: a site in the slot belongs to a loaded image,
    // kept loaded by the GVL this call holds.
    receiver::<Tracepoint>(&value).is_some_and(|tracepoint| {
        tracepoint
            .slot
            .get()
            .is_some_and(|site| unsafe { site.is_enabled() })
            || tracepoint.mark.is_recorded()
    })
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
