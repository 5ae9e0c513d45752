//! The primitives of `StaticTracing::Watcher` (lib/static_tracing/watcher.rb):
//! which watched tracepoints have a tracer attached, from `attach_watch`.

use super::errors::{base_error, type_error};
use super::receiver::receiver;
use super::tracepoint::Tracepoint;
use crate::attach_watch;
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
    attach_watch::watch(tracepoint.slot().clone()).map_err(|err| {
        base_error(
            ruby,
            format!("cannot start the thread that watches for tracers: {err}"),
        )
    })
}

/// `[[id, attached], ...]`: what changed since the last call.
pub(super) fn changes(ruby: &Ruby) -> RArray {
    ruby.ary_from_iter(
        attach_watch::take_changes()
            .into_iter()
            .map(|(id, attached)| {
                ruby.ary_new_from_values(&[ruby.into_value(id), ruby.into_value(attached)])
            }),
    )
}

pub(super) fn configure(ruby: &Ruby, wake_fd: i32, period: f64) -> Result<(), Error> {
    let period = Duration::try_from_secs_f64(period)
        .map_err(|err| base_error(ruby, format!("invalid watch period {period}: {err}")))?;
    attach_watch::configure(wake_fd, period)
        .map_err(|err| base_error(ruby, format!("cannot watch for tracers: {err}")))
}

/// `[thread id or nil, scans so far]`: for measuring the poller's cost.
pub(super) fn poller(ruby: &Ruby) -> RArray {
    let (tid, scans) = attach_watch::poller();
    ruby.ary_new_from_values(&[ruby.into_value(tid), ruby.into_value(scans)])
}
