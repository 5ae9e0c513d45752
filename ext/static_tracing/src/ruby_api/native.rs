//! `StaticTracing::Native`: the private primitives `lib/` builds its public
//! API on. Each file of `ruby_api` defines those of its job
//! (`define_natives`: signals, frames, the watcher, the recorder, ...);
//! this one makes the module and defines the few that belong to no class.

use super::{
    c_method_wrapper, class_state, frames, provider, recorder, root, signals, trace_context,
    watcher,
};
use crate::internal_probes;
use magnus::{Error, Module, Object, Ruby};
use stapsdt::names::NameKind;

/// Does nothing: the cost of a call into this extension, which `rake bench`
/// compares `Tracepoint#fire` against.
fn noop(_args: &[magnus::Value]) {}

/// The naming rule's verdict on `name`: nil when valid, else the message.
fn name_problem(kind: String, name: String) -> Option<String> {
    let kind = if kind == "provider" {
        NameKind::Provider
    } else {
        NameKind::Probe
    };
    stapsdt::names::validate(kind, &name)
        .err()
        .map(|err| err.to_string())
}

pub fn init(ruby: &Ruby) -> Result<(), Error> {
    let native = root(ruby).define_module("Native")?;
    native.const_set("NAME_RULE", stapsdt::names::NAME_RULE)?;
    native.const_set("WRAPPER_FILE", frames::WRAPPER_FILE)?;

    // Platform, names and the files this process owns.
    native.define_singleton_method("supported?", function!(provider::platform_supported, 0))?;
    native.define_singleton_method("name_problem", function!(name_problem, 2))?;
    native.define_singleton_method(
        "remove_files_at_exit",
        function!(provider::remove_files_at_exit, 0),
    )?;
    native.define_singleton_method("publish_state", function!(provider::publish_state, 1))?;
    // Called by StaticTracing::Switch, which owns the tracing state.
    native.define_singleton_method(
        "tracing_toggled",
        function!(internal_probes::tracing_toggle, 1),
    )?;
    native.define_singleton_method("noop", function!(noop, -1))?;

    signals::define_natives(native)?;
    frames::define_natives(native)?;
    class_state::define_natives(native)?;
    c_method_wrapper::define_natives(native)?;
    watcher::define_natives(native)?;
    recorder::define_natives(native)?;
    trace_context::define_natives(ruby, native)?;
    Ok(())
}
