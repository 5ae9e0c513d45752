//! Trace files on disk (docs/recording.md): what a process writes of its
//! own ring, a snapshot, as a new file that only its user can read.
//!
//! A snapshot goes wherever the process's code or a trigger's `--dump-dir`
//! says, a directory that others may write to: it is created, never
//! opened, so it neither follows a link planted under its name nor writes
//! into a file that was there. And it is checked against the process's
//! file-size limit first: past `ulimit -f`, a write ends the process with
//! SIGXFSZ instead of failing.
//!
//! A trigger's snapshots are written within a [`Budget`] of the directory
//! they go to, shared by every process that writes there and kept across
//! their restarts, because it is counted from the directory itself: the
//! `.trace` files in it, under `flock` on the directory while one is
//! counted and written (see [`write_within_budget`]).

use crate::ring::Snapshot;
use crate::sys;
use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// Writes `bytes` as the new file `path`, mode 0600 whatever the umask.
/// Fails with `AlreadyExists` if anything has that name (a link too),
/// `EFBIG` past the file-size limit (before anything is made); a file left
/// half written by an error (a full disk) is removed.
pub fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_new_with(path, bytes.len() as u64, |file| file.write_all(bytes))
}

/// [`write_new`] of a snapshot, written straight from its copy.
pub fn write_snapshot(path: &Path, snapshot: &Snapshot) -> io::Result<()> {
    write_new_with(path, snapshot.len(), |file| snapshot.write_to(file))
}

fn write_new_with(
    path: &Path,
    len: u64,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    sys::check_file_size(len)?;
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let written = private(&file).and_then(|()| write(&mut file));
    if written.is_err() {
        // Removed only while the name is still this file's: in a directory
        // another user can write to, it may be theirs by now.
        if sys::same_file(path, &file) {
            let _ = std::fs::remove_file(path);
        }
    }
    written
}

/// 0600 whatever the umask made of the mode asked for.
fn private(file: &File) -> io::Result<()> {
    file.set_permissions(Permissions::from_mode(0o600))
}

/// What a directory's trigger snapshots may take in all: at most `files`
/// `.trace` files and `bytes` bytes of them, counting every `.trace` file
/// there whoever wrote it. The oldest are kept: past the budget, a
/// snapshot is not written (nothing is ever removed to make room).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub files: u64,
    pub bytes: u64,
}

/// What [`write_within_budget`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The snapshot was written: its bytes and records.
    Written { bytes: u64, records: u64 },
    /// The directory's budget had no room for it: what the directory held
    /// (`.trace` files, their bytes), and the snapshot's bytes (0 when the
    /// files alone left no room, and no snapshot was made).
    OverBudget { files: u64, bytes: u64, wanted: u64 },
}

/// How long a snapshot waits for another process counting and writing
/// in the same directory; past it, no snapshot.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// Makes a snapshot with `make` and writes it as the new file `name` of
/// `dir`, if the directory's `.trace` files and it fit `budget`. The
/// directory is locked (`flock`) from counting to writing, so that
/// processes writing there at once never overshoot it together; one that
/// holds the lock longer than [`LOCK_WAIT`] makes this fail with
/// `WouldBlock`.
pub fn write_within_budget(
    dir: &Path,
    name: &str,
    budget: Budget,
    make: impl FnOnce() -> io::Result<Snapshot>,
) -> io::Result<Outcome> {
    let directory = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)?;
    lock(&directory)?;
    let (files, bytes) = held(dir)?;
    let over = |wanted| Outcome::OverBudget {
        files,
        bytes,
        wanted,
    };
    if files >= budget.files || bytes >= budget.bytes {
        return Ok(over(0));
    }
    let snapshot = make()?;
    if bytes.saturating_add(snapshot.len()) > budget.bytes {
        return Ok(over(snapshot.len()));
    }
    write_snapshot(&dir.join(name), &snapshot)?;
    Ok(Outcome::Written {
        bytes: snapshot.len(),
        records: snapshot.records(),
    })
    // The lock goes with `directory`.
}

/// Takes the directory's lock, waiting a little for another process.
fn lock(directory: &File) -> io::Result<()> {
    let started = Instant::now();
    while !sys::try_flock_exclusive(directory)? {
        if started.elapsed() > LOCK_WAIT {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "another process has held the directory's lock for over {}s",
                    LOCK_WAIT.as_secs()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// The `.trace` files of `dir` (regular files, not links) and their bytes.
fn held(dir: &Path) -> io::Result<(u64, u64)> {
    let (mut files, mut bytes) = (0u64, 0u64);
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if !entry.file_name().as_encoded_bytes().ends_with(b".trace") {
            continue;
        }
        // Gone meanwhile (someone cleaning up): not held.
        let Ok(metadata) = entry.metadata() else {
            continue;
        };
        // DirEntry::metadata does not follow a link: a link is no file here.
        if metadata.file_type().is_file() {
            files += 1;
            bytes = bytes.saturating_add(metadata.len());
        }
    }
    Ok((files, bytes))
}
