//! Threads as the files hold them and the reports show them. A record
//! names its thread by id only; the name its process gave it (what
//! `/proc/PID/task/TID/comm` says, which Ruby's `Thread#name=` sets) is
//! known only while the process runs. So the command reads the names of
//! the threads it sees in records as it reads a live ring (`record`,
//! `dump`), and writes them into the trace file after its slots, where a
//! reader of the format's version 1 finds nothing it reads
//! (docs/recording.md, "Thread names").

use crate::Trace;
use stapsdt::ring::format::{Header, SLOT_SIZE};
use stapsdt::ring::scan::ReadAt;
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::os::unix::fs::MetadataExt;

/// What begins the thread names after a trace file's slots.
pub const MAGIC: &[u8; 8] = b"STTHREAD";
/// A name longer than this is cut: the kernel's are at most 15 bytes.
pub const MAX_NAME: usize = 64;
/// At most this many names are read from a file: a hostile file's count
/// allocates nothing.
const MAX_NAMES: usize = 65_536;
const ENTRY_HEADER: usize = 5;

/// A thread of one file: thread ids are a process's, and two files may be
/// two processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ThreadKey {
    /// The file's index among those reported on.
    pub trace: usize,
    pub tid: u32,
}

/// Thread names by process (pid and pid namespace) and thread id.
#[derive(Clone, Debug, Default)]
pub struct ThreadNames {
    names: HashMap<(u64, u64, u32), String>,
}

impl ThreadNames {
    pub fn insert(&mut self, pid: u64, pid_namespace: u64, tid: u32, name: String) {
        self.names.insert((pid, pid_namespace, tid), name);
    }

    /// The name of thread `tid` of `trace`'s process, if known.
    pub fn name(&self, trace: &Trace, tid: u32) -> Option<&str> {
        self.names
            .get(&(trace.header.pid, trace.header.pid_namespace, tid))
            .map(String::as_str)
    }

    /// "ruby 4321 thread 7", and its name after it when known.
    pub fn label(&self, trace: &Trace, tid: u32) -> String {
        let pid = trace.header.pid;
        match self.name(trace, tid) {
            Some(name) => format!("ruby {pid} thread {tid} ({name})"),
            None => format!("ruby {pid} thread {tid}"),
        }
    }

    /// The named threads of `trace`'s process, by id.
    pub fn of_process(&self, trace: &Trace) -> Vec<(u32, &str)> {
        let process = (trace.header.pid, trace.header.pid_namespace);
        let mut named: Vec<(u32, &str)> = self
            .names
            .iter()
            .filter(|((pid, namespace, _), _)| (*pid, *namespace) == process)
            .map(|((_, _, tid), name)| (*tid, name.as_str()))
            .collect();
        named.sort_unstable();
        named
    }
}

/// The names as a trace file holds them after its slots: the magic, a
/// `u32` count, then per thread its id (`u32`), the length of its name
/// (`u8`) and the name's bytes.
pub fn encode_trailer(names: &BTreeMap<u32, String>) -> Vec<u8> {
    if names.is_empty() {
        return Vec::new();
    }
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&(names.len() as u32).to_le_bytes());
    for (tid, name) in names {
        let name = &name.as_bytes()[..name.len().min(MAX_NAME)];
        bytes.extend_from_slice(&tid.to_le_bytes());
        bytes.push(name.len() as u8);
        bytes.extend_from_slice(name);
    }
    bytes
}

/// The names after the slots of the file in `source` whose header is
/// `header`; none if there are none, or if what follows the slots is not
/// names: they only label what the records say.
pub fn read_trailer(source: &(impl ReadAt + ?Sized), header: &Header) -> Vec<(u32, String)> {
    let Some(start) = header
        .slot_count
        .checked_mul(SLOT_SIZE)
        .and_then(|slots| slots.checked_add(header.ring_offset))
    else {
        return Vec::new();
    };
    let Ok(len) = source.file_len() else {
        return Vec::new();
    };
    let longest = (MAGIC.len() + 4 + MAX_NAMES * (ENTRY_HEADER + MAX_NAME)) as u64;
    let Some(size) = len
        .checked_sub(start)
        .filter(|&size| size > 0 && size <= longest)
    else {
        return Vec::new();
    };
    let mut bytes = vec![0; size as usize];
    match source.read_at(&mut bytes, start) {
        Ok(read) if read == bytes.len() => decode_trailer(&bytes),
        _ => Vec::new(),
    }
}

