//! The recorder's ring (docs/recording.md): records of probe firings, in
//! memory the caller maps from a file that another process reads as it is
//! written. Nothing here does I/O or reads a clock: the caller passes the
//! memory, the times and the thread ids.
//!
//! - [`format`]: every offset, constant and encoding of the format.

pub mod format;
