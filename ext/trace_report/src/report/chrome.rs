//! Records as Chrome trace-event JSON (the Trace Event Format, its array
//! form), which Perfetto UI, chrome://tracing and speedscope open: per
//! process a `process_name` metadata event, which also says when its time
//! 0 was on the wall clock (`time_origin`, and `time_origin_ns` as digits);
//! per call of a latency probe a complete event ("X") from its start to
//! its end; per other record an instant event ("i", thread scoped), its
//! arguments in `args`. A thread whose name the file holds gets a
//! `thread_name` metadata event.
//!
//! Times are microseconds from the earliest thing the files show (a
//! record, or the start of a call), each a
//! whole number of steps of 1/1024 µs ([`ticks`]): what every viewer that
//! reads them as doubles holds exactly, so that events nest in it as they
//! were recorded, and each duration is within a nanosecond of the one
//! recorded.
//!
//! The stacks of stack probes are a timeline too, as viewers draw one
//! only of complete events (speedscope finds a file of instant events
//! alone "empty"): each run of a frame is a complete event (category
//! `stack`); see [`tracks`], which also says how a thread's calls and
//! stacks share its time.
//!
//! Each track's spans are in the file twice: as complete events, and as a
//! Chrome CPU profile ([`cpu_profile`]), which speedscope reads instead of
//! the events when the file is named as Chrome DevTools names its own
//! (`*.chrome.json`, `Profile-*`). Perfetto reads the events. (A file
//! named `Trace-*` speedscope reads as the object form, which this is not.)
//!
//! A file can hold millions of records: instant events are written straight
//! into the buffered output; what a track's spans need is held per thread
//! of one file at a time.

mod cpu_profile;
mod ruby_float;
mod ticks;
mod time_origin;
mod tracks;

use super::folded::cleaned;
use super::threads::ThreadNames;
use crate::records::Args;
use crate::Trace;
use cpu_profile::CpuProfile;
use ruby_float::write_ruby_float;
use serde_json::ser::{CompactFormatter, Formatter};
use stapsdt::ring::{Arg, Context, ProbeEntry};
use std::io::{self, Write};
use ticks::Ticks;
use tracks::{Span, SpanKind, STACKS_TRACK};

pub fn write<W: Write>(traces: &[Trace], names: &ThreadNames, out: &mut W) -> io::Result<()> {
    let origin = first_record(traces);
    let mut events = Events {
        out,
        first: true,
        float_text: String::new(),
        profiles: 0,
    };
    events.out.write_all(b"[\n")?;
    for trace in traces {
        events.trace(trace, names, origin)?;
    }
    events.out.write_all(b"\n]\n")
}

/// The wall-clock time of the earliest thing the files show: a record, or
/// the start of a call.
fn first_record(traces: &[Trace]) -> Option<i128> {
    traces
        .iter()
        .filter_map(|trace| {
            let offset = super::text::wall_time(trace, 0);
            let records = trace.records.iter();
            let least = records
                .map(|record| tracks::began_ns(trace, &record))
                .min()?;
            Some(offset + least)
        })
        .min()
}

struct Events<'a, W: Write> {
    out: &'a mut W,
    first: bool,
    /// Where a Float's shortest digits are found: reused, as there can be
    /// millions of Floats too.
    float_text: String,
    /// CPU profiles written so far: each has an id of its own.
    profiles: u64,
}

