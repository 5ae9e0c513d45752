//! The recorder's ring (docs/recording.md): records of probe firings, in
//! memory the caller maps from a file that another process reads as it is
//! written. The writer does no I/O and reads no clock: the caller passes the
//! memory, the times and the thread ids; the reader reads files through
//! [`scan::ReadAt`], from a descriptor or from bytes in memory.
//!
//! This module owns the format: no offset of it is known anywhere else.
//!
//! - [`format`]: every offset, constant and encoding of the format, and
//!   [`Slot`], the one view of a slot's bytes;
//! - [`Ring`]: the writer, lock-free and allocation-free on its hot paths,
//!   and [`Ring::snapshot_within`], a consistent copy of it, or of the
//!   newest records of a [`Window`] of it, as a trace file;
//! - [`scan`]: the format's one reader: a ring or trace file read from
//!   wherever its bytes are, a window of slots at a time, every byte checked
//!   (the checks are `checks`'), and [`parse`], its reading of bytes in memory;
//! - [`cursor`]: the one cursor over a live ring, and the lost-record rule,
//!   which following ([`follow`]) and the metrics' tally both move;
//! - [`continuity`]: what those readers, which read one ring again and
//!   again, hold each read to: what the reads before found;
//! - [`trace_file`]: the one writer of trace files, with the thread names
//!   after their slots, for the snapshot and for the command.
//!
//! ```
//! use stapsdt::ring::{parse, Arg, Ring, RingConfig, Value};
//! use stapsdt::ArgType;
//!
//! let config = RingConfig::for_size(64 << 10, true).unwrap();
//! // Zeroed and 8-aligned, as a fresh mapping of a new file is.
//! let mut memory = vec![0u64; config.file_len() as usize / 8];
//! // SAFETY: `memory` outlives `ring` and is touched only through it.
//! let ring = unsafe { Ring::create(memory.as_mut_ptr().cast(), &config) }.unwrap();
//! let done = ring.add_probe("app", "request", &[ArgType::Int64], Some(0), None).unwrap();
//! let query = ring.add_probe("app", "query", &[ArgType::String], None, None).unwrap();
//! assert!(ring.record_integer(done, 1_000, 7, 250_000));
//! assert!(ring.record(query, 2_000, 7, &[Arg::Str(b"SELECT 1")]));
//!
//! let trace = parse(&ring.snapshot()).unwrap();
//! assert_eq!(trace.records[1].args, [Value::Str(b"SELECT 1".to_vec())]);
//! assert_eq!(trace.lost(), 0);
//! # drop(ring);
//! ```

mod checks;
pub mod contexts;
pub mod continuity;
pub mod cursor;
#[cfg(unix)]
pub mod follow;
pub mod format;
#[cfg(unix)]
mod live_threads;
mod region;
pub mod scan;
mod snapshot;
pub mod trace_file;
mod writer;

pub use checks::{FormatError, Record, Trace};
pub use contexts::{Context, Contexts, Latest};
pub use cursor::{Cursor, Lost};
pub use format::{Arg, Counters, Header, Maker, ProbeEntry, Slot, Value, MAX_STRING};
pub use scan::{parse, TraceError};
pub use snapshot::{Snapshot, Window};
pub use writer::{
    ConfigError, Ring, RingConfig, TableError, DEFAULT_TABLE_CAPACITY, MAX_SLOTS_BYTES,
    MAX_TABLE_CAPACITY, MIN_SLOTS_BYTES,
};

#[cfg(test)]
mod tests;
