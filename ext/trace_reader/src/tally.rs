//! `StaticTracing::TraceReader::Tally`: a process's ring tallied across
//! scrapes, for `static-tracing export` and `StaticTracing::Rack::Metrics`
//! (see `trace_metrics`). It only reads the ring.
//!
//! The Rack endpoint runs in an application's worker, whose other threads
//! serve requests: a scrape of a descriptor (the first one reads whole
//! rings) runs with the GVL released, on a descriptor of its own, so that
//! no Ruby thread waits for it, and none can close what it reads.

use crate::errors::{format_error, trace_error};
use crate::sources::Source;
use magnus::{prelude::*, Error, IntoValue, RArray, RModule, RString, Ruby, Value};
use ruby_glue::gvl;
use stapsdt::ring::scan::ReadAt;
use stapsdt::ring::TraceError;
use std::sync::{Mutex, MutexGuard, PoisonError};
use trace_metrics::tally::{self, BUCKETS};

/// A mutex rather than a cell: a scrape runs without the GVL, and another
/// Ruby thread may call on the same tally meanwhile; it then waits for
/// the lock, also without the GVL, so that neither holds up the other.
#[magnus::wrap(class = "StaticTracing::TraceReader::Tally", free_immediately, size)]
struct Tally(Mutex<tally::Tally>);

impl Tally {
    /// `Tally.new(name)`: a tally of the ring named `name` in messages.
    fn new(name: String) -> Tally {
        Tally(Mutex::new(tally::Tally::new(&name)))
    }

    fn lock(&self) -> MutexGuard<'_, tally::Tally> {
        // A panic mid-scrape (raised as StaticTracing::InternalError) leaves
        // the tally refusing to read on (`trace_metrics::tally::Tally::refused`):
        // what it holds is still what earlier scrapes counted.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `scrape(ring)`: reads the ring (see `Source::of`) from where the
    /// last scrape stopped to its cut; how many records it read.
    fn scrape(ruby: &Ruby, rb_self: &Self, ring: Value) -> Result<u64, Error> {
        Self::read(ruby, rb_self, ring, |tally, source| tally.scrape(source))
    }

    /// `finish(ring)`: the last read of the ring of a process that exited,
    /// to its end (see `trace_metrics::Tally::finish`); how many records.
    fn finish(ruby: &Ruby, rb_self: &Self, ring: Value) -> Result<u64, Error> {
        Self::read(ruby, rb_self, ring, |tally, source| tally.finish(source))
    }

    fn read(
        ruby: &Ruby,
        rb_self: &Self,
        ring: Value,
        read: impl Fn(&mut tally::Tally, &dyn ReadAt) -> Result<u64, TraceError> + Send + Sync,
    ) -> Result<u64, Error> {
        let read = match Source::of(ring)? {
            Source::File(file) => {
                // Read through a descriptor of its own: the caller's may be
                // closed by another thread once the GVL is released.
                let own = file.try_clone().map_err(|err| {
                    trace_error(
                        ruby,
                        TraceError::Io {
                            name: rb_self.lock().name().to_owned(),
                            err,
                        },
                    )
                })?;
                gvl::without_gvl(|| read(&mut rb_self.lock(), &own))
            }
            // Calls into Ruby: with the GVL.
            source @ Source::Object(_) => read(&mut rb_self.lock(), &source),
        };
        read.map_err(|err| trace_error(ruby, err))
    }

    /// `state`: the tally as a binary String, for another process to go on
    /// from (`Tally.from_state`), with what holds its reads of a ring to
    /// the reads before (`trace_metrics::tally::Tally::state`).
    fn state(ruby: &Ruby, rb_self: &Self) -> Result<RString, Error> {
        let state = rb_self.lock().state();
        state
            .map(|bytes| ruby.str_from_slice(&bytes))
            .map_err(|err| format_error(ruby, format!("the tally cannot be kept: {err}")))
    }

