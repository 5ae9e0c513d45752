//! Live metrics of the recorder's rings, for `static-tracing export` and
//! `StaticTracing::Rack::Metrics` (docs/fleet.md): a [`Tally`] of each
//! ring across scrapes, moved by the ring's one cursor
//! (`stapsdt::ring::cursor`), with its durations in the reports' buckets,
//! and their exposition as scrapers read it ([`exposition`]): the
//! Prometheus text format, or OpenMetrics with exemplars.
//!
//! Nothing here knows about Ruby.

pub mod exposition;
pub mod tally;

pub use exposition::{exposition, Format};
pub use tally::{Histogram, ProbeTally, Tally, BUCKETS};
#[cfg(test)]
mod rewritten_rings;
#[cfg(test)]
mod testing;
