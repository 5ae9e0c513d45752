//! The text report's figures as one JSON document, for scripts and CI
//! checks: what was read (files, processes, records, their span, the
//! records lost and why), then per probe its calls and, for a latency
//! probe, p50/p90/p99/max and the histogram's buckets, every duration in
//! integer nanoseconds. docs/recording.md shows a whole document.

use super::histogram::{self, Bucket};
use super::probe_calls::{probe_calls, ProbeCalls, SlowCall, Tally};
use super::text::{percentiles, wall_time, PERCENTILES};
use super::{LostRecords, Options};
use crate::Trace;
use serde_json::{json, Map, Value};
use stapsdt::ring::Context;
use std::io::{self, Write};

pub fn write(traces: &[Trace], options: &Options, out: &mut impl Write) -> io::Result<()> {
    let mut tallies: Vec<Tally> = traces
        .iter()
        .map(|trace| Tally::of(trace, options.slowest))
        .collect();
    let mut document = summary(traces, &tallies);
    let probes: Vec<Value> = probe_calls(traces, &mut tallies, options.slowest)
        .into_iter()
        .map(probe)
        .collect();
    document.insert("probes".to_owned(), Value::Array(probes));
    serde_json::to_writer_pretty(&mut *out, &document)?;
    writeln!(out)
}

fn summary(traces: &[Trace], tallies: &[Tally]) -> Map<String, Value> {
    let mut processes: Vec<(u64, u64)> = Vec::new();
    for trace in traces {
        let process = (trace.header.pid, trace.header.pid_namespace);
        if !processes.contains(&process) {
            processes.push(process);
        }
    }
    let records: usize = traces.iter().map(|trace| trace.records.len()).sum();
    let range = traces
        .iter()
        .zip(tallies)
        .filter_map(|(trace, tally)| {
            let (least, greatest) = tally.times?;
            Some((wall_time(trace, least), wall_time(trace, greatest)))
        })
        .reduce(|(least, greatest), (low, high)| (least.min(low), greatest.max(high)));
    let LostRecords {
        dropped,
        overwritten,
        being_written,
    } = LostRecords::of(traces);
    let mut document = Map::new();
    document.insert(
        "files".to_owned(),
        traces.iter().map(|trace| trace.name.as_str()).collect(),
    );
    document.insert(
        "processes".to_owned(),
        processes
            .iter()
            .map(|&(pid, pid_namespace)| json!({"pid": pid, "pid_namespace": pid_namespace}))
            .collect(),
    );
    document.insert("records".to_owned(), json!(records));
    // Wall-clock nanoseconds since the Unix epoch: past i64 only for a
    // hostile file's anchors, which then show as null rather than wrapped.
    let nanoseconds = |value: i128| i64::try_from(value).map_or(Value::Null, Value::from);
    let (first, last) = range.map_or((Value::Null, Value::Null), |(first, last)| {
        (nanoseconds(first), nanoseconds(last))
    });
    document.insert("first_record_ns".to_owned(), first);
    document.insert("last_record_ns".to_owned(), last);
    document.insert(
        "span_ns".to_owned(),
        range.map_or(Value::Null, |(first, last)| nanoseconds(last - first)),
    );
    document.insert(
        "lost".to_owned(),
        json!({
            "total": wide(dropped + overwritten + being_written),
            "dropped": wide(dropped),
            "overwritten": wide(overwritten),
            "being_written": wide(being_written),
        }),
    );
    document
}

/// A sum of u64 counts: a u64 unless a hostile file's counters overflow it.
fn wide(number: u128) -> Value {
    u64::try_from(number).map_or_else(|_| json!(number.to_string()), Value::from)
}

fn probe(probe: ProbeCalls) -> Value {
    let (provider, name) = probe
        .label
        .split_once(':')
        .unwrap_or((probe.label.as_str(), ""));
    let mut entry = json!({
        "probe": probe.label,
        "provider": provider,
        "name": name,
        "calls": probe.calls,
        "latency": null,
    });
    if let Some(mut latencies) = probe.latencies.filter(|latencies| !latencies.is_empty()) {
        let max = latencies.iter().copied().max().unwrap_or_default();
        let mut latency = Map::new();
        for (percent, value) in PERCENTILES.iter().zip(percentiles(&mut latencies)) {
            latency.insert(format!("p{percent}_ns"), json!(value));
        }
        latency.insert("max_ns".to_owned(), json!(max));
        let buckets = histogram::latency_buckets(&latencies);
        latency.insert("histogram".to_owned(), buckets.iter().map(bucket).collect());
        latency.insert(
            "slowest".to_owned(),
            probe.slowest.iter().map(slow_call).collect(),
        );
        entry["latency"] = Value::Object(latency);
    }
    entry
}

