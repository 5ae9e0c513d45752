//! The files this process created in stub directories (its stubs and its
//! state file), and their removal: when no longer needed, or at exit.
//!
//! One list for the whole process, because exit cleanup must find every
//! file whoever created it. A file is removed through the descriptor of the
//! directory it was created in, never by path (see [`crate::stub_dir`]).

use crate::stub_dir::StubDir;
use crate::sys;
use crate::sys::fork_claims;
use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// A file this process created, to be removed when it exits.
struct OwnedFile {
    dir: Arc<StubDir>,
    name: String,
    /// The description created with the file, carrying this process's lock
    /// on it (see `StubDir::create_locked`); for a stub, the image's own.
    held: Arc<File>,
    creator: libc::pid_t,
    /// No longer loaded here, but kept because another process mapped it.
    retired: bool,
}

static OWNED_FILES: Mutex<Vec<OwnedFile>> = Mutex::new(Vec::new());

/// The files this process owns. A forked child inherits its parent's list:
/// it forgets those files (the parent removes them) and closes its copies
/// of their descriptions, so that its parent's state file, say, is not
/// held for as long as the child lives; the image files it maps stay held
/// by its images.
fn owned_files() -> MutexGuard<'static, Vec<OwnedFile>> {
    let mut files = OWNED_FILES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let pid = sys::current_pid();
    files.retain(|file| file.creator == pid);
    files
}

/// Records `name` in `dir`, just created by this process and held through
/// `held`, for removal at exit.
pub(crate) fn own(dir: &Arc<StubDir>, name: &str, held: &Arc<File>) {
    owned_files().push(OwnedFile {
        dir: dir.clone(),
        name: name.to_owned(),
        held: held.clone(),
        creator: sys::current_pid(),
        retired: false,
    });
}

/// Records `name` in `dir` as the one file of that name this process owns.
/// A copy left in another directory (one that has become unusable) would be
/// found first by readers: it goes. A copy replaced in `dir` itself is gone
/// already; its description (and lock) go now. Returns the file's path.
pub(crate) fn own_only_copy(dir: Arc<StubDir>, name: String, held: File) -> PathBuf {
    let mut files = owned_files();
    files.retain(|file| {
        if file.name != name {
            return true;
        }
        if !file.dir.is(&dir) {
            let _ = file.dir.remove(&file.name);
        }
        false
    });
    let path = dir.path().join(&name);
    files.push(OwnedFile {
        dir,
        name,
        held: Arc::new(held),
        creator: sys::current_pid(),
        retired: false,
    });
    path
}

/// Forgets the file held through `held` (its name was removed, or is about to be).
pub(crate) fn forget(held: &Arc<File>) {
    owned_files().retain(|owned| !Arc::ptr_eq(&owned.held, held));
}

/// Marks the file held through `held`, which another process still maps, to
/// be removed once it is free.
pub(crate) fn retire(held: &Arc<File>) {
    for owned in owned_files()
        .iter_mut()
        .filter(|owned| Arc::ptr_eq(&owned.held, held))
    {
        owned.retired = true;
    }
}

/// Removes the retired files of this process that nobody maps any more.
pub(crate) fn remove_free_retired_files() {
    owned_files().retain(|file| {
        if !file.retired || fork_claims::claimed_by_another_process(&file.held) {
            return true;
        }
        let _ = file.dir.remove(&file.name);
        false
    });
}

/// Removes every stub file this process created and still has, except the
/// ones a forked child still maps: tracers find a child's probes by the
/// file's name, so it stays until the child is gone too, and the sweep of a
/// later process removes it. Meant for process exit: mappings stay valid,
/// only the names go.
pub fn remove_files_at_exit() -> usize {
    let mut removed = 0;
    owned_files().retain(|file| {
        if fork_claims::claimed_by_another_process(&file.held) {
            return true;
        }
        removed += usize::from(file.dir.remove(&file.name).is_ok());
        false
    });
    removed
}

/// Removes the file `name` this process created, wherever it is, and forgets it.
pub(crate) fn remove_named(name: &str) {
    owned_files().retain(|file| {
        if file.name != name {
            return true;
        }
        let _ = file.dir.remove(&file.name);
        false
    });
}
