//! Traces made by hand for the reports' tests, like those of the command's
//! report spec: process 4321, whose clock reads the Unix epoch at 0 plus
//! [`EPOCH`], so that a record's time is its wall-clock time less EPOCH.

use crate::{Records, Trace};
use stapsdt::ring::{Context, Counters, Header, ProbeEntry, Record, Value};
use stapsdt::ArgType;

pub const EPOCH: i64 = 1_700_000_000_000_000_000;

pub fn probe(
    id: u32,
    provider: &str,
    name: &str,
    types: Vec<ArgType>,
    latency_arg: Option<u8>,
    stack_arg: Option<u8>,
) -> ProbeEntry {
    ProbeEntry {
        id,
        provider: provider.to_owned(),
        name: name.to_owned(),
        types,
        latency_arg,
        stack_arg,
    }
}

/// A latency probe: `my_controller:index(Integer)`.
pub fn index_probe(id: u32) -> ProbeEntry {
    probe(
        id,
        "my_controller",
        "index",
        vec![ArgType::Int64],
        Some(0),
        None,
    )
}

/// `app:hits(String, Integer, Float)`.
pub fn hits_probe(id: u32) -> ProbeEntry {
    let types = vec![ArgType::String, ArgType::Int64, ArgType::Float64];
    probe(id, "app", "hits", types, None, None)
}

/// A stack probe: `my_controller_stack:index(String)`.
pub fn stack_probe(id: u32) -> ProbeEntry {
    probe(
        id,
        "my_controller_stack",
        "index",
        vec![ArgType::String],
        None,
        Some(0),
    )
}

/// Index, hits and stack, with ids 0, 1 and 2.
pub fn standard_probes() -> Vec<ProbeEntry> {
    vec![index_probe(0), hits_probe(1), stack_probe(2)]
}

pub fn record(probe: u32, args: Vec<Value>, time_ns: u64, tid: u32) -> Record {
    Record {
        seq: 0,
        slots: 1,
        time_ns,
        probe,
        tid,
        tag: 0,
        args,
        context: Context::None,
    }
}

/// Calls of the index probe (id 0) lasting `latencies` (ns), one every
/// microsecond from 1ms, on thread 7.
pub fn calls(latencies: &[i64]) -> Vec<Record> {
    calls_from(latencies, 1_000_000)
}

/// As [`calls`], from `start` (ns).
pub fn calls_from(latencies: &[i64], start: u64) -> Vec<Record> {
    latencies
        .iter()
        .enumerate()
        .map(|(number, &latency)| {
            record(
                0,
                vec![Value::Int(latency)],
                start + number as u64 * 1000,
                7,
            )
        })
        .collect()
}

/// A record of the hits probe (id 1).
pub fn hits_record(text: &str, time_ns: u64) -> Record {
    let args = vec![
        Value::Str(text.as_bytes().to_vec()),
        Value::Int(1),
        Value::Float(0.5),
    ];
    record(1, args, time_ns, 7)
}

/// A record of the stack probe (id 2).
pub fn stack_record(stack: &[u8], time_ns: u64) -> Record {
    record(2, vec![Value::Str(stack.to_vec())], time_ns, 7)
}

/// A trace file of process 4321 holding `records` (each of its probe's
/// types, as the reader finds them) and nothing lost.
pub fn trace(name: &str, probes: Vec<ProbeEntry>, mut records: Vec<Record>) -> Trace {
    for (seq, record) in records.iter_mut().enumerate() {
        record.seq = seq as u64;
    }
    let header = Header {
        version: stapsdt::ring::format::VERSION,
        table_capacity: 4096,
        ring_offset: 8192,
        slot_count: records.len() as u64,
        flags: 0,
        pid: 4321,
        pid_namespace: 4026531836,
        anchor_monotonic_ns: 0,
        anchor_realtime_ns: EPOCH,
        max_string: 256,
    };
    let counters = Counters {
        head: records.len() as u64,
        records: records.len() as u64,
        ..Counters::default()
    };
    let mut held = Records::new(&probes);
    for record in &records {
        held.push(record);
    }
    Trace {
        name: name.to_owned(),
        header,
        counters,
        probes,
        records: held,
    }
}

pub fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}
