//! What the `static-tracing` command does with the recorder's files
//! (docs/recording.md), on the format's one implementation
//! (`stapsdt::ring`): read trace files and live rings ([`trace`]), follow a
//! ring as its process writes it ([`follow`]), write trace files
//! ([`write`]), and make reports of them ([`report`]). The command's Ruby
//! code checks whose files they are and opens them; it hands them here.
//!
//! Nothing here knows about Ruby.

pub mod follow;
pub mod records;
pub mod report;
pub mod tally;
pub mod trace;
pub mod write;

pub use records::{RecordRef, Records};
pub use trace::{Trace, TraceError};
