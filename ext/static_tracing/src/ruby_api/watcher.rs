//! The primitives of `StaticTracing::Watcher` (lib/static_tracing/watcher.rb):
//! which watched tracepoints have a tracer attached, from `semaphore_poller`.

use super::errors::{base_error, type_error};
use super::receiver::receiver;
use super::tracepoint::Tracepoint;
use crate::semaphore_poller;
use magnus::{Error, RArray, Ruby, Value};
use std::time::Duration;

/// Starts watching `tracepoint`; returns the id its changes come under.
pub(super) fn watch(ruby: &Ruby, tracepoint: Value) -> Result<u64, Error> {
    let tracepoint = receiver::<Tracepoint>(&tracepoint).ok_or_else(|| {
        type_error(
            ruby,
            "only a StaticTracing::Tracepoint can be watched".into(),
        )
    })?;
    semaphore_poller::watch(tracepoint.slot().clone()).map_err(|err| {
        base_error(
            ruby,
            format!("cannot start the thread that watches for tracers: {err}"),
        )
    })
}

/// `[[id, attached], ...]`: what changed since the last call.
pub(super) fn changes(ruby: &Ruby) -> RArray {
    ruby.ary_from_iter(
        semaphore_poller::take_changes()
            .into_iter()
            .map(|(id, attached)| {
                ruby.ary_new_from_values(&[ruby.into_value(id), ruby.into_value(attached)])
            }),
    )
}

pub(super) fn configure(ruby: &Ruby, wake_fd: i32, period: f64) -> Result<(), Error> {
    let period = Duration::try_from_secs_f64(period)
        .map_err(|err| base_error(ruby, format!("invalid watch period {period}: {err}")))?;
    semaphore_poller::configure(wake_fd, period)
        .map_err(|err| base_error(ruby, format!("cannot watch for tracers: {err}")))
}

/// `[thread id or nil, scans so far]`: for measuring the poller's cost.
pub(super) fn poller(ruby: &Ruby) -> RArray {
    let (tid, scans) = semaphore_poller::poller();
    ruby.ary_new_from_values(&[ruby.into_value(tid), ruby.into_value(scans)])
}

/// Attach mode's primitives on `StaticTracing::Native`, for the Watcher.
pub(super) fn define_natives(native: magnus::RModule) -> Result<(), Error> {
    use magnus::Object;
    native.define_singleton_method("watch_attach", function!(watch, 1))?;
    native.define_singleton_method("unwatch_attach", function!(semaphore_poller::unwatch, 1))?;
    native.define_singleton_method("attach_changes", function!(changes, 0))?;
    native.define_singleton_method("configure_semaphore_poller", function!(configure, 2))?;
    native.define_singleton_method("attach_poller", function!(poller, 0))?;
    Ok(())
}
