//! The native half of the `static_tracing` gem: small primitives on which
//! `lib/static_tracing` builds the public Ruby API. The probe machinery
//! itself (ELF stubs, loading) is the `stapsdt` crate, which knows no Ruby.

/// `magnus::method!` and `magnus::function!` for this library: a panic in
/// a method raises `StaticTracing::InternalError` (through
/// `ruby_glue::panics::guard`), never `fatal`. Every method is defined
/// through these (spec/contracts_spec.rb holds the bindings to it).
macro_rules! method {
    ($name:expr, $($arity:tt)+) => {
        ruby_glue::guarded_method!($crate::ruby_api::errors::internal_error_class, $name, $($arity)+)
    };
}

/// See [`method!`].
macro_rules! function {
    ($name:expr, $($arity:tt)+) => {
        ruby_glue::guarded_function!($crate::ruby_api::errors::internal_error_class, $name, $($arity)+)
    };
}

mod fibers;
mod internal_probes;
mod recording;
mod ruby_api;
mod semaphore_poller;
mod site_slot;
mod trace_contexts;

use magnus::{Error, Ruby};

#[magnus::init]
fn init(ruby: &Ruby) -> Result<(), Error> {
    ruby_api::init(ruby)
}