/// One of the slowest calls: its duration, when it ended (ns since the
/// epoch, null past i64), process, thread, and trace context (`trace_id`
/// and `span_id`, null outside any; `context_unknown` true when its
/// context record was not read).
fn slow_call(call: &SlowCall) -> Value {
    let (trace_id, span_id) = match call.context.known() {
        Some(context) => (json!(context.trace_hex()), json!(context.span_hex())),
        None => (Value::Null, Value::Null),
    };
    json!({
        "duration_ns": call.duration,
        "ended_ns": i64::try_from(call.ended).map_or(Value::Null, Value::from),
        "pid": call.pid,
        "tid": call.tid,
        "trace_id": trace_id,
        "span_id": span_id,
        "context_unknown": call.context == Context::Unknown,
    })
}

/// A bucket with its bounds in nanoseconds, `low_ns` included and
/// `high_ns` not, null where it is unbounded: bpftrace's `hist(arg0 /
/// 1000)` truncates toward zero, so "< 0" holds up to -1000ns, [0] from
/// -999ns to 999ns, [1] 1000 to 1999ns, and [2^(k-1), 2^k) microseconds
/// the rest.
fn bucket(bucket: &Bucket) -> Value {
    let micros = |power: i32| 1000i128 << power;
    let (low, high): (Option<i128>, Option<i128>) = match bucket.bits {
        ..=-1 => (None, Some(-999)),
        0 => (Some(-999), Some(1000)),
        bits => (Some(micros(bits - 1)), Some(micros(bits))),
    };
    let bound = |value: Option<i128>| {
        value
            .and_then(|value| i64::try_from(value).ok())
            .map_or(Value::Null, Value::from)
    };
    json!({"low_ns": bound(low), "high_ns": bound(high), "count": bucket.count})
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn json_of(traces: &[Trace]) -> Value {
        let mut out = Vec::new();
        write(traces, &Options::default(), &mut out).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn gives_the_text_reports_figures() {
        let mut records = calls(&[1500, 2500, 900]);
        records.push(hits_record("x", 20_000_000));
        let mut first = trace("a.trace", standard_probes(), records);
        first.counters.records = 6;
        first.counters.dropped = 1;
        let document = json_of(&[first]);
        let slowest: Vec<Value> = [(2500, 1_001_000), (1500, 1_000_000), (900, 1_002_000)]
            .iter()
            .map(|(duration, ended)| {
                json!({
                    "duration_ns": duration, "ended_ns": EPOCH + ended,
                    "pid": 4321, "tid": 7, "trace_id": null, "span_id": null,
                    "context_unknown": false,
                })
            })
            .collect();
        assert_eq!(
            document,
            json!({
                "files": ["a.trace"],
                "processes": [{"pid": 4321, "pid_namespace": 4026531836u64}],
                "records": 4,
                "first_record_ns": EPOCH + 1_000_000,
                "last_record_ns": EPOCH + 20_000_000,
                "span_ns": 19_000_000,
                "lost": {"total": 3, "dropped": 1, "overwritten": 0, "being_written": 2},
                "probes": [
                    {
                        "probe": "my_controller:index",
                        "provider": "my_controller",
                        "name": "index",
                        "calls": 3,
                        "latency": {
                            "p50_ns": 1500, "p90_ns": 2500, "p99_ns": 2500, "max_ns": 2500,
                            "histogram": [
                                {"low_ns": -999, "high_ns": 1000, "count": 1},
                                {"low_ns": 1000, "high_ns": 2000, "count": 1},
                                {"low_ns": 2000, "high_ns": 4000, "count": 1},
                            ],
                            "slowest": slowest,
                        },
                    },
                    {"probe": "app:hits", "provider": "app", "name": "hits", "calls": 1, "latency": null},
                    {
                        "probe": "my_controller_stack:index",
                        "provider": "my_controller_stack",
                        "name": "index",
                        "calls": 0,
                        "latency": null,
                    },
                ],
            })
        );
    }

    #[test]
    fn bounds_the_buckets_as_bpftraces_hist_of_microseconds() {
        let document = json_of(&[trace(
            "a.trace",
            vec![index_probe(0)],
            calls(&[-1000, i64::MAX]),
        )]);
        let histogram = document["probes"][0]["latency"]["histogram"]
            .as_array()
            .unwrap();
        assert_eq!(
            histogram[0],
            json!({"low_ns": null, "high_ns": -999, "count": 1})
        );
        assert_eq!(
            histogram.last().unwrap(),
            // Its high bound, 2^54us, is past what an i64 of ns holds.
            &json!({"low_ns": 1000i64 << 53, "high_ns": null, "count": 1})
        );
        let empty = json_of(&[trace("b.trace", vec![index_probe(0)], vec![])]);
        assert_eq!(empty["span_ns"], Value::Null);
        assert_eq!(empty["probes"][0]["latency"], Value::Null);
    }
}
