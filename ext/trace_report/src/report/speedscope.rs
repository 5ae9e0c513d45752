//! speedscope's file format (its `file-format-schema.json`): per thread of
//! each process, an evented profile of its latency probes' calls (a frame
//! named `provider:probe` opened at the call's start, closed at its end,
//! in nanoseconds from the first record of all the files), and a sampled
//! profile of the stacks its stack probes recorded (each record one
//! sample of weight 1: the widths count calls). Frames are shared by all
//! the profiles.
//!
//! Memory follows the calls and the distinct stacks, not the bytes of the
//! stacks: each distinct stack is split into frames once.

use super::folded::cleaned;
use super::text::wall_time;
use super::threads::{ThreadKey, ThreadNames};
use crate::Trace;
use serde_json::ser::{CompactFormatter, Formatter};
use stapsdt::ring::Arg;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

pub fn write(traces: &[Trace], names: &ThreadNames, out: &mut impl Write) -> io::Result<()> {
    let profiles = Profiles::of(traces);
    out.write_all(b"{\"$schema\":")?;
    json_string(out, SCHEMA)?;
    out.write_all(b",\"exporter\":\"static-tracing\",\"name\":")?;
    let files: Vec<&str> = traces.iter().map(|trace| trace.name.as_str()).collect();
    json_string(out, &files.join(", "))?;
    out.write_all(b",\"activeProfileIndex\":0,\"profiles\":[")?;
    let mut first = true;
    for (key, thread) in &profiles.threads {
        let trace = &traces[key.trace];
        let thread_label = names.label(trace, key.tid);
        if !thread.calls.is_empty() {
            separate(out, &mut first)?;
            evented(out, &format!("{thread_label}: latency probes"), thread)?;
        }
        if !thread.samples.is_empty() {
            separate(out, &mut first)?;
            sampled(
                out,
                &format!("{thread_label}: stacks"),
                thread,
                &profiles.stacks,
            )?;
        }
    }
    out.write_all(b"],\"shared\":{\"frames\":[")?;
    for (index, frame) in profiles.frames.iter().enumerate() {
        if index > 0 {
            out.write_all(b",")?;
        }
        out.write_all(b"{\"name\":")?;
        json_string(out, frame)?;
        out.write_all(b"}")?;
    }
    out.write_all(b"]}}\n")
}

/// A call of a latency probe, in nanoseconds from the origin.
#[derive(Clone, Copy)]
struct Call {
    start: i64,
    end: i64,
    frame: u32,
}

#[derive(Default)]
struct Thread {
    calls: Vec<Call>,
    /// Indexes into `Profiles::stacks`, in the order recorded.
    samples: Vec<u32>,
}

struct Profiles {
    frames: Vec<String>,
    /// Each distinct stack's frames, root first.
    stacks: Vec<Vec<u32>>,
    threads: BTreeMap<ThreadKey, Thread>,
}

impl Profiles {
    fn of(traces: &[Trace]) -> Profiles {
        let origin = origin(traces);
        let mut frames = Frames::default();
        let mut stacks: Vec<Vec<u32>> = Vec::new();
        let mut threads: BTreeMap<ThreadKey, Thread> = BTreeMap::new();
        for (index, trace) in traces.iter().enumerate() {
            let probe_frames: Vec<Option<u32>> = trace
                .probes
                .iter()
                .map(|probe| {
                    probe
                        .latency_arg
                        .map(|_| frames.intern(&format!("{}:{}", probe.provider, probe.name)))
                })
                .collect();
            // By the stack's bytes, within this file: they borrow from it.
            let mut stack_ids: HashMap<&[u8], u32> = HashMap::new();
            for record in &trace.records {
                let probe = &trace.probes[record.probe as usize];
                let key = ThreadKey {
                    trace: index,
                    tid: record.tid,
                };
                if let (Some(arg), Some(frame)) =
                    (probe.latency_arg, probe_frames[record.probe as usize])
                {
                    let Some(Arg::Int(duration)) = record.arg(usize::from(arg)) else {
                        continue;
                    };
                    let end = relative(wall_time(trace, record.time_ns) - origin);
                    // A negative duration (a clock that went back) is no
                    // call at all on a timeline: it shows as an instant.
                    let start = end.saturating_sub(duration.max(0));
                    threads
                        .entry(key)
                        .or_default()
                        .calls
                        .push(Call { start, end, frame });
                } else if let Some(arg) = probe.stack_arg {
                    let Some(Arg::Str(stack)) = record.arg(usize::from(arg)) else {
                        continue;
                    };
                    if stack.is_empty() {
                        continue;
                    }
                    let id = *stack_ids.entry(stack).or_insert_with(|| {
                        stacks.push(
                            stack
                                .split(|&byte| byte == b';')
                                .map(|frame| frames.intern(&cleaned(frame)))
                                .collect(),
                        );
                        (stacks.len() - 1) as u32
                    });
                    threads.entry(key).or_default().samples.push(id);
                }
            }
        }
        Profiles {
            frames: frames.names,
            stacks,
            threads,
        }
    }
}

