//! Threads as the reports show them: "ruby 4321 thread 7 (worker)", the
//! name from the names a trace file holds after its slots
//! (`stapsdt::ring::trace_file`, docs/recording.md, "Thread names").

use crate::Trace;
use std::collections::HashMap;

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
