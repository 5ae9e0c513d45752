//! The recorder's ring in a file: `<pid>-<pidns>.ring`, in memory (see
//! [`crate::ring_dir`] for the directory), named by this process's state
//! file, where the `static-tracing` command finds it and reads it while the
//! process writes it (see docs/recording.md).
//!
//! It is created as every file a process keeps in a stub directory is
//! (private, locked for the process's life, removed when it is done with,
//! or at exit), with every block reserved before it is mapped: a page the
//! file system could not supply when it is first written would kill the
//! process with SIGBUS in the middle of a traced call (a full tmpfs does
//! that as a full disk does). A ring past the process's file-size limit, or
//! larger than its file system's free space once the leftovers of killed
//! processes made room (see [`crate::leftovers`]), is refused before the
//! file is made. Then it is mapped shared, so that a record written here is
//! in the file, for the reader, with no copy and no system call, and its
//! pages faulted in writable: the first lap costs what the next does.

use crate::owned_files;
use crate::ring::{ConfigError, Ring, RingConfig};
use crate::ring_dir::{self, RingDirError, SETTING, SHARED_MEMORY};
use crate::state_file;
use crate::stub_dir::{ring_file_name, ProcessKey, StubDir};
use crate::sys::{self, Populate, SharedMapping};
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
    /// No directory could hold it (see [`crate::ring_dir`]).
    Place(RingDirError),
    /// The file could not be created, sized or mapped: where, and the error.
    Io { path: PathBuf, err: io::Error },
    /// There is no room for it: where, its size, and the room there was.
    NoRoom {
        path: PathBuf,
        len: u64,
        available: Option<u64>,
        err: io::Error,
    },
    /// The geometry asked for cannot be.
    Config(ConfigError),
}

/// `bytes` as a size is said: `16.1 MiB`.
fn mebibytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

impl fmt::Display for RingFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingFileError::NoDirectory => f.write_str(
                "no stub directory is usable, so there is nowhere to put the ring \
                 (the process warned about each directory when it started)",
            ),
            RingFileError::Place(err) => err.fmt(f),
            RingFileError::NoRoom {
                path,
                len,
                available,
                err,
            } => {
                let dir = path.parent().unwrap_or(path);
                write!(
                    f,
                    "no room for the ring {} ({}) in {}",
                    path.display(),
                    mebibytes(*len),
                    dir.display()
                )?;
                if let Some(available) = available {
                    write!(f, ", where {} are free", mebibytes(*available))?;
                }
                write!(
                    f,
                    " ({err}): ask for less (--size), or set {SETTING} in the process's \
                     environment to a directory with room"
                )?;
                if dir.starts_with(SHARED_MEMORY) {
                    f.write_str(
                        " (in a container, /dev/shm is 64 MiB unless the container is \
                         started with more: docker run --shm-size)",
                    )?;
                }
                Ok(())
            }
            RingFileError::Io { path, err } => match err.raw_os_error() {
                Some(libc::ENOMEM) => write!(
                    f,
                    "not enough memory for the ring {} ({err}): ask for less (--size)",
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
        let stub_dir = state_file::published_dir().ok_or(RingFileError::NoDirectory)?;
        let dir = ring_dir::choose(&stub_dir).map_err(RingFileError::Place)?;
        let name = ring_file_name(ProcessKey::current());
        let path = dir.path().join(&name);
        let failed = |err| RingFileError::Io {
            path: path.clone(),
            err,
        };
        let len = config.file_len();
        let len_usize =
            usize::try_from(len).map_err(|_| failed(io::Error::from_raw_os_error(libc::EFBIG)))?;
        // Both refused before anything is made: past `ulimit -f` the kernel
        // answers fallocate with SIGXFSZ, which ends the process, and where
        // fallocate is not supported a full file system would fault it later.
        sys::check_file_size(len).map_err(failed)?;
        let no_room = |err| RingFileError::NoRoom {
            path: path.clone(),
            len,
            available: dir.available_space().ok(),
            err,
        };
        if dir.available_space().is_ok_and(|available| available < len) {
            dir.make_room_for(len);
            if dir.available_space().is_ok_and(|available| available < len) {
                return Err(no_room(io::Error::from_raw_os_error(libc::ENOSPC)));
            }
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
        // On a disk, pages faulted in for writing would all be written out
        // at once, and written back again as each is first written anyway.
        let populate = if dir.is_in_memory() {
            Populate::ForWriting
        } else {
            Populate::ForReading
        };
        let reserved = sys::allocate(&file, len).and_then(|()| file.set_len(len));
        let mapped = match reserved {
            Err(err) if matches!(err.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) => {
                let _ = dir.remove(&name);
                return Err(no_room(err));
            }
            reserved => reserved.and_then(|()| SharedMapping::new(&file, len_usize, populate)),
        };
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

    /// The file system it is on, when that is not in memory: a directory
    /// `$STATIC_TRACING_RING_DIR` named on a disk, which the kernel writes
    /// the ring back to as it changes.
    pub fn on_disk(&self) -> Option<String> {
        (!self.dir.is_in_memory()).then(|| self.dir.file_system_name())
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