impl<W: Write> Events<'_, W> {
    fn trace(
        &mut self,
        trace: &Trace,
        names: &ThreadNames,
        origin: Option<i128>,
    ) -> io::Result<()> {
        let pid = trace.header.pid;
        self.process_name(pid, origin)?;
        let threads = tracks::threads(trace, origin.unwrap_or_default());
        for (tid, name) in names.of_process(trace) {
            self.thread_name(pid, tid, name)?;
        }
        for (&tid, thread) in &threads {
            if !thread.calls.is_empty() && !thread.frames.is_empty() {
                let name = match names.name(trace, tid) {
                    Some(name) => format!("{name} stacks"),
                    None => format!("thread {tid} stacks"),
                };
                self.thread_name(pid, stacks_track(tid), &name)?;
            }
        }

        let prefixes: Vec<Vec<u8>> = trace.probes.iter().map(prefix).collect();
        let offset = i128::from(trace.header.anchor_realtime_ns)
            - i128::from(trace.header.anchor_monotonic_ns)
            - origin.unwrap_or_default();
        for record in &trace.records {
            let position = record.probe as usize;
            if trace.probes[position].latency_arg.is_some() {
                continue;
            }
            self.start()?;
            self.out.write_all(&prefixes[position])?;
            self.out.write_all(b",\"ph\":\"i\",\"s\":\"t\",\"ts\":")?;
            Ticks::of_ns(offset + i128::from(record.time_ns)).write(self.out)?;
            self.track(pid, record.tid)?;
            self.arguments(record.args(), None, &record.context)?;
            self.out.write_all(b"}")?;
        }

        for (tid, thread) in threads {
            let stacks = if thread.calls.is_empty() {
                tid
            } else {
                stacks_track(tid)
            };
            self.spans(trace, &prefixes, pid, tid, &thread.calls)?;
            self.spans(trace, &prefixes, pid, stacks, &thread.frames)?;
        }
        Ok(())
    }

    fn process_name(&mut self, pid: u64, origin: Option<i128>) -> io::Result<()> {
        self.start()?;
        self.out
            .write_all(b"{\"name\":\"process_name\",\"ph\":\"M\",\"ts\":0,\"pid\":")?;
        CompactFormatter.write_u64(self.out, pid)?;
        self.out
            .write_all(b",\"tid\":0,\"args\":{\"name\":\"ruby ")?;
        CompactFormatter.write_u64(self.out, pid)?;
        self.out.write_all(b"\"")?;
        if let Some(origin) = origin {
            self.out.write_all(b",\"time_origin\":")?;
            json_string(self.out, &time_origin::iso8601(origin))?;
            write!(self.out, ",\"time_origin_ns\":\"{origin}\"")?;
        }
        self.out.write_all(b"}}")
    }

    fn thread_name(&mut self, pid: u64, tid: u32, name: &str) -> io::Result<()> {
        self.start()?;
        self.out
            .write_all(b"{\"name\":\"thread_name\",\"ph\":\"M\",\"ts\":0,\"pid\":")?;
        CompactFormatter.write_u64(self.out, pid)?;
        self.out.write_all(b",\"tid\":")?;
        CompactFormatter.write_u32(self.out, tid)?;
        self.out.write_all(b",\"args\":{\"name\":")?;
        json_string(self.out, name)?;
        self.out.write_all(b"}}")
    }

    /// A track's spans, in preorder, as complete events and as a CPU
    /// profile.
    fn spans(
        &mut self,
        trace: &Trace,
        prefixes: &[Vec<u8>],
        pid: u64,
        tid: u32,
        spans: &[Span<'_>],
    ) -> io::Result<()> {
        let mut profile = CpuProfile::new();
        let labels: Vec<String> = trace
            .probes
            .iter()
            .map(|probe| format!("{}:{}", probe.provider, probe.name))
            .collect();
        for span in spans {
            self.start()?;
            let name = match span.kind {
                SpanKind::Call(record) => {
                    let position = record.probe as usize;
                    self.out.write_all(&prefixes[position])?;
                    self.complete(span, pid, tid)?;
                    let latency_arg = trace.probes[position].latency_arg.map(usize::from);
                    self.arguments(record.args(), latency_arg, &record.context)?;
                    std::borrow::Cow::Borrowed(labels[position].as_str())
                }
                SpanKind::Frame { name, .. } => {
                    let name = cleaned(name);
                    self.out.write_all(b"{\"name\":")?;
                    json_string(self.out, &name)?;
                    self.out.write_all(b",\"cat\":\"stack\"")?;
                    self.complete(span, pid, tid)?;
                    std::borrow::Cow::Owned(name)
                }
            };
            self.out.write_all(b"}")?;
            profile.span(&name);
        }
        if profile.is_empty() {
            return Ok(());
        }
        self.profiles += 1;
        let first = &mut self.first;
        let times = spans.iter().map(|span| (span.start, span.end));
        profile.write(self.out, (self.profiles, pid, tid), times, |out: &mut W| {
            if !std::mem::take(first) {
                out.write_all(b",\n")?;
            }
            Ok(())
        })
    }

    /// `"ph":"X","ts":...,"dur":...` and the track of a span.
    fn complete(&mut self, span: &Span<'_>, pid: u64, tid: u32) -> io::Result<()> {
        self.out.write_all(b",\"ph\":\"X\",\"ts\":")?;
        span.start.write(self.out)?;
        self.out.write_all(b",\"dur\":")?;
        (span.end - span.start).write(self.out)?;
        self.track(pid, tid)
    }

    fn track(&mut self, pid: u64, tid: u32) -> io::Result<()> {
        self.out.write_all(b",\"pid\":")?;
        CompactFormatter.write_u64(self.out, pid)?;
        self.out.write_all(b",\"tid\":")?;
        CompactFormatter.write_u32(self.out, tid)
    }

    /// Events are separated, not terminated, by ",\n".
    fn start(&mut self) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        Ok(())
    }

    /// `,"args":{"arg0":value,...}` by the arguments' positions, but the
    /// one left out, then the record's trace context (`"trace_id"` and
    /// `"span_id"` when known, `"trace_context":"unknown"` when its context
    /// record was not read); nothing when neither is left (speedscope names
    /// a frame by its event's name and its args, `{}` included).
    fn arguments(
        &mut self,
        args: Args<'_>,
        left_out: Option<usize>,
        context: &Context,
    ) -> io::Result<()> {
        let shown = args.len() - usize::from(left_out.is_some_and(|arg| arg < args.len()));
        if shown == 0 && *context == Context::None {
            return Ok(());
        }
        self.out.write_all(b",\"args\":{")?;
        let mut first = true;
        for (index, value) in args.enumerate() {
            if Some(index) == left_out {
                continue;
            }
            if !first {
                self.out.write_all(b",")?;
            }
            first = false;
            self.out.write_all(b"\"arg")?;
            CompactFormatter.write_u64(self.out, index as u64)?;
            self.out.write_all(b"\":")?;
            self.value(value)?;
        }
        let comma: &[u8] = if first { b"" } else { b"," };
        match context {
            Context::None => {}
            Context::Unknown => {
                self.out.write_all(comma)?;
                self.out.write_all(b"\"trace_context\":\"unknown\"")?;
            }
            Context::Known(context) => {
                self.out.write_all(comma)?;
                write!(
                    self.out,
                    "\"trace_id\":\"{}\",\"span_id\":\"{}\"",
                    context.trace_hex(),
                    context.span_hex()
                )?;
            }
        }
        self.out.write_all(b"}")
    }

    fn value(&mut self, value: Arg<'_>) -> io::Result<()> {
        match value {
            Arg::Int(value) => CompactFormatter.write_i64(self.out, value),
            Arg::Float(value) if value.is_finite() => {
                write_ruby_float(self.out, value, &mut self.float_text)
            }
            // JSON has no such numbers: the names Ruby gives them, as strings.
            Arg::Float(value) if value.is_nan() => self.out.write_all(b"\"NaN\""),
            Arg::Float(value) if value > 0.0 => self.out.write_all(b"\"Infinity\""),
            Arg::Float(_) => self.out.write_all(b"\"-Infinity\""),
            Arg::Str(bytes) => json_string(self.out, &String::from_utf8_lossy(bytes)),
        }
    }
}

