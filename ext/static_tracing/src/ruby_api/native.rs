//! `StaticTracing::Native`: every private primitive `lib/` builds its public
//! API on, defined here in one table. The functions live with the job they
//! do (signals, frames, the watcher, ...); this file only names them for Ruby.

use super::{
    c_method_wrapper, class_state, errors, frames, provider, recorder, root, signals, watcher,
};
use crate::{attach_watch, internal_probes};
use magnus::{function, Error, Module, Object, Ruby};
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

fn arm_signal(ruby: &Ruby, signal: i32, wake_fd: i32) -> Result<(), Error> {
    signals::arm(signal, wake_fd).map_err(|message| errors::base_error(ruby, message))
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

    // The toggle signal.
    native.define_singleton_method("arm_signal", function!(arm_signal, 2))?;
    native.define_singleton_method("disarm_signal", function!(signals::disarm, 0))?;
    native.define_singleton_method("armed_signal", function!(signals::armed, 0))?;
    native.define_singleton_method("take_signals", function!(signals::take_received, 0))?;

    // Method wrappers: the frames they read, the classes' state, C methods.
    native.define_singleton_method("folded_stack", function!(frames::folded_stack, 3))?;
    native.define_singleton_method("caller_self", function!(frames::caller_self, 1))?;
    native.define_singleton_method("class_state", function!(class_state::get, 1))?;
    native.define_singleton_method("set_class_state", function!(class_state::set, 2))?;
    native.define_singleton_method("define_c_wrapper", function!(c_method_wrapper::define, 6))?;

    // Attach mode's watcher.
    native.define_singleton_method("watch_attach", function!(watcher::watch, 1))?;
    native.define_singleton_method("unwatch_attach", function!(attach_watch::unwatch, 1))?;
    native.define_singleton_method("attach_changes", function!(watcher::changes, 0))?;
    native.define_singleton_method("configure_attach_watch", function!(watcher::configure, 2))?;
    native.define_singleton_method("attach_poller", function!(watcher::poller, 0))?;

    // The recorder and the control channel its commands come through.
    native.define_singleton_method("recorder_start", function!(recorder::start, 3))?;
    native.define_singleton_method("recorder_stop", function!(recorder::stop, 0))?;
    native.define_singleton_method("recorder_arm", function!(recorder::arm, 3))?;
    native.define_singleton_method("recorder_disarm", function!(recorder::disarm, 1))?;
    native.define_singleton_method("recorder_trigger", function!(recorder::set_trigger, 2))?;
    native.define_singleton_method("recorder_status", function!(recorder::status, 0))?;
    native.define_singleton_method("recorder_dump", function!(recorder::dump, 1))?;
    native.define_singleton_method(
        "recorder_take_trigger",
        function!(recorder::take_trigger, 1),
    )?;
    native.define_singleton_method("recorder_after_fork", function!(recorder::after_fork, 0))?;
    native.define_singleton_method("open_control", function!(recorder::open_control, 0))?;
    native.define_singleton_method("close_control", function!(recorder::close_control, 0))?;
    Ok(())
}
