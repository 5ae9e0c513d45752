//! Where this process's recorder keeps its ring: in memory, so that a
//! recording writes nothing to a disk (docs/recording.md, "Where rings
//! live"). A ring mapped from a file on a disk is written back by the
//! kernel as it changes, the whole of it every writeback period for a
//! ring that is recorded into steadily, and the first write to each of its
//! pages faults, so that a fresh ring's first lap costs twice the next.
//!
//! The directory, the first of:
//!
//! 1. `$STATIC_TRACING_RING_DIR`, if set: the user's choice, on whatever
//!    file system (on a disk, at the cost above);
//! 2. the stub directory, where the process's state file is, if its file
//!    system is in memory (tmpfs: `$XDG_RUNTIME_DIR` is one under systemd);
//! 3. `/dev/shm/static_tracing-<uid>`, if `/dev/shm` is in memory.
//!
//! Otherwise nothing records, and the error names the setting. Each is
//! checked as a stub directory is ([`StubDir::open_for_rings`]), but may be
//! mounted `noexec`, as a container's `/dev/shm` is.
//!
//! The `static-tracing` command reads a ring that a process's state file
//! names only in one of these directories, as that process sees them
//! (lib/static_tracing/ring_directories.rb; spec/contracts_spec.rb holds
//! the two equal).

use crate::descriptors::{DescriptorShortage, PlaceError};
use crate::stub_dir::StubDir;
use crate::sys;
use crate::tried::{write_tried, Skipped};
use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// The environment variable that names the directory.
pub const SETTING: &str = "STATIC_TRACING_RING_DIR";

/// The file system of shared memory every Linux has.
pub const SHARED_MEMORY: &str = "/dev/shm";

/// The directory of `uid`'s rings in [`SHARED_MEMORY`].
pub fn shared_memory_dir(uid: u32) -> PathBuf {
    Path::new(SHARED_MEMORY).join(format!("static_tracing-{uid}"))
}

/// Why no directory could hold the ring.
#[derive(Debug)]
pub enum RingDirError {
    /// The directory `$STATIC_TRACING_RING_DIR` names cannot be used.
    Named {
        path: PathBuf,
        reason: String,
    },
    /// No directory in memory could be used, for these reasons.
    NoneInMemory(Vec<Skipped>),
    OutOfDescriptors(DescriptorShortage),
}

impl fmt::Display for RingDirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingDirError::Named { path, reason } => write!(
                f,
                "the directory ${SETTING} names, {}, cannot hold the ring: {reason}",
                path.display()
            ),
            RingDirError::NoneInMemory(tried) => {
                f.write_str("no directory in memory can hold the ring (")?;
                write_tried(f, tried)?;
                write!(
                    f,
                    "): set {SETTING} in the process's environment to a directory on a \
                     tmpfs (one on a disk will do, but the kernel then writes the ring to \
                     the disk as it changes)"
                )
            }
            RingDirError::OutOfDescriptors(shortage) => shortage.fmt(f),
        }
    }
}

impl std::error::Error for RingDirError {}

/// The directory `$STATIC_TRACING_RING_DIR` names in `env`, if any: a
/// relative one is relative to the working directory.
pub fn named_from(env: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let dir = PathBuf::from(env(SETTING).filter(|value| !value.is_empty())?);
    Some(std::path::absolute(&dir).unwrap_or(dir))
}

/// The directory this process's next ring goes to; `stub_dir` is where its
/// state file is. Leftover rings there are bounded first (see
/// [`crate::leftovers`]).
pub fn choose(stub_dir: &Arc<StubDir>) -> Result<Arc<StubDir>, RingDirError> {
    let dir = choose_from(
        |name| std::env::var_os(name),
        sys::effective_uid(),
        stub_dir,
    )?;
    dir.bound_leftover_rings();
    Ok(dir)
}

fn choose_from(
    env: impl Fn(&str) -> Option<OsString>,
    uid: u32,
    stub_dir: &Arc<StubDir>,
) -> Result<Arc<StubDir>, RingDirError> {
    if let Some(path) = named_from(&env) {
        return StubDir::open_for_rings(&path, true).map_err(|err| match err {
            PlaceError::OutOfDescriptors(shortage) => RingDirError::OutOfDescriptors(shortage),
            PlaceError::Unusable(reason) => RingDirError::Named { path, reason },
        });
    }
    if stub_dir.is_in_memory() {
        return Ok(stub_dir.clone());
    }
    let mut tried = vec![Skipped {
        location: format!("{} (the stub directory)", stub_dir.path().display()),
        reason: format!("it is on {}", stub_dir.file_system_name()),
    }];
    let shared = shared_memory_dir(uid);
    let opened = match shared_memory_kind() {
        Ok(kind) if !kind.is_memory() => Err(PlaceError::Unusable(format!(
            "{SHARED_MEMORY} is on {}",
            kind.name()
        ))),
        Err(err) => Err(PlaceError::Unusable(format!(
            "cannot open {SHARED_MEMORY} ({err})"
        ))),
        Ok(_) => StubDir::open_for_rings(&shared, true),
    }
    .and_then(|dir| {
        if dir.is_in_memory() {
            Ok(dir)
        } else {
            Err(PlaceError::Unusable(format!(
                "it is on {}",
                dir.file_system_name()
            )))
        }
    });
    match opened {
        Ok(dir) => Ok(dir),
        Err(PlaceError::OutOfDescriptors(shortage)) => {
            Err(RingDirError::OutOfDescriptors(shortage))
        }
        Err(PlaceError::Unusable(reason)) => {
            tried.push(Skipped {
                location: shared.display().to_string(),
                reason,
            });
            Err(RingDirError::NoneInMemory(tried))
        }
    }
}

fn shared_memory_kind() -> std::io::Result<sys::FileSystemKind> {
    sys::file_system_kind(&File::open(SHARED_MEMORY)?)
}

/// Sweeps, once per process, the directories other than `stub_dir` that
/// this process's rings could go to, if they exist: a process starting
/// bounds the rings that killed processes left there (see
/// [`crate::leftovers`]), whether or not it records.
pub fn sweep_once(stub_dir: &StubDir) {
    // The process that swept: a forked child sweeps again, as it would
    // have at its own start.
    static SWEPT_BY: AtomicI32 = AtomicI32::new(0);
    if SWEPT_BY.swap(sys::current_pid(), Ordering::Relaxed) == sys::current_pid() {
        return;
    }
    let env = |name: &str| std::env::var_os(name);
    let dirs = [
        named_from(env),
        Some(shared_memory_dir(sys::effective_uid())),
    ];
    for path in dirs.into_iter().flatten() {
        if let Ok(dir) = StubDir::open_for_rings(&path, false) {
            if !dir.is(stub_dir) {
                dir.sweep_once();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(value: &'static str) -> impl Fn(&str) -> Option<OsString> {
        move |name: &str| (name == SETTING).then(|| value.into())
    }

    #[test]
    fn the_setting_names_a_directory_and_an_empty_one_is_none() {
        assert_eq!(
            named_from(set("/run/rings")),
            Some(PathBuf::from("/run/rings"))
        );
        assert_eq!(named_from(set("")), None);
        assert_eq!(named_from(|_: &str| None), None);
        assert_eq!(
            shared_memory_dir(1000),
            PathBuf::from("/dev/shm/static_tracing-1000")
        );
    }

    // Miri's isolation has no working directory to resolve against.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_relative_setting_is_made_absolute() {
        let relative = named_from(set("rings")).unwrap();
        assert!(relative.is_absolute() && relative.ends_with("rings"));
    }
}