/// The track of thread `tid`'s stacks when the thread has calls too.
fn stacks_track(tid: u32) -> u32 {
    tid | STACKS_TRACK
}

/// The start of each event of `probe`'s records, to its phase.
fn prefix(probe: &ProbeEntry) -> Vec<u8> {
    let mut prefix = b"{\"name\":".to_vec();
    let label = format!("{}:{}", probe.provider, probe.name);
    // Writing into a Vec cannot fail.
    json_string(&mut prefix, &label).expect("writing to a Vec");
    prefix.extend_from_slice(b",\"cat\":");
    json_string(&mut prefix, &probe.provider).expect("writing to a Vec");
    prefix
}

/// `text` as a JSON string, as Ruby's JSON.generate writes it (control
/// characters escaped, the rest as UTF-8).
fn json_string(out: &mut (impl Write + ?Sized), text: &str) -> io::Result<()> {
    serde_json::to_writer(out, text).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use serde_json::{json, Value};
    use stapsdt::ring::{Record, Value as Recorded};
    use stapsdt::ArgType;
    use std::collections::BTreeMap;

    fn chrome(traces: &[Trace]) -> String {
        let mut out = Vec::new();
        write(traces, &ThreadNames::default(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn events(traces: &[Trace]) -> Vec<Value> {
        serde_json::from_str(&chrome(traces)).unwrap()
    }

    fn hits(text: &[u8], number: i64, float: f64, time_ns: u64, tid: u32) -> Record {
        let args = vec![
            Recorded::Str(text.to_vec()),
            Recorded::Int(number),
            Recorded::Float(float),
        ];
        record(1, args, time_ns, tid)
    }

    #[test]
    fn writes_an_array_of_events_in_steps_from_the_earliest_start() {
        let mut records = calls(&[2_500_001, -3]);
        records.push(hits(
            b"a \"quoted\"\nline",
            i64::MIN,
            f64::NAN,
            9_000_123,
            8,
        ));
        let first = trace("a.trace", standard_probes(), records);
        let mut second = trace("b.trace", standard_probes(), calls(&[1]));
        second.header.pid = 9;
        // Time 0 is the first call's start, 1.500001 ms before EPOCH; the
        // second call ends 1 µs after the first, and lasted nothing (a
        // negative latency); the hits are 10.500124 ms after time 0.
        let expected = "[\n\
            {\"name\":\"process_name\",\"ph\":\"M\",\"ts\":0,\"pid\":4321,\"tid\":0,\"args\":{\"name\":\"ruby 4321\",\
            \"time_origin\":\"2023-11-14T22:13:19.998499999Z\",\"time_origin_ns\":\"1699999999998499999\"}},\n\
            {\"name\":\"app:hits\",\"cat\":\"app\",\"ph\":\"i\",\"s\":\"t\",\"ts\":10500.1240234375,\"pid\":4321,\
            \"tid\":8,\"args\":{\"arg0\":\"a \\\"quoted\\\"\\nline\",\"arg1\":-9223372036854775808,\"arg2\":\"NaN\"}},\n\
            {\"name\":\"my_controller:index\",\"cat\":\"my_controller\",\"ph\":\"X\",\"ts\":0,\
            \"dur\":2500.0009765625,\"pid\":4321,\"tid\":7},\n\
            {\"name\":\"my_controller:index\",\"cat\":\"my_controller\",\"ph\":\"X\",\"ts\":2501.0009765625,\"dur\":0,\
            \"pid\":4321,\"tid\":7},\n";
        let written = chrome(&[first, second]);
        assert!(written.starts_with(expected), "{written}");
        let events: Vec<Value> = serde_json::from_str(&written).unwrap();
        let process: Vec<&Value> = events
            .iter()
            .filter(|event| event["name"] == "process_name")
            .collect();
        assert_eq!(process[1]["pid"], 9);
        assert_eq!(process[1]["args"]["time_origin_ns"], "1699999999998499999");
        // The second file's call, on the same time line as the first's.
        let last = events
            .iter()
            .filter(|event| event["ph"] == "X" && event["pid"] == 9)
            .collect::<Vec<_>>();
        assert_eq!(last.len(), 1);
        assert_eq!(last[0]["ts"].as_f64(), Some(2500.0));
        assert_eq!(last[0]["dur"].as_f64(), Some(1.0 / 1024.0));
    }

    #[test]
    fn writes_strings_and_floats_as_the_ruby_report_did() {
        // Not UTF-8: a byte that begins nothing, and a character cut short.
        let awkward = [b"bad \xFF\xE3\x81 ", "\u{2028}".as_bytes(), b" \x01\x7F/"].concat();
        let records = vec![
            hits(&awkward, i64::MAX, 1.0e20, 9_600_000, 9),
            hits(b"", 0, f64::NEG_INFINITY, 9_700_000, 9),
        ];
        let written = chrome(&[trace("a.trace", standard_probes(), records)]);
        assert!(written.contains(
            "\"args\":{\"arg0\":\"bad \u{fffd}\u{fffd} \u{2028} \\u0001\u{7f}/\",\"arg1\":9223372036854775807,\
             \"arg2\":1.0e+20}}"
        ));
        assert!(written.contains("\"args\":{\"arg0\":\"\",\"arg1\":0,\"arg2\":\"-Infinity\"}}"));
    }

    #[test]
    fn leaves_the_latency_out_of_a_calls_arguments_and_keeps_the_others() {
        let types = vec![ArgType::String, ArgType::Int64, ArgType::Float64];
        let timed = probe(0, "db", "query", types, Some(1), None);
        let args = vec![
            Recorded::Str(b"SELECT 1".to_vec()),
            Recorded::Int(2_000),
            Recorded::Float(0.25),
        ];
        let tick = probe(1, "app", "tick", vec![], None, None);
        let records = vec![record(0, args, 5_000, 3), record(1, vec![], 6_000, 3)];
        let events = events(&[trace("a.trace", vec![timed, tick], records)]);
        let query = events
            .iter()
            .find(|event| event["name"] == "db:query")
            .unwrap();
        assert_eq!(query["args"], json!({"arg0": "SELECT 1", "arg2": 0.25}));
        assert_eq!(
            (query["ts"].as_f64(), query["dur"].as_f64()),
            (Some(0.0), Some(2.0))
        );
        // No arguments, no args: speedscope would name the frame "app:tick {}".
        let tick = events
            .iter()
            .find(|event| event["name"] == "app:tick")
            .unwrap();
        assert_eq!(tick.get("args"), None);
    }

    #[test]
    fn a_thread_with_calls_and_stacks_has_its_stacks_on_a_track_of_their_own() {
        let mut records = calls(&[500, 400]);
        records.push(stack_record(b"main;work", 1_000_500));
        records.push(stack_record(b"other", 1_000_700));
        let mut names = ThreadNames::default();
        names.insert(4321, 4026531836, 7, "worker".to_owned());
        let mut out = Vec::new();
        write(
            &[trace("a.trace", standard_probes(), records)],
            &names,
            &mut out,
        )
        .unwrap();
        let events: Vec<Value> = serde_json::from_slice(&out).unwrap();
        let track = 7 | STACKS_TRACK;
        assert!(events.contains(
            &json!({"name": "thread_name", "ph": "M", "ts": 0, "pid": 4321,
            "tid": track, "args": {"name": "worker stacks"}})
        ));
        let complete = |name: &str| -> Vec<(u64, f64, f64)> {
            events
                .iter()
                .filter(|event| event["ph"] == "X" && event["name"] == name)
                .map(|event| {
                    (
                        event["tid"].as_u64().unwrap(),
                        event["ts"].as_f64().unwrap() * 1024.0,
                        event["dur"].as_f64().unwrap() * 1024.0,
                    )
                })
                .collect()
        };
        assert_eq!(
            complete("my_controller:index"),
            [(7, 0.0, 512.0), (7, 1126.0, 410.0)]
        );
        // From 1000 ns after the first call's start to 1200 ns, in steps.
        assert_eq!(complete("main"), [(u64::from(track), 1024.0, 205.0)]);
        assert_eq!(complete("work"), [(u64::from(track), 1024.0, 205.0)]);
        assert_eq!(complete("other"), [(u64::from(track), 1229.0, 307.0)]);
        // Of two events with the same start and end, the enclosing one first.
        let main = events
            .iter()
            .position(|event| event["name"] == "main")
            .unwrap();
        let work = events
            .iter()
            .position(|event| event["name"] == "work")
            .unwrap();
        assert!(main < work);
        // The stack records are instants of their thread as well.
        assert_eq!(
            events
                .iter()
                .filter(|event| event["ph"] == "i" && event["tid"] == 7)
                .count(),
            2
        );
    }

    #[test]
    fn each_track_is_a_cpu_profile_too() {
        let mut records = calls(&[500]);
        records.push(stack_record(b"main;work", 1_000_500));
        records.push(stack_record(b"main", 1_000_700));
        let events = events(&[trace("a.trace", standard_probes(), records)]);
        let profiles: Vec<(&str, &str, u64)> = events
            .iter()
            .filter(|event| event["ph"] == "P")
            .map(|event| {
                (
                    event["name"].as_str().unwrap(),
                    event["id"].as_str().unwrap(),
                    event["tid"].as_u64().unwrap(),
                )
            })
            .collect();
        let track = u64::from(7 | STACKS_TRACK);
        assert_eq!(
            profiles,
            [
                ("Profile", "0x1", 7),
                ("ProfileChunk", "0x1", 7),
                ("Profile", "0x2", track),
                ("ProfileChunk", "0x2", track)
            ]
        );
        let chunk = events
            .iter()
            .find(|event| event["name"] == "ProfileChunk" && event["tid"] == track)
            .unwrap();
        let names: Vec<&str> = chunk["args"]["data"]["cpuProfile"]["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|node| node["callFrame"]["functionName"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["(root)", "main", "work"]);
        // speedscope takes the file for a DevTools profile only if its first
        // event has a category: it must read the complete events.
        assert_eq!(events[0]["name"], "process_name");
        assert_eq!(events[0].get("cat"), None);
    }

    /// A span as a viewer reads it: start, end, name.
    type ReadSpan = (f64, f64, String);

    /// What every JavaScript viewer reads: each track's complete events,
    /// their times parsed as doubles, ends added as doubles.
    fn tracks_as_read(events: &[Value]) -> BTreeMap<(u64, u64), Vec<ReadSpan>> {
        let mut tracks: BTreeMap<(u64, u64), Vec<ReadSpan>> = BTreeMap::new();
        for event in events.iter().filter(|event| event["ph"] == "X") {
            let start = event["ts"].as_f64().unwrap();
            let end = start + event["dur"].as_f64().unwrap();
            let key = (
                event["pid"].as_u64().unwrap(),
                event["tid"].as_u64().unwrap(),
            );
            tracks.entry(key).or_default().push((
                start,
                end,
                event["name"].as_str().unwrap().to_owned(),
            ));
        }
        tracks
    }

    #[test]
    fn read_as_doubles_every_event_nests_and_lasts_what_was_recorded() {
        // Calls nested three deep, as a request and its queries make them,
        // ending a day and some nanoseconds after the epoch of a clock
        // whose anchors are far from round: in microseconds since the
        // epoch, no double holds them.
        let mut records = Vec::new();
        let mut recorded: Vec<(i128, i128)> = Vec::new();
        let mut time: u64 = 86_400_000_000_017;
        for request in 0..300u64 {
            let start = time;
            for query in 0..3u64 {
                let query_start = time + 7 + query;
                let inner_start = query_start + 3;
                let inner_end = inner_start + 13 + request % 5;
                records.push(record(
                    0,
                    vec![Recorded::Int((inner_end - inner_start) as i64)],
                    inner_end,
                    7,
                ));
                recorded.push((inner_start.into(), inner_end.into()));
                time = inner_end + 1 + query;
                records.push(record(
                    0,
                    vec![Recorded::Int((time - query_start) as i64)],
                    time,
                    7,
                ));
                recorded.push((query_start.into(), time.into()));
            }
            time += 2 + request % 3;
            records.push(record(
                0,
                vec![Recorded::Int((time - start) as i64)],
                time,
                7,
            ));
            recorded.push((start.into(), time.into()));
            records.push(stack_record(b"main;serve;query", time));
            time += 1 + request % 7;
            records.push(stack_record(
                if request % 2 == 0 {
                    b"main;serve"
                } else {
                    b"main;other;query"
                },
                time,
            ));
        }
        let mut file = trace("a.trace", standard_probes(), records);
        file.header.anchor_monotonic_ns = 123_456_789_123;
        file.header.anchor_realtime_ns = 1_795_868_329_757_636_021;
        let tracks = tracks_as_read(&events(&[file]));
        assert_eq!(tracks.len(), 2);
        for spans in tracks.values() {
            // As speedscope orders them: by start, the longer first.
            let mut spans = spans.clone();
            spans.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
            let mut open: Vec<f64> = Vec::new();
            for (start, end, name) in spans {
                while open.last().is_some_and(|&top| top <= start) {
                    open.pop();
                }
                if let Some(&top) = open.last() {
                    assert!(end <= top, "{name} ends at {end}, after {top}");
                }
                open.push(end);
            }
        }
        // Each call lasts, read as doubles, within a nanosecond of what
        // was recorded.
        let calls = &tracks[&(4321, 7)];
        assert_eq!(calls.len(), recorded.len());
        let mut lasted: Vec<f64> = calls
            .iter()
            .map(|(start, end, _)| (end - start) * 1000.0)
            .collect();
        let mut wanted: Vec<f64> = recorded
            .iter()
            .map(|(start, end)| (end - start) as f64)
            .collect();
        lasted.sort_by(f64::total_cmp);
        wanted.sort_by(f64::total_cmp);
        for (lasted, wanted) in lasted.iter().zip(&wanted) {
            assert!((lasted - wanted).abs() < 1.0, "{lasted} for {wanted}");
        }
    }

    #[test]
    fn writes_times_before_the_epoch_and_past_64_bits() {
        let tick = || vec![probe(0, "app", "tick", vec![], None, None)];
        let mut early = trace(
            "a.trace",
            tick(),
            vec![record(0, vec![], 0, 1), record(0, vec![], 1_000, 1)],
        );
        early.header.anchor_realtime_ns = -1_500;
        let mut late = trace("b.trace", tick(), vec![record(0, vec![], u64::MAX, 1)]);
        late.header.anchor_realtime_ns = i64::MAX;
        let written = chrome(&[early, late]);
        assert!(written.contains("\"time_origin\":\"1969-12-31T23:59:59.999998500Z\""));
        assert!(written.contains("\"ts\":1,"));
        // i64::MAX + u64::MAX + 1500 ns after the first record, which no
        // 64-bit integer holds, to the nearest step.
        assert!(
            written.contains("\"ts\":27670116110564328.921875,"),
            "{written}"
        );
    }

    #[test]
    fn gives_a_records_trace_context_among_its_args() {
        use stapsdt::trace_context::TraceContext;
        let a = TraceContext::from_hex(b"4bf92f3577b34da6a3ce929d0e0e4736", b"00f067aa0ba902b7")
            .unwrap();
        // Calls starting in this order: 998.5us, 1000.5us, 1001.3us.
        let mut records = calls(&[1500, 500, 700]);
        records[0].context = Context::Known(a);
        records[1].context = Context::Unknown;
        let mut hits = hits_record("x", 3_000_000);
        hits.context = Context::Known(a);
        records.push(hits);
        let written = chrome(&[trace("a.trace", standard_probes(), records)]);
        let document: serde_json::Value = serde_json::from_str(&written).unwrap();
        let events = document.as_array().unwrap();
        let args = |name: &str| -> Vec<Option<&serde_json::Value>> {
            events
                .iter()
                .filter(|event| event["name"] == name)
                .map(|event| event.get("args"))
                .collect()
        };
        let ids =
            json!({"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"});
        assert_eq!(
            args("my_controller:index"),
            [Some(&ids), Some(&json!({"trace_context": "unknown"})), None]
        );
        assert_eq!(
            args("app:hits"),
            [Some(&json!({"arg0": "x", "arg1": 1, "arg2": 0.5,
                "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"}))]
        );
    }
}
