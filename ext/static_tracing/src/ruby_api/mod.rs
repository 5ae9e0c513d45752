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
mod errors;
mod frames;
mod provider;
mod receiver;
mod signals;
mod tracepoint;
mod visibility_hooks;
mod watcher;

use magnus::{value::Lazy, Error, Module, Object, RModule, Ruby};
use stapsdt::names::NameKind;

/// `StaticTracing`, defined by `lib/static_tracing.rb` before the extension loads.
pub fn root(ruby: &Ruby) -> RModule {
    static ROOT: Lazy<RModule> = Lazy::new(|ruby| ruby.define_module("StaticTracing").unwrap());
    ruby.get_inner(&ROOT)
}

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
    // First: every other init may raise one of the gem's errors.
    errors::init(ruby)?;
    let native = root(ruby).define_module("Native")?;
    native.define_singleton_method(
        "supported?",
        magnus::function!(provider::platform_supported, 0),
    )?;
    native.define_singleton_method(
        "remove_files_at_exit",
        magnus::function!(provider::remove_files_at_exit, 0),
    )?;
    native.const_set("NAME_RULE", stapsdt::names::NAME_RULE)?;
    native.define_singleton_method("name_problem", magnus::function!(name_problem, 2))?;
    native.define_singleton_method(
        "publish_state",
        magnus::function!(provider::publish_state, 1),
    )?;
    native.define_singleton_method("noop", magnus::function!(noop, -1))?;
    native.define_singleton_method("arm_signal", magnus::function!(arm_signal, 2))?;
    native.define_singleton_method("disarm_signal", magnus::function!(signals::disarm, 0))?;
    native.define_singleton_method("armed_signal", magnus::function!(signals::armed, 0))?;
    native.define_singleton_method("take_signals", magnus::function!(signals::take_received, 0))?;
    native.define_singleton_method("folded_stack", magnus::function!(frames::folded_stack, 3))?;
    native.define_singleton_method("caller_self", magnus::function!(frames::caller_self, 1))?;
    root(ruby).define_singleton_method("nsec", magnus::function!(signals::nsec, 0))?;
    native.const_set("WRAPPER_FILE", frames::WRAPPER_FILE)?;
    c_method_wrapper::init(ruby)?;
    class_state::init(ruby)?;
    provider::init(ruby)?;
    tracepoint::init(ruby)?;
    visibility_hooks::init(ruby)?;
    watcher::init(ruby)?;
    Ok(())
}
