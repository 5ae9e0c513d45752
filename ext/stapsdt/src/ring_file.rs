//! The recorder's ring in a file: `<pid>-<pidns>.ring`, next to this
//! process's state file, where the `static-tracing` command finds it and
//! reads it while the process writes it (see docs/recording.md).
//!
//! It is created as every file a process keeps in a stub directory is
//! (private, locked for the process's life, removed when it is done with,
//! or at exit), with every block reserved before it is mapped: a page the
//! file system could not supply when it is first written would kill the
//! process with SIGBUS in the middle of a traced call. A ring past the
//! process's file-size limit, or larger than its file system's free space,
//! is refused before the file is made. Then it is mapped
//! shared, so that a record written here is in the file, for the reader,
//! with no copy and no system call.

use crate::owned_files;
use crate::ring::{ConfigError, Ring, RingConfig};
use crate::state_file;
use crate::stub_dir::{ring_file_name, ProcessKey, StubDir};
use crate::sys::{self, SharedMapping};
use std::fmt;
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// A ring mapped from its file. The ring points into the mapping, and both
/// go together: nothing can hold the ring past the mapping.
pub struct RingFile {
    ring: Ring,
    mapping: SharedMapping,
    held: Arc<File>,
    dir: Arc<StubDir>,
    name: String,
    creator: libc::pid_t,
}

/// Why a ring could not be made.
#[derive(Debug)]
pub enum RingFileError {
    /// The process published no state file: it has no directory the
    /// command would look in.
    NoDirectory,
    /// The file could not be created, sized or mapped: where, and the error.
    Io { path: PathBuf, err: io::Error },
    /// The geometry asked for cannot be.
    Config(ConfigError),
}

impl fmt::Display for RingFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingFileError::NoDirectory => f.write_str(
                "no stub directory is usable, so there is nowhere to put the ring \
                 (the process warned about each directory when it started)",
            ),
            RingFileError::Io { path, err } => match err.raw_os_error() {
                Some(libc::ENOSPC | libc::EDQUOT) => write!(
                    f,
                    "no space for the ring {} on its file system ({err}): ask for less \
                     (--size), or free some space there",
                    path.display()
                ),
                Some(libc::ENOMEM) => write!(
                    f,
                    "not enough memory to map the ring {} ({err}): ask for less (--size)",
                    path.display()
                ),
                Some(libc::EFBIG) => write!(
                    f,
                    "the ring {} would be larger than this process may make a file \
                     ({err}: see ulimit -f): ask for less (--size)",
                    path.display()
                ),
                _ => write!(f, "cannot create the ring {} ({err})", path.display()),
            },
            RingFileError::Config(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for RingFileError {}

impl RingFile {
    /// Creates this process's ring file, laid out as `config` says.
    pub fn create(config: &RingConfig) -> Result<RingFile, RingFileError> {
        let dir = state_file::published_dir().ok_or(RingFileError::NoDirectory)?;
        let name = ring_file_name(ProcessKey::current());
        let failed = |err| RingFileError::Io {
            path: dir.path().join(&name),
            err,
        };
        let len = config.file_len();
        let len_usize =
            usize::try_from(len).map_err(|_| failed(io::Error::from_raw_os_error(libc::EFBIG)))?;
        // Both refused before anything is made: past `ulimit -f` the kernel
        // answers fallocate with SIGXFSZ, which ends the process, and where
        // fallocate is not supported a full file system would fault it later.
        sys::check_file_size(len).map_err(failed)?;
        if dir.available_space().is_ok_and(|available| available < len) {
            return Err(failed(io::Error::from_raw_os_error(libc::ENOSPC)));
        }
        let file = match dir.create_locked(&name, &[]) {
            Err(err)
                if err.kind() == io::ErrorKind::AlreadyExists && dir.remove_if_unheld(&name) =>
            {
                dir.create_locked(&name, &[])
            }
            created => created,
        }
        .map_err(failed)?;
        let mapped = sys::allocate(&file, len)
            .and_then(|()| file.set_len(len))
            .and_then(|()| SharedMapping::new(&file, len_usize));
        let mapping = match mapped {
            Ok(mapping) => mapping,
            Err(err) => {
                let _ = dir.remove(&name);
                return Err(failed(err));
            }
        };
        // SAFETY: the mapping is `len` = `config.file_len()` bytes of a new
        // file, zeroed, page-aligned, readable and writable; it lives as
        // long as the ring (both are fields of this RingFile, which hands
        // out the ring only by reference). Other processes reach it only
        // through their own mapping or pread/pwrite, as the ring expects.
        let ring = match unsafe { Ring::create(mapping.as_ptr(), config) } {
            Ok(ring) => ring,
            Err(err) => {
                let _ = dir.remove(&name);
                return Err(RingFileError::Config(err));
            }
        };
        let held = Arc::new(file);
        owned_files::own(&dir, &name, &held);
        Ok(RingFile {
            ring,
            mapping,
            held,
            dir,
            name,
            creator: sys::current_pid(),
        })
    }

    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The file's path, as this process sees it.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join(&self.name)
    }

    /// The file's size in bytes.
    pub fn len(&self) -> usize {
        self.mapping.len()
    }

    pub fn is_empty(&self) -> bool {
        self.mapping.is_empty()
    }
}

impl Drop for RingFile {
    /// The creator removes the file; a forked child that inherited the
    /// mapping only lets go of it (the file is its parent's).
    fn drop(&mut self) {
        if self.creator == sys::current_pid() {
            owned_files::forget(&self.held);
            let _ = self.dir.remove(&self.name);
        }
    }
}
