//! This process's state file, `<pid>-<pidns>.state`, next to its stubs: where
//! the `static-tracing` command reads a process's mode and toggle signal.

use crate::descriptors::{DescriptorShortage, PlaceError};
use crate::owned_files;
use crate::stub_dir::{self, Candidate, ProcessKey, StubDir};
use crate::tried::{cannot_write, write_tried, Skipped};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The directory this process's state file was last published in, and by
/// which process (a forked child has published none yet).
static PUBLISHED_IN: Mutex<Option<(libc::pid_t, Arc<StubDir>)>> = Mutex::new(None);

/// Why a state file could not be published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishError {
    /// Every candidate was passed over, for these reasons.
    NowhereUsable(Vec<Skipped>),
    /// Stopped at `location`: no other directory would have done better.
    OutOfDescriptors {
        location: String,
        shortage: DescriptorShortage,
    },
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishError::NowhereUsable(tried) => {
                f.write_str("no stub directory is usable: ")?;
                write_tried(f, tried)
            }
            PublishError::OutOfDescriptors { location, shortage } => {
                write!(f, "{shortage} (at {location})")
            }
        }
    }
}

impl std::error::Error for PublishError {}

/// Writes `contents` as this process's state file in the first usable stub
/// directory of `candidates`, replacing the one published before. Returns
/// its path.
pub fn publish_state(contents: &[u8], candidates: &[Candidate]) -> Result<PathBuf, PublishError> {
    let name = stub_dir::state_file_name(ProcessKey::current());
    let mut skipped = Vec::new();
    for candidate in candidates {
        let published = StubDir::open(&candidate.path).and_then(|dir| {
            dir.sweep_once();
            match dir.replace(&name, contents) {
                Ok(held) => Ok((dir, held)),
                Err(err) => Err(PlaceError::from_io(err, cannot_write)),
            }
        });
        match published {
            Ok((dir, held)) => {
                crate::ring_dir::sweep_once(&dir);
                *published_in() = Some((crate::sys::current_pid(), dir.clone()));
                return Ok(owned_files::own_only_copy(dir, name, held));
            }
            Err(PlaceError::OutOfDescriptors(shortage)) => {
                return Err(PublishError::OutOfDescriptors {
                    location: candidate.location(),
                    shortage,
                })
            }
            Err(PlaceError::Unusable(reason)) => skipped.push(Skipped {
                location: candidate.location(),
                reason,
            }),
        }
    }
    Err(PublishError::NowhereUsable(skipped))
}

fn published_in() -> std::sync::MutexGuard<'static, Option<(libc::pid_t, Arc<StubDir>)>> {
    PUBLISHED_IN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The directory this process's state file is in, if it published one: the
/// `static-tracing` command finds a process's other files for it (its
/// control channel) there, next to what it trusts, and its recorder's ring
/// where its state file says (see `crate::ring_dir`).
pub fn published_dir() -> Option<Arc<StubDir>> {
    let published = published_in();
    let (pid, dir) = published.as_ref()?;
    (*pid == crate::sys::current_pid()).then(|| dir.clone())
}