#[derive(Default)]
struct Frames {
    names: Vec<String>,
    ids: HashMap<String, u32>,
}

impl Frames {
    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_owned());
        self.ids.insert(name.to_owned(), id);
        id
    }
}

/// The wall-clock time of the earliest record of all the files.
fn origin(traces: &[Trace]) -> i128 {
    traces
        .iter()
        .filter_map(|trace| {
            let least = trace.records.iter().map(|record| record.time_ns).min()?;
            Some(wall_time(trace, least))
        })
        .min()
        .unwrap_or(0)
}

/// Nanoseconds from the origin: within i64 for any two real clocks, and
/// pinned there for a hostile file's.
fn relative(nanoseconds: i128) -> i64 {
    nanoseconds.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// The thread's calls as properly nested open and close events, which
/// speedscope requires: calls sorted by start (the longer first at a tie),
/// each closing the calls before it that ended by its start. A call that
/// outlasts the one it started in (clocks of a record's start and end are
/// not one) is cut at that one's end.
fn evented(out: &mut impl Write, name: &str, thread: &Thread) -> io::Result<()> {
    let mut calls = thread.calls.clone();
    calls.sort_unstable_by_key(|call| (call.start, std::cmp::Reverse(call.end)));
    let start_value = calls.first().map_or(0, |call| call.start);
    let end_value = calls.iter().map(|call| call.end).max().unwrap_or(0);
    out.write_all(b"{\"type\":\"evented\",\"name\":")?;
    json_string(out, name)?;
    out.write_all(b",\"unit\":\"nanoseconds\",\"startValue\":")?;
    CompactFormatter.write_i64(out, start_value)?;
    out.write_all(b",\"endValue\":")?;
    CompactFormatter.write_i64(out, end_value)?;
    out.write_all(b",\"events\":[")?;
    let mut open: Vec<Call> = Vec::new();
    let mut first = true;
    for mut call in calls {
        while let Some(top) = open.last().filter(|top| top.end <= call.start) {
            event(out, &mut first, b'C', top.end, top.frame)?;
            open.pop();
        }
        if let Some(top) = open.last() {
            call.end = call.end.min(top.end);
        }
        event(out, &mut first, b'O', call.start, call.frame)?;
        open.push(call);
    }
    while let Some(top) = open.pop() {
        event(out, &mut first, b'C', top.end, top.frame)?;
    }
    out.write_all(b"]}")
}

fn event(out: &mut impl Write, first: &mut bool, kind: u8, at: i64, frame: u32) -> io::Result<()> {
    separate(out, first)?;
    out.write_all(b"{\"type\":\"")?;
    out.write_all(&[kind])?;
    out.write_all(b"\",\"at\":")?;
    CompactFormatter.write_i64(out, at)?;
    out.write_all(b",\"frame\":")?;
    CompactFormatter.write_u32(out, frame)?;
    out.write_all(b"}")
}

fn sampled(
    out: &mut impl Write,
    name: &str,
    thread: &Thread,
    stacks: &[Vec<u32>],
) -> io::Result<()> {
    out.write_all(b"{\"type\":\"sampled\",\"name\":")?;
    json_string(out, name)?;
    out.write_all(b",\"unit\":\"none\",\"startValue\":0,\"endValue\":")?;
    CompactFormatter.write_u64(out, thread.samples.len() as u64)?;
    out.write_all(b",\"samples\":[")?;
    for (index, &stack) in thread.samples.iter().enumerate() {
        if index > 0 {
            out.write_all(b",")?;
        }
        out.write_all(b"[")?;
        for (position, &frame) in stacks[stack as usize].iter().enumerate() {
            if position > 0 {
                out.write_all(b",")?;
            }
            CompactFormatter.write_u32(out, frame)?;
        }
        out.write_all(b"]")?;
    }
    out.write_all(b"],\"weights\":[")?;
    for index in 0..thread.samples.len() {
        out.write_all(if index > 0 { b",1" } else { b"1" })?;
    }
    out.write_all(b"]}")
}

fn separate(out: &mut impl Write, first: &mut bool) -> io::Result<()> {
    if !*first {
        out.write_all(b",")?;
    }
    *first = false;
    Ok(())
}

fn json_string(out: &mut impl Write, text: &str) -> io::Result<()> {
    serde_json::to_writer(out, text).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use serde_json::{json, Value};
    use stapsdt::ring::Value as Arg;

    fn speedscope(traces: &[Trace]) -> Value {
        let mut out = Vec::new();
        write(traces, &ThreadNames::default(), &mut out).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn nests_a_threads_calls_and_samples_its_stacks() {
        // Calls ending at 1ms, 1.001ms, 1.002ms; the second inside the
        // third, which began before it.
        let mut records = calls(&[500, 400, 3000]);
        records.push(stack_record(b"main;a;b", 2_000_000));
        records.push(stack_record(b"main;a", 2_000_100));
        records.push(stack_record(b"main;a;b", 2_000_200));
        records.push(record(0, vec![Arg::Int(10)], 2_500_000, 9));
        let document = speedscope(&[trace("a.trace", standard_probes(), records)]);
        assert_eq!(document["$schema"], SCHEMA);
        assert_eq!(
            document["shared"]["frames"],
            json!([{"name": "my_controller:index"}, {"name": "main"}, {"name": "a"}, {"name": "b"}])
        );
        let profiles = document["profiles"].as_array().unwrap();
        assert_eq!(profiles.len(), 3);
        assert_eq!(profiles[0]["name"], "ruby 4321 thread 7: latency probes");
        assert_eq!(profiles[0]["startValue"], -1000);
        assert_eq!(profiles[0]["endValue"], 2000);
        let events: Vec<(String, i64)> = profiles[0]["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|event| {
                (
                    event["type"].as_str().unwrap().to_owned(),
                    event["at"].as_i64().unwrap(),
                )
            })
            .collect();
        // From the first record (the end of the first call): the third
        // call began first, and holds the others.
        let expected = [
            ("O", -1000),
            ("O", -500),
            ("C", 0),
            ("O", 600),
            ("C", 1000),
            ("C", 2000),
        ];
        let expected: Vec<(String, i64)> = expected
            .into_iter()
            .map(|(kind, at)| (kind.to_owned(), at))
            .collect();
        assert_eq!(events, expected);
        assert_eq!(profiles[1]["name"], "ruby 4321 thread 7: stacks");
        assert_eq!(
            profiles[1]["samples"],
            json!([[1, 2, 3], [1, 2], [1, 2, 3]])
        );
        assert_eq!(profiles[1]["weights"], json!([1, 1, 1]));
        assert_eq!(profiles[2]["name"], "ruby 4321 thread 9: latency probes");
        assert_eq!(profiles[2]["startValue"], 1_499_990);
    }

    #[test]
    fn closes_every_call_it_opens_in_order() {
        // Ends 1ms, 1.001ms, 1.002ms, 1.003ms; starts 0.5ms, 1.0005ms,
        // 0.999ms (outlasting the first: cut at its end), 1.003ms.
        let records = calls(&[500_000, 500, 3_000, 0]);
        let document = speedscope(&[trace("a.trace", standard_probes(), records)]);
        let events = document["profiles"][0]["events"].as_array().unwrap();
        let mut open: Vec<u64> = Vec::new();
        let mut last = i64::MIN;
        for event in events {
            let at = event["at"].as_i64().unwrap();
            assert!(at >= last, "{events:?}");
            last = at;
            let frame = event["frame"].as_u64().unwrap();
            match event["type"].as_str().unwrap() {
                "O" => open.push(frame),
                _ => assert_eq!(open.pop(), Some(frame)),
            }
        }
        assert!(open.is_empty());
        assert_eq!(events.len(), 8);
    }
}
