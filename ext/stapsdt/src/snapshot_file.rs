//! Trace files on disk (docs/recording.md): what a process writes of its
//! own ring, a snapshot, as a new file that only its user can read.
//!
//! A snapshot goes wherever the process's code or a trigger's `--dump-dir`
//! says, a directory that others may write to: it is created, never
//! opened, so it neither follows a link planted under its name nor writes
//! into a file that was there. And it is checked against the process's
//! file-size limit first: past `ulimit -f`, a write ends the process with
//! SIGXFSZ instead of failing.

use crate::sys;
use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Writes `bytes` as the new file `path`, mode 0600 whatever the umask.
/// Fails with `AlreadyExists` if anything has that name (a link too),
/// `EFBIG` past the file-size limit (before anything is made); a file left
/// half written by an error (a full disk) is removed.
pub fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    sys::check_file_size(bytes.len() as u64)?;
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let written = private(&file).and_then(|()| file.write_all(bytes));
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
