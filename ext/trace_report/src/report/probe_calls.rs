//! The calls of each probe, across files. A probe is known by its
//! `provider:name`, so that the same probe recorded in two files (two
//! workers, say) is one; probes come in the order the files' probe tables
//! first name them.

use crate::Trace;
use stapsdt::ring::Arg;
use std::collections::HashMap;

/// A probe's calls in all the files.
#[derive(Debug, PartialEq, Eq)]
pub struct ProbeCalls {
    pub label: String,
    pub calls: u64,
    /// The durations (ns) of its calls, in no order, if it is a latency
    /// probe in any of the files.
    pub latencies: Option<Vec<i64>>,
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
    /// The least and greatest record times, on the file's clock.
    pub times: Option<(u64, u64)>,
}

impl Tally {
    pub fn of(trace: &Trace) -> Tally {
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
        let (mut least, mut greatest) = (u64::MAX, u64::MIN);
        for record in &trace.records {
            let probe = record.probe as usize;
            calls[probe] += 1;
            if let (Some(arg), Some(durations)) = (latency_args[probe], &mut latencies[probe]) {
                // The reader checked that a latency argument is an Integer.
                if let Some(Arg::Int(duration)) = record.arg(arg) {
                    durations.push(duration);
                }
            }
            least = least.min(record.time_ns);
            greatest = greatest.max(record.time_ns);
        }
        Tally {
            calls,
            latencies,
            times: (!trace.records.is_empty()).then_some((least, greatest)),
        }
    }
}

/// The probes of all the files, their calls summed by label. Takes the
/// tallies' latencies, which it moves rather than copies.
pub fn probe_calls(traces: &[Trace], tallies: &mut [Tally]) -> Vec<ProbeCalls> {
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
                    });
                    probes.len() - 1
                }
            };
            let group = &mut probes[group];
            group.calls += tally.calls[position];
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
