//! The native half of the `static_tracing` gem: small primitives on which
//! `lib/static_tracing` builds the public Ruby API. The probe machinery
//! itself (ELF stubs, loading) is the `stapsdt` crate, which knows no Ruby.

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
