//! The names of a live process's threads, as `/proc` has them: a record
//! names its thread by id only, and the name its process gave it (what
//! `/proc/PID/task/TID/comm` says, which Ruby's `Thread#name=` sets) is
//! known only while the process runs. A reader of a live ring (`record`,
//! `dump`) reads them as it sees the threads, for the trace file it
//! writes (see `trace_file`'s thread names).

use super::format::Header;
use std::fs;
use std::os::unix::fs::MetadataExt;

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
    #[cfg_attr(miri, ignore = "reads /proc, which Miri's isolation hides")]
    fn finds_this_processs_threads_by_their_ids() {
        let named = std::thread::Builder::new()
            .name("names-test".to_owned())
            .spawn(|| {
                // SAFETY: gettid takes no arguments and cannot fail.
                let tid = unsafe { libc::gettid() } as u32;
                let own = fs::metadata("/proc/self/ns/pid").unwrap().ino();
                let header = Header {
                    version: crate::ring::format::VERSION,
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
