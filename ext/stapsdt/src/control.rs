//! The control channel: `<pid>-<pidns>.control`, a FIFO next to this
//! process's state file, which the `static-tracing` command writes its
//! requests to (record these probes, stop) as lines of at most `PIPE_BUF`
//! bytes, each written whole.
//!
//! A FIFO costs nothing while nobody writes to it: the thread that reads it
//! sleeps in the kernel, and no signal is needed, so it works whatever mode
//! the process runs in. Only its user (or root) can open it for writing:
//! it is mode 0600 in a private directory. The process opens it for reading
//! and writing both, so it never blocks on opening and never sees an end
//! of file when a writer closes.

use crate::owned_files;
use crate::state_file;
use crate::stub_dir::{control_file_name, ProcessKey};
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Creates this process's control FIFO where its state file is, replacing
/// a stale one of the same name; returns a descriptor to read it from
/// (the FIFO itself stays held until exit, or [`close`]) and its path.
pub fn open() -> io::Result<(File, PathBuf)> {
    let dir = state_file::published_dir().ok_or_else(|| {
        io::Error::other(
            "this process has published no state file, so it has no directory to put it in",
        )
    })?;
    let name = control_file_name(ProcessKey::current());
    close();
    let fifo = match dir.create_fifo_locked(&name) {
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists && dir.remove_if_unheld(&name) => {
            dir.create_fifo_locked(&name)
        }
        created => created,
    }?;
    let reader = fifo.try_clone()?;
    owned_files::own(&dir, &name, &Arc::new(fifo));
    Ok((reader, dir.path().join(name)))
}

/// Removes this process's control FIFO, if it has one.
pub fn close() {
    owned_files::remove_named(&control_file_name(ProcessKey::current()));
}