fn decode_trailer(bytes: &[u8]) -> Vec<(u32, String)> {
    let Some(rest) = bytes.strip_prefix(MAGIC) else {
        return Vec::new();
    };
    let Some(count) = rest.get(..4) else {
        return Vec::new();
    };
    let count = u32::from_le_bytes(count.try_into().expect("4 bytes")) as usize;
    let mut rest = &rest[4..];
    let mut names = Vec::with_capacity(count.min(MAX_NAMES));
    for _ in 0..count.min(MAX_NAMES) {
        let Some(entry) = rest.get(..ENTRY_HEADER) else {
            break;
        };
        let tid = u32::from_le_bytes(entry[..4].try_into().expect("4 bytes"));
        let len = usize::from(entry[4]);
        let Some(name) = rest.get(ENTRY_HEADER..ENTRY_HEADER + len) else {
            break;
        };
        names.push((tid, String::from_utf8_lossy(name).into_owned()));
        rest = &rest[ENTRY_HEADER + len..];
    }
    names
}

/// The names of the threads `tids` (as the process sees them) of the
/// process whose ring has `header`, as `/proc` has them now; those not
/// found (exited, or the process is not visible here) are left out.
/// `process` caches where the process is in this `/proc`.
pub fn live_names(
    header: &Header,
    tids: &[u32],
    process: &mut Option<Option<u64>>,
) -> Vec<(u32, String)> {
    let Some(pid) = *process.get_or_insert_with(|| visible_pid(header)) else {
        return Vec::new();
    };
    let wanted = |tid: u32| tids.contains(&tid);
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for task in tasks.flatten() {
        let dir = task.path();
        let Some(tid) = innermost_id(&dir.join("status"), "NSpid:") else {
            continue;
        };
        let Ok(tid) = u32::try_from(tid) else {
            continue;
        };
        if !wanted(tid) {
            continue;
        }
        if let Ok(comm) = fs::read(dir.join("comm")) {
            let name = comm.strip_suffix(b"\n").unwrap_or(&comm);
            found.push((tid, String::from_utf8_lossy(name).into_owned()));
        }
    }
    found
}

/// The pid, in this `/proc`, of the process that calls itself
/// `header.pid` in pid namespace `header.pid_namespace`.
fn visible_pid(header: &Header) -> Option<u64> {
    let same_namespace = |pid: u64| {
        header.pid_namespace == 0
            || fs::metadata(format!("/proc/{pid}/ns/pid"))
                .is_ok_and(|namespace| namespace.ino() == header.pid_namespace)
    };
    let own = fs::metadata("/proc/self/ns/pid").map(|namespace| namespace.ino());
    if own.is_ok_and(|own| own == header.pid_namespace) || header.pid_namespace == 0 {
        return same_namespace(header.pid).then_some(header.pid);
    }
    // Another namespace (a container's): the process whose innermost pid
    // is the header's, in that namespace.
    fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u64>().ok())
        .find(|&pid| {
            same_namespace(pid)
                && innermost_id(format!("/proc/{pid}/status").as_ref(), "NSpid:")
                    == Some(header.pid)
        })
}

/// The last id of the `field` line of a `/proc` status file: the id in
/// the innermost pid namespace.
fn innermost_id(status: &std::path::Path, field: &str) -> Option<u64> {
    let text = fs::read_to_string(status).ok()?;
    let line = text.lines().find_map(|line| line.strip_prefix(field))?;
    line.split_whitespace().last()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_the_names_it_writes_and_nothing_of_other_bytes() {
        let names = BTreeMap::from([
            (7, "ruby".to_owned()),
            (9, "puma srv tp 001".to_owned()),
            (11, "x".repeat(100)),
        ]);
        let bytes = encode_trailer(&names);
        let read = decode_trailer(&bytes);
        assert_eq!(
            read,
            [
                (7, "ruby".to_owned()),
                (9, "puma srv tp 001".to_owned()),
                (11, "x".repeat(MAX_NAME))
            ]
        );
        // Cut short: the whole names before the cut.
        assert_eq!(decode_trailer(&bytes[..bytes.len() - 1]).len(), 2);
        assert!(decode_trailer(b"garbage that is not names").is_empty());
        assert!(decode_trailer(&[]).is_empty());
        assert!(encode_trailer(&BTreeMap::new()).is_empty());
    }

    #[test]
    fn finds_this_processs_threads_by_their_ids() {
        let named = std::thread::Builder::new()
            .name("names-test".to_owned())
            .spawn(|| {
                // SAFETY: gettid takes no arguments and cannot fail.
                let tid = unsafe { libc::gettid() } as u32;
                let own = fs::metadata("/proc/self/ns/pid").unwrap().ino();
                let header = Header {
                    table_capacity: 0,
                    ring_offset: 4096,
                    slot_count: 0,
                    flags: 0,
                    pid: u64::from(std::process::id()),
                    pid_namespace: own,
                    anchor_monotonic_ns: 0,
                    anchor_realtime_ns: 0,
                    max_string: 0,
                };
                let mut process = None;
                live_names(&header, &[tid, u32::MAX], &mut process)
                    .into_iter()
                    .map(|(found, name)| (found == tid, name))
                    .collect::<Vec<_>>()
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(named, [(true, "names-test".to_owned())]);
    }
}
