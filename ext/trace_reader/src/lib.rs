//! The `static-tracing` command's native reader (`static_tracing/trace_reader`):
//! the `trace_report` crate for the command's Ruby code, which checks whose
//! files it reads and opens them, then hands their descriptors here. It
//! defines `StaticTracing::TraceReader` and nothing else: loading it starts
//! none of the gem's runtime (no watcher, no signal handler, no stub), as
//! the command must not in its own process.

/// `magnus::method!` and `magnus::function!` for this library: a panic in
/// a method raises `StaticTracing::InternalError` (through
/// `ruby_glue::panics::guard`), never `fatal`. Every method is defined
/// through these (spec/contracts_spec.rb holds the bindings to it).
macro_rules! method {
    ($name:expr, $($arity:tt)+) => {
        ruby_glue::guarded_method!($crate::errors::internal_error_class, $name, $($arity)+)
    };
}

/// See [`method!`].
macro_rules! function {
    ($name:expr, $($arity:tt)+) => {
        ruby_glue::guarded_function!($crate::errors::internal_error_class, $name, $($arity)+)
    };
}

mod errors;
mod follower;
mod leftovers;
mod output;
mod reader;
mod sources;
mod tally;
mod trace;

use magnus::{Error, Module, Ruby};

#[magnus::init]
fn init(ruby: &Ruby) -> Result<(), Error> {
    let module = ruby
        .define_module("StaticTracing")?
        .define_module("TraceReader")?;
    reader::init(ruby, module)?;
    trace::init(ruby, module)?;
    follower::init(ruby, module)?;
    tally::init(ruby, module)?;
    leftovers::init(module)?;
    Ok(())
}
