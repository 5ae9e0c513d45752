//! Running out of file descriptors: not a fault of any one stub directory.
//!
//! When the process (`EMFILE`) or the system (`ENFILE`) has no descriptor
//! left, every other directory, and the memfd, would fail the same way; and
//! a stub quietly loaded from a memfd instead would hide the real problem.
//! So loading stops there, and says so.

use crate::sys;
use std::fmt;
use std::io;

/// Which limit on open files was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DescriptorShortage {
    /// `EMFILE`: this process's limit (`ulimit -n`), when it could be read.
    Process { limit: Option<u64> },
    /// `ENFILE`: the system-wide limit (`fs.file-max`).
    System,
}

impl DescriptorShortage {
    /// The shortage `err` reports, if it reports one.
    pub fn of(err: &io::Error) -> Option<DescriptorShortage> {
        match err.raw_os_error()? {
            libc::EMFILE => Some(DescriptorShortage::Process {
                limit: sys::open_files_limit(),
            }),
            libc::ENFILE => Some(DescriptorShortage::System),
            _ => None,
        }
    }
}

impl fmt::Display for DescriptorShortage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DescriptorShortage::Process { limit: Some(limit) } => write!(
                f,
                "this process has run out of file descriptors (EMFILE: it reached its limit \
                 of {limit} open files, `ulimit -n`)"
            ),
            DescriptorShortage::Process { limit: None } => write!(
                f,
                "this process has run out of file descriptors (EMFILE: it reached its limit, \
                 `ulimit -n`)"
            ),
            DescriptorShortage::System => write!(
                f,
                "the system has run out of file descriptors (ENFILE: the system-wide limit, \
                 fs.file-max, is reached)"
            ),
        }
    }
}

/// Why a place (a stub directory, a memfd) could not take an image or a
/// state file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlaceError {
    /// This place will not do, for this reason: the next one may.
    Unusable(String),
    /// No place will do until descriptors are freed.
    OutOfDescriptors(DescriptorShortage),
}

impl PlaceError {
    /// A shortage as what it is; any other error as `describe` says it.
    pub fn from_io(err: io::Error, describe: impl FnOnce(io::Error) -> String) -> PlaceError {
        match DescriptorShortage::of(&err) {
            Some(shortage) => PlaceError::OutOfDescriptors(shortage),
            None => PlaceError::Unusable(describe(err)),
        }
    }
}

impl fmt::Display for PlaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlaceError::Unusable(reason) => f.write_str(reason),
            PlaceError::OutOfDescriptors(shortage) => shortage.fmt(f),
        }
    }
}
