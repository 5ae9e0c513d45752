//! Reports of the recorder's files, as `static-tracing report` makes them
//! (docs/recording.md): files read whole for them ([`trace`], their
//! records held compactly in [`records`]), then text, JSON, Chrome, speedscope,
//! pprof, folded stacks and SVG ([`report`]), with one way to show a
//! duration ([`report::durations`]) and one histogram-bucket rule
//! ([`report::histogram`]), which the metrics (`trace_metrics`) share. The
//! format itself, its reading and writing, is `stapsdt::ring`'s.
//!
//! Nothing here knows about Ruby.

pub mod records;
pub mod report;
pub mod trace;

pub use records::{RecordRef, Records};
pub use stapsdt::ring::TraceError;
pub use trace::Trace;
