//! The gem's own events, as compile-time USDT probes of provider
//! `static_tracing` in this extension, so that an operator can see why a
//! process's runtime probes are or are not there:
//!
//! ```sh
//! bpftrace -l 'usdt:*:static_tracing:*' -p PID
//! bpftrace -p PID -e 'usdt:*:static_tracing:provider-load { printf("%s %s %d\n", str(arg0), str(arg1), arg2); }'
//! ```
//!
//! The `usdt` crate turns `__` in a probe name into `-`: `provider__load`
//! is `static_tracing:provider-load`. Each probe reads its semaphore first
//! and builds its arguments only while a tracer is attached, so the events
//! cost a load and a branch otherwise.

use stapsdt::image::Skipped;

#[usdt::provider(provider = "static_tracing")]
mod probes {
    /// A provider's stub was loaded, or reloaded with a probe added:
    /// provider name, stub path (as `Provider#path` gives it: for a memfd,
    /// `/proc/<pid>/fd/<fd>`), number of probes.
    fn provider__load(name: &str, path: &str, probes: u64) {}
    /// A provider's stub was unloaded: its probes are gone.
    fn provider__unload(name: &str) {}
    /// Tracing was switched on (1) or off (0): by the toggle signal,
    /// the mode, or StaticTracing.enable!/disable!.
    fn tracing__toggle(enabled: u8) {}
    /// A stub could not go to a location (a stub directory, or memfd) and
    /// the next one was tried: where, and why.
    fn stub__fallback(location: &str, reason: &str) {}
    /// A provider could not be loaded or reloaded: name, error message.
    fn load__error(provider: &str, message: &str) {}
    /// The process published its tracing state for `static-tracing`
    /// (enable/disable/toggle): the state file's path.
    fn state__publish(path: &str) {}
    /// The current fiber's W3C trace context changed: its trace id and
    /// span id in lowercase hex, both empty when it was cleared (see
    /// `StaticTracing.with_trace_context`).
    fn trace__context(trace_id: &str, span_id: &str) {}
}

pub fn provider_load(name: &str, path: impl FnOnce() -> String, probes: usize) {
    probes::provider__load!(|| (name, path(), probes as u64));
}

pub fn provider_unload(name: &str) {
    probes::provider__unload!(|| name);
}

pub fn tracing_toggle(enabled: bool) {
    probes::tracing__toggle!(|| u8::from(enabled));
}

pub fn stub_fallback(skipped: &[Skipped]) {
    for skip in skipped {
        probes::stub__fallback!(|| (skip.location.as_str(), skip.reason.as_str()));
    }
}

pub fn load_error(provider: &str, message: impl FnOnce() -> String) {
    probes::load__error!(|| (provider, message()));
}

pub fn state_publish(path: &str) {
    probes::state__publish!(|| path);
}

// The probe macro takes a closure's text, not a function.
#[allow(clippy::redundant_closure)]
#[inline]
pub fn trace_context(ids: impl FnOnce() -> (String, String)) {
    probes::trace__context!(|| ids());
}
