//! `StaticTracing::Tracepoint`: one probe of a provider; fires it.

use super::arguments::{self, Registers};
use super::errors::{argument_error, type_error};
use super::provider::Provider;
use super::receiver::{self, receiver};
use super::root;
use crate::site_slot::SiteSlot;
use magnus::{
    gc::Marker, method, prelude::*, typed_data::Obj, value::Opaque, DataTypeFunctions, Error,
    RArray, Ruby, Symbol, TypedData, Value,
};
use stapsdt::ArgType;
use std::sync::Arc;

#[derive(TypedData)]
#[magnus(class = "StaticTracing::Tracepoint", free_immediately, mark)]
pub struct Tracepoint {
    provider: Opaque<Obj<Provider>>,
    /// `provider:probe`, for messages.
    label: String,
    name: String,
    types: Vec<ArgType>,
    slot: Arc<SiteSlot>,
}

impl DataTypeFunctions for Tracepoint {
    fn mark(&self, marker: &Marker) {
        marker.mark(self.provider);
    }
}

impl Tracepoint {
    pub fn new(
        provider: Obj<Provider>,
        name: String,
        types: Vec<ArgType>,
        slot: Arc<SiteSlot>,
    ) -> Tracepoint {
        Tracepoint {
            label: format!("tracepoint {}:{}", provider.name(), name),
            provider: provider.into(),
            name,
            types,
            slot,
        }
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
        if args.len() != rb_self.types.len() {
            return Err(argument_error(
                ruby,
                format!(
                    "{} takes {} argument{} {}, {} given",
                    rb_self.label,
                    rb_self.types.len(),
                    if rb_self.types.len() == 1 { "" } else { "s" },
                    arguments::signature(&rb_self.types),
                    args.len()
                ),
            ));
        }
        let site = rb_self.slot.get();
        // SAFETY: a site in the slot belongs to a loaded image, and the GVL we
        // hold keeps it loaded until this method returns.
        let fire = site.is_some_and(|site| unsafe { site.is_enabled() });
        let mut registers = Registers::new();
        for (index, (&arg, &value)) in rb_self.types.iter().zip(args).enumerate() {
            registers.set(ruby, &rb_self.label, index, arg, value, fire)?;
        }
        if let (true, Some(site)) = (fire, site) {
            // SAFETY: as above; string pointers in the registers stay valid
            // until `registers` is dropped, after the call.
            unsafe { site.fire(&registers.values) };
        }
        Ok(fire)
    }

    fn name(ruby: &Ruby, rb_self: &Tracepoint) -> Symbol {
        ruby.to_symbol(&rb_self.name)
    }

    fn provider(ruby: &Ruby, rb_self: &Tracepoint) -> Obj<Provider> {
        ruby.get_inner(rb_self.provider)
    }

    fn types(ruby: &Ruby, rb_self: &Tracepoint) -> RArray {
        let types = ruby.ary_from_iter(
            rb_self
                .types
                .iter()
                .map(|&arg| arguments::type_class(ruby, arg)),
        );
        types.freeze();
        types
    }
}

pub fn init(ruby: &Ruby) -> Result<(), Error> {
    let class = root(ruby).define_class("Tracepoint", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_method("fire", method!(Tracepoint::fire, -1))?;
    receiver::define_plain_method0(class, c"enabled?", is_enabled);
    class.define_method("name", method!(Tracepoint::name, 0))?;
    class.define_method("provider", method!(Tracepoint::provider, 0))?;
    class.define_method("types", method!(Tracepoint::types, 0))?;
    Ok(())
}

/// `Tracepoint#enabled?`: whether a tracer is attached to this probe now.
/// Ruby only calls it on instances of Tracepoint (`bind_call` refuses
/// others, and the class has no allocator), so the receiver check cannot
/// fail; nothing here can raise.
unsafe extern "C" fn is_enabled(rb_self: rb_sys::VALUE) -> rb_sys::VALUE {
    // SAFETY: a live VALUE passed by Ruby as the receiver.
    let value = unsafe { <Value as magnus::rb_sys::FromRawValue>::from_raw(rb_self) };
    // SAFETY: as in `fire`: a site in the slot belongs to a loaded image,
    // kept loaded by the GVL this call holds.
    let enabled = receiver::<Tracepoint>(&value).is_some_and(|tracepoint| {
        tracepoint
            .slot
            .get()
            .is_some_and(|site| unsafe { site.is_enabled() })
    });
    (if enabled {
        rb_sys::Qtrue
    } else {
        rb_sys::Qfalse
    }) as rb_sys::VALUE
}
