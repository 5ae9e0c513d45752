//! One file a Ruby class, each with its own `init`.
//!
//! # Why the unsafe blocks here hold
//!
//! A probe stub is only ever executed by `Tracepoint#fire`, which holds the
//! GVL from start to end and never releases it. Images are only reloaded or
//! unloaded by Provider methods, which hold the GVL too. So while a provider
//! swaps or unmaps its image no thread can be inside one of its stubs, and
//! the site slots read by `fire` are updated before any Ruby code runs again.
//! (Non-main Ractors cannot call into this extension: it does not declare
//! itself Ractor-safe.)

mod arguments;
mod c_method_wrapper;
mod class_state;
pub(crate) mod errors;
mod frames;
mod native;
mod provider;
mod receiver;
mod recorder;
mod signals;
mod trace_context;
mod tracepoint;
mod visibility_hooks;
mod watcher;

use magnus::{value::Lazy, Error, Object, RModule, Ruby};

/// `StaticTracing`, defined by `lib/static_tracing.rb` before the extension loads.
pub fn root(ruby: &Ruby) -> RModule {
    static ROOT: Lazy<RModule> = Lazy::new(|ruby| ruby.define_module("StaticTracing").unwrap());
    ruby.get_inner(&ROOT)
}

pub fn init(ruby: &Ruby) -> Result<(), Error> {
    // First: every other init may raise one of the gem's errors.
    errors::init(ruby)?;
    native::init(ruby)?;
    root(ruby).define_singleton_method("nsec", function!(signals::nsec, 0))?;
    c_method_wrapper::init();
    provider::init(ruby)?;
    tracepoint::init(ruby)?;
    visibility_hooks::init(ruby)?;
    Ok(())
}
