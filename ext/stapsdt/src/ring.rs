//! The recorder's ring (docs/recording.md): records of probe firings, in
//! memory the caller maps from a file that another process reads as it is
//! written. Nothing here does I/O or reads a clock: the caller passes the
//! memory, the times and the thread ids.
//!
//! - [`format`]: every offset, constant and encoding of the format;
//! - [`Ring`]: the writer, lock-free and allocation-free on its hot paths,
//!   and [`Ring::snapshot`], a consistent copy of it as a trace file;
//! - [`parse`]: a ring or trace file's bytes read back and checked.
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

pub mod format;
mod reader;
mod region;
pub mod scan;
mod snapshot;
mod writer;

pub use format::{Counters, Header, MAX_STRING};
pub use reader::{parse, FormatError, ProbeEntry, Record, Trace, Value};
pub use writer::{
    Arg, ConfigError, Ring, RingConfig, TableError, DEFAULT_TABLE_CAPACITY, MAX_SLOTS_BYTES,
    MAX_TABLE_CAPACITY, MIN_SLOTS_BYTES,
};

#[cfg(test)]
mod tests;