    /// `Tally.from_state(bytes)`: the tally `state` wrote; FormatError for
    /// bytes that are not one.
    fn from_state(ruby: &Ruby, bytes: RString) -> Result<Tally, Error> {
        // SAFETY: the bytes are copied out before any Ruby code can run.
        let bytes = unsafe { bytes.as_slice() }.to_vec();
        tally::Tally::from_state(&bytes)
            .map(|tally| Tally(Mutex::new(tally)))
            .map_err(|err| format_error(ruby, format!("not a tally: {err}")))
    }

    /// Why the ring is read no more (it contradicted what the scrapes
    /// before found: `stapsdt::ring::continuity`), or nil.
    fn refused(&self) -> Option<String> {
        self.lock().refused().map(str::to_owned)
    }

    /// `[dropped, overwritten]`: records lost so far.
    fn lost(&self) -> (u64, u64) {
        let lost = self.lock().lost();
        (lost.dropped, lost.overwritten)
    }

    /// `[[provider, name, calls, histogram], ...]`, histogram nil but for
    /// a latency probe: `[[bound_micros, count], ..., count, sum_ns]`, each
    /// bucket's own count (not cumulative), for scripts and specs.
    fn probes(ruby: &Ruby, rb_self: &Self) -> Result<RArray, Error> {
        let tally = rb_self.lock();
        let list = ruby.ary_new_capa(tally.probes().len());
        for probe in tally.probes() {
            let histogram = match &probe.latency {
                None => ruby.qnil().as_value(),
                Some(histogram) => {
                    let buckets = ruby.ary_new_capa(BUCKETS);
                    for (bucket, count) in histogram.buckets.iter().enumerate() {
                        buckets.push((tally::bucket_bound_micros(bucket), *count))?;
                    }
                    // 292 years of calls before it saturates.
                    let sum = i64::try_from(histogram.sum_ns).unwrap_or(if histogram.sum_ns < 0 {
                        i64::MIN
                    } else {
                        i64::MAX
                    });
                    (buckets, histogram.count, sum).into_value_with(ruby)
                }
            };
            list.push((
                probe.provider.as_str(),
                probe.name.as_str(),
                probe.calls,
                histogram,
            ))?;
        }
        Ok(list)
    }

    /// `Tally.exposition([[pid, tally], ...], accept)`: `[content_type,
    /// text]`, the metrics of them all, each labelled with its pid, in the
    /// format the scrape's `Accept` header (a String, or nil) asks for.
    fn exposition(rings: RArray, accept: Option<String>) -> Result<(&'static str, String), Error> {
        let mut entries = Vec::with_capacity(rings.len());
        for entry in rings.into_iter() {
            let (pid, tally): (u64, magnus::typed_data::Obj<Tally>) =
                magnus::TryConvert::try_convert(entry)?;
            entries.push((pid, tally));
        }
        // The GVL is held throughout: `rings` keeps every tally alive.
        let guards: Vec<(u64, MutexGuard<'_, tally::Tally>)> = entries
            .iter()
            .map(|(pid, tally)| (*pid, tally.lock()))
            .collect();
        let labelled: Vec<(u64, &tally::Tally)> =
            guards.iter().map(|(pid, tally)| (*pid, &**tally)).collect();
        let format = trace_metrics::Format::for_accept(accept.as_deref());
        Ok((
            format.content_type(),
            trace_metrics::exposition(&labelled, format),
        ))
    }
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let class = module.define_class("Tally", ruby.class_object())?;
    class.define_singleton_method("new", function!(Tally::new, 1))?;
    class.define_singleton_method("exposition", function!(Tally::exposition, 2))?;
    class.define_singleton_method("from_state", function!(Tally::from_state, 1))?;
    class.define_method("state", method!(Tally::state, 0))?;
    class.define_method("scrape", method!(Tally::scrape, 1))?;
    class.define_method("finish", method!(Tally::finish, 1))?;
    class.define_method("lost", method!(Tally::lost, 0))?;
    class.define_method("refused", method!(Tally::refused, 0))?;
    class.define_method("probe_list", method!(Tally::probes, 0))?;
    Ok(())
}
