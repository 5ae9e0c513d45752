//! The primitives of `StaticTracing::Recorder` (lib/static_tracing/recorder.rb)
//! and of its control channel (lib/static_tracing/control.rb): start and
//! stop the ring, mark which tracepoints it records, take snapshots.
//! What the recording does on each call is in `Tracepoint#fire`.

use super::errors::{recorder_error, type_error};
use super::receiver::receiver;
use super::tracepoint::Tracepoint;
use crate::recorder::{self, NO_TRIGGER};
use magnus::{Error, RHash, RString, Ruby, Value};
use stapsdt::ring::RingConfig;
use std::os::fd::IntoRawFd;
use std::sync::atomic::Ordering;

fn tracepoint<'a>(ruby: &Ruby, value: &'a Value) -> Result<&'a Tracepoint, Error> {
    receiver::<Tracepoint>(value).ok_or_else(|| {
        type_error(
            ruby,
            "only a StaticTracing::Tracepoint can be recorded".into(),
        )
    })
}

fn not_recording(ruby: &Ruby) -> Error {
    recorder_error(ruby, "nothing is being recorded".into())
}

/// `recorder_start(slots_bytes, overwrite, wake_fd)`: a new ring whose
/// slots take `slots_bytes` (rounded up to a power of two); returns its path.
pub(super) fn start(
    ruby: &Ruby,
    slots_bytes: u64,
    overwrite: bool,
    wake_fd: Option<i32>,
) -> Result<String, Error> {
    let config = RingConfig::for_size(slots_bytes, overwrite)
        .map_err(|err| recorder_error(ruby, err.to_string()))?;
    recorder::start(config, wake_fd).map_err(|message| recorder_error(ruby, message))
}

pub(super) fn stop() {
    recorder::stop();
}

/// `recorder_arm(tracepoint, latency_arg, stack_arg)`: records the
/// tracepoint's calls; returns its probe id in the ring, or nil when the
/// ring's probe table had no room (its calls are then counted as dropped).
pub(super) fn arm(
    ruby: &Ruby,
    tracepoint_value: Value,
    latency_arg: Option<u8>,
    stack_arg: Option<u8>,
) -> Result<Option<u32>, Error> {
    let tracepoint = tracepoint(ruby, &tracepoint_value)?;
    let provider = tracepoint.provider_name(ruby);
    tracepoint
        .roles()
        .set(tracepoint.spec().args(), latency_arg, stack_arg);
    recorder::with_current(|recording| {
        recording.arm(
            tracepoint.mark(),
            &provider,
            tracepoint.spec().name(),
            tracepoint.spec().args(),
            latency_arg,
            stack_arg,
        )
    })
    .ok_or_else(|| not_recording(ruby))
}

pub(super) fn disarm(ruby: &Ruby, tracepoint_value: Value) -> Result<(), Error> {
    let tracepoint = tracepoint(ruby, &tracepoint_value)?;
    tracepoint.mark().clear();
    tracepoint
        .trigger_above()
        .store(NO_TRIGGER, Ordering::Relaxed);
    Ok(())
}

/// `recorder_trigger(tracepoint, threshold_ns)`: a recorded latency above
/// the threshold fires the trigger; nil removes it.
pub(super) fn set_trigger(
    ruby: &Ruby,
    tracepoint_value: Value,
    threshold_ns: Option<u64>,
) -> Result<(), Error> {
    let tracepoint = tracepoint(ruby, &tracepoint_value)?;
    tracepoint
        .trigger_above()
        .store(threshold_ns.unwrap_or(NO_TRIGGER), Ordering::Relaxed);
    Ok(())
}

/// The running recording's file and counters, or nil.
pub(super) fn status(ruby: &Ruby) -> Result<Option<RHash>, Error> {
    recorder::with_current(|recording| {
        let counters = recording.ring().counters();
        let hash = ruby.hash_new();
        hash.aset(ruby.to_symbol("path"), recording.path())?;
        hash.aset(ruby.to_symbol("file_size"), recording.file_len())?;
        hash.aset(
            ruby.to_symbol("slots"),
            recording.ring().config().slot_count,
        )?;
        hash.aset(ruby.to_symbol("records"), counters.records)?;
        hash.aset(ruby.to_symbol("dropped"), counters.dropped)?;
        hash.aset(ruby.to_symbol("head"), counters.head)?;
        Ok(hash)
    })
    .transpose()
}

/// The ring as a trace file: a binary String.
pub(super) fn snapshot(ruby: &Ruby) -> Result<RString, Error> {
    recorder::with_current(|recording| ruby.str_from_slice(&recording.ring().snapshot()))
        .ok_or_else(|| not_recording(ruby))
}

/// `[probe_id, latency_ns]` of the call that fired the trigger since the
/// last call, or nil; no trigger fires again before `quiet_until_ns`.
pub(super) fn take_trigger(quiet_until_ns: u64) -> Option<(u32, u64)> {
    recorder::with_current(|recording| recording.take_trigger(quiet_until_ns)).flatten()
}

/// In a forked child: lets go of the parent's ring.
pub(super) fn after_fork() {
    recorder::forget_inherited();
}

/// `[fd, path]`: this process's control FIFO, created where its state
/// file is; the descriptor is the caller's to close.
pub(super) fn open_control(ruby: &Ruby) -> Result<(i32, String), Error> {
    stapsdt::control::open()
        .map(|(reader, path)| (reader.into_raw_fd(), path.display().to_string()))
        .map_err(|err| {
            recorder_error(
                ruby,
                format!("cannot create the control channel for static-tracing: {err}"),
            )
        })
}

pub(super) fn close_control() {
    stapsdt::control::close();
}
