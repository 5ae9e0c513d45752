//! The calls of each probe, across files. A probe is known by its
//! `provider:name`, so that the same probe recorded in two files (two
//! workers, say) is one; probes come in the order the files' probe tables
//! first name them.

use super::text::wall_time;
use crate::Trace;
use stapsdt::ring::{Arg, Context};
use std::collections::HashMap;

/// One of a latency probe's slowest calls: how long it took, when it
/// ended (wall clock, ns since the epoch), which process and thread made
/// it, in which trace context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlowCall {
    pub duration: i64,
    pub ended: i128,
    pub pid: u64,
    pub tid: u32,
    pub context: Context,
}

/// Keeps `call` among `slowest`, the `keep` slowest calls in descending
/// order of duration (the earlier first of equal ones).
fn keep_slowest(slowest: &mut Vec<SlowCall>, call: SlowCall, keep: usize) {
    if keep == 0 || (slowest.len() == keep && slowest[keep - 1].duration >= call.duration) {
        return;
    }
    let at = slowest.partition_point(|kept| kept.duration >= call.duration);
    slowest.insert(at, call);
    slowest.truncate(keep);
}

/// A probe's calls in all the files.
#[derive(Debug, PartialEq, Eq)]
pub struct ProbeCalls {
    pub label: String,
    pub calls: u64,
    /// The durations (ns) of its calls, in no order, if it is a latency
    /// probe in any of the files.
    pub latencies: Option<Vec<i64>>,
    /// Its slowest calls, slowest first, if it is a latency probe.
    pub slowest: Vec<SlowCall>,
}

/// What one file's records say, found in one pass over them, as a file can
/// hold millions.
#[derive(Debug)]
pub struct Tally {
    /// By position in the file's probe table.
    pub calls: Vec<u64>,
    /// By position in the file's probe table; a probe without a latency
    /// argument has none.
    pub latencies: Vec<Option<Vec<i64>>>,
    /// By position in the file's probe table: a latency probe's slowest
    /// calls, slowest first.
    pub slowest: Vec<Vec<SlowCall>>,
    /// The least and greatest record times, on the file's clock.
    pub times: Option<(u64, u64)>,
}

impl Tally {
    /// What `trace`'s records say, with the `slowest` slowest calls of each
    /// latency probe.
    pub fn of(trace: &Trace, slowest: usize) -> Tally {
        let latency_args: Vec<Option<usize>> = trace
            .probes
            .iter()
            .map(|probe| probe.latency_arg.map(usize::from))
            .collect();
        let mut calls = vec![0; trace.probes.len()];
        let mut latencies: Vec<Option<Vec<i64>>> = latency_args
            .iter()
            .map(|arg| arg.map(|_| Vec::new()))
            .collect();
        let mut slow: Vec<Vec<SlowCall>> = vec![Vec::new(); trace.probes.len()];
        let (mut least, mut greatest) = (u64::MAX, u64::MIN);
        for record in &trace.records {
            let probe = record.probe as usize;
            calls[probe] += 1;
            if let (Some(arg), Some(durations)) = (latency_args[probe], &mut latencies[probe]) {
                // The reader checked that a latency argument is an Integer.
                if let Some(Arg::Int(duration)) = record.arg(arg) {
                    durations.push(duration);
                    let call = SlowCall {
                        duration,
                        ended: wall_time(trace, record.time_ns),
                        pid: trace.header.pid,
                        tid: record.tid,
                        context: record.context,
                    };
                    keep_slowest(&mut slow[probe], call, slowest);
                }
            }
            least = least.min(record.time_ns);
            greatest = greatest.max(record.time_ns);
        }
        Tally {
            calls,
            latencies,
            slowest: slow,
            times: (!trace.records.is_empty()).then_some((least, greatest)),
        }
    }
}

/// The probes of all the files, their calls summed by label, and the
/// `slowest` slowest calls of each. Takes the tallies' latencies, which it
/// moves rather than copies.
pub fn probe_calls(traces: &[Trace], tallies: &mut [Tally], slowest: usize) -> Vec<ProbeCalls> {
    let mut probes: Vec<ProbeCalls> = Vec::new();
    let mut by_label: HashMap<String, usize> = HashMap::new();
    for (trace, tally) in traces.iter().zip(tallies.iter_mut()) {
        for (position, probe) in trace.probes.iter().enumerate() {
            let label = format!("{}:{}", probe.provider, probe.name);
            let group = match by_label.get(&label) {
                Some(&group) => group,
                None => {
                    by_label.insert(label.clone(), probes.len());
                    probes.push(ProbeCalls {
                        label,
                        calls: 0,
                        latencies: None,
                        slowest: Vec::new(),
                    });
                    probes.len() - 1
                }
            };
            let group = &mut probes[group];
            group.calls += tally.calls[position];
            for call in std::mem::take(&mut tally.slowest[position]) {
                keep_slowest(&mut group.slowest, call, slowest);
            }
            if probe.latency_arg.is_some() {
                let mut durations = tally.latencies[position].take().unwrap_or_default();
                match &mut group.latencies {
                    Some(all) => all.append(&mut durations),
                    None => group.latencies = Some(durations),
                }
            }
        }
    }
    probes
}
