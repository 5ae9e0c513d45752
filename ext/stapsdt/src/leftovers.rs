//! The rings of processes that are gone, and how many of them are kept.
//!
//! A process removes its ring when its recording stops and at exit; one
//! that was killed (SIGKILL, the OOM killer) cannot, and its ring stays
//! with what it recorded last, for `static-tracing report` to read. Rings
//! live in memory (see [`crate::ring_dir`]), so a worker in a crash loop
//! must not leave one a restart until memory runs out: at most
//! [`KEPT_RINGS`] of them are kept in a directory, and at most
//! [`KEPT_BYTES`] together (the newest one whatever its size), the newest
//! by the time they were made; older ones are removed, oldest first,
//! whenever a directory is swept: by a process starting, by a process
//! starting a recording, and by `static-tracing` reading a ring there.
//!
//! A ring is a process's for as long as any open file description holds a
//! lock on it (see `StubDir::create_locked`): only a ring on which a write
//! lock can be taken is a leftover, and it stays locked until it is either
//! kept or removed, so that no process can claim it meanwhile.

use crate::stub_dir::{entry_names, ring_file_key};
use crate::sys;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::SystemTime;

/// Rings of processes that are gone kept in a directory, at most.
pub const KEPT_RINGS: usize = 8;

/// Bytes of such rings kept in a directory, at most (the newest is kept
/// whatever its size).
pub const KEPT_BYTES: u64 = 256 << 20;

/// A ring nobody else holds, write-locked through `file` by this sweep.
struct Leftover {
    name: String,
    /// Holds the lock until the ring is kept or removed.
    file: File,
    made: SystemTime,
    bytes: u64,
}

/// The rings in `dir` that no process holds, newest first. `path` is
/// where to list it if its descriptor cannot be listed. A symbolic link
/// named as a ring is never a process's ring: it is removed.
fn leftovers(dir: &File, path: Option<&Path>) -> Vec<Leftover> {
    let mut found: Vec<Leftover> = entry_names(dir, path)
        .into_iter()
        .filter(|name| ring_file_key(name).is_some())
        .filter_map(|name| {
            let file = match sys::open_at(dir, &name) {
                Ok(file) => file,
                Err(err) if err.raw_os_error() == Some(libc::ELOOP) => {
                    let _ = sys::unlink_at(dir, &name);
                    return None;
                }
                Err(_) => return None,
            };
            let meta = file.metadata().ok()?;
            if !meta.is_file() || !sys::try_lock_exclusive(&file).unwrap_or(false) {
                return None;
            }
            Some(Leftover {
                made: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                bytes: meta.blocks().saturating_mul(512),
                name,
                file,
            })
        })
        .collect();
    found.sort_by(|a, b| b.made.cmp(&a.made).then_with(|| a.name.cmp(&b.name)));
    found
}

/// How many of `newest_first` (sizes in bytes) are kept: the newest, then
/// each next one while at most [`KEPT_RINGS`] and [`KEPT_BYTES`] are.
pub fn kept(newest_first: &[u64]) -> usize {
    let mut bytes = 0u64;
    for (index, &size) in newest_first.iter().enumerate() {
        bytes = bytes.saturating_add(size);
        if index >= KEPT_RINGS || (index > 0 && bytes > KEPT_BYTES) {
            return index;
        }
    }
    newest_first.len()
}

/// Removes `leftover` if its name still leads to the file locked.
fn remove(dir: &File, leftover: &Leftover) -> bool {
    sys::names_file(dir, &leftover.name, &leftover.file)
        && sys::unlink_at(dir, &leftover.name).is_ok()
}

/// Removes the leftover rings of `dir` beyond what is kept (see [`kept`]);
/// returns how many it removed.
pub fn bound(dir: &File, path: Option<&Path>) -> usize {
    let found = leftovers(dir, path);
    let sizes: Vec<u64> = found.iter().map(|leftover| leftover.bytes).collect();
    found[kept(&sizes)..]
        .iter()
        .filter(|leftover| remove(dir, leftover))
        .count()
}

/// Removes leftover rings of `dir`, oldest first, until `bytes` are free on
/// its file system or none is left; returns how many it removed.
pub fn make_room(dir: &File, path: Option<&Path>, bytes: u64) -> usize {
    let fits = || sys::available_space(dir).map_or(true, |free| free >= bytes);
    let mut removed = 0;
    for leftover in leftovers(dir, path).iter().rev() {
        if fits() {
            break;
        }
        removed += usize::from(remove(dir, leftover));
    }
    removed
}

/// [`bound`] for a directory opened by someone else than the process
/// whose rings it holds (the `static-tracing` command, checked as it
/// checks a process's files).
pub fn bound_in(dir: &File) -> usize {
    bound(dir, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn keeps_the_newest_within_count_and_bytes() {
        assert_eq!(kept(&[]), 0);
        assert_eq!(kept(&[16 * MIB; 50]), KEPT_RINGS);
        assert_eq!(kept(&[16 * MIB; 3]), 3);
        // 256 MiB: four of 64 MiB, not a fifth.
        assert_eq!(kept(&[64 * MIB; 6]), 4);
        // The newest whatever its size; nothing older once one does not fit.
        assert_eq!(kept(&[4096 * MIB, MIB, MIB]), 1);
        assert_eq!(kept(&[MIB, 300 * MIB, MIB]), 1);
    }
}
