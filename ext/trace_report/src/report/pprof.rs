//! A gzipped profile.proto, as `go tool pprof`, Pyroscope, Parca and
//! speedscope read it. Two sample types: `latency` (nanoseconds) and
//! `calls` (count), the default: last, as speedscope takes the last type
//! whatever the default, so that every viewer opens the same one. A stack probe's record is a sample of its stack (leaf
//! first, as pprof orders locations) of one call; a latency probe's call
//! is a sample of one frame, `provider:probe`, of one call and its
//! duration. Every sample is labelled `probe` (its probe), `thread` (its
//! thread: the name, when the file has it, else the id) and `pid`.
//! Samples of the same stack, probe, thread and process are summed: the
//! profile follows the distinct stacks and threads, not the records.

use super::folded::cleaned;
use super::text::wall_time;
use super::threads::ThreadNames;
use crate::Trace;
use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;
use stapsdt::ring::Arg;
use std::collections::HashMap;
use std::io::{self, Write};

/// profile.proto's messages, the fields this writes.
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
    }
}

/// What samples are summed by: the stack (or the probe's one frame) as
/// location ids leaf first, the probe, the process and the thread.
#[derive(PartialEq, Eq, Hash)]
struct SampleKey {
    locations: Vec<u64>,
    probe: i64,
    pid: u64,
    thread: i64,
    /// The interned trace id and span id of the record's trace context,
    /// when it is known.
    context: Option<(i64, i64)>,
}

pub fn write(traces: &[Trace], names: &ThreadNames, out: &mut impl Write) -> io::Result<()> {
    let profile = profile(traces, names);
    let mut gzip = GzEncoder::new(out, Compression::default());
    gzip.write_all(&profile.encode_to_vec())?;
    gzip.finish()?;
    Ok(())
}

fn profile(traces: &[Trace], names: &ThreadNames) -> proto::Profile {
    let mut strings = Strings::default();
    // Each frame is one function at one location, of the same id.
    let mut frames: HashMap<String, u64> = HashMap::new();
    let mut frame = |strings: &mut Strings, name: &str| -> u64 {
        if let Some(&id) = frames.get(name) {
            return id;
        }
        let id = frames.len() as u64 + 1;
        frames.insert(name.to_owned(), id);
        strings.intern(name);
        id
    };
    let mut samples: HashMap<SampleKey, [i64; 2]> = HashMap::new();
    let (mut first, mut last) = (i128::MAX, i128::MIN);
    for trace in traces {
        let labels: Vec<i64> = trace
            .probes
            .iter()
            .map(|probe| strings.intern(&format!("{}:{}", probe.provider, probe.name)))
            .collect();
        let probe_frames: Vec<Option<u64>> = trace
            .probes
            .iter()
            .map(|probe| {
                let label = format!("{}:{}", probe.provider, probe.name);
                probe.latency_arg.map(|_| frame(&mut strings, &label))
            })
            .collect();
        let mut thread_labels: HashMap<u32, i64> = HashMap::new();
        let mut stack_locations: HashMap<&[u8], Vec<u64>> = HashMap::new();
        for record in &trace.records {
            let time = wall_time(trace, record.time_ns);
            first = first.min(time);
            last = last.max(time);
            let probe = &trace.probes[record.probe as usize];
            let (locations, latency) = if let (Some(arg), Some(frame)) =
                (probe.latency_arg, probe_frames[record.probe as usize])
            {
                let Some(Arg::Int(duration)) = record.arg(usize::from(arg)) else {
                    continue;
                };
                // A clock that went back made no call of negative length.
                (vec![frame], duration.max(0))
            } else if let Some(arg) = probe.stack_arg {
                let Some(Arg::Str(stack)) = record.arg(usize::from(arg)) else {
                    continue;
                };
                if stack.is_empty() {
                    continue;
                }
                let locations = stack_locations.entry(stack).or_insert_with(|| {
                    stack
                        .rsplit(|&byte| byte == b';')
                        .map(|name| frame(&mut strings, &cleaned(name)))
                        .collect()
                });
                (locations.clone(), 0)
            } else {
                continue;
            };
            let thread = *thread_labels.entry(record.tid).or_insert_with(|| {
                let name = names.name(trace, record.tid);
                strings.intern(&name.map_or_else(|| record.tid.to_string(), str::to_owned))
            });
            let context = record.context.known().map(|context| {
                (
                    strings.intern(&context.trace_hex()),
                    strings.intern(&context.span_hex()),
                )
            });
            let key = SampleKey {
                locations,
                probe: labels[record.probe as usize],
                pid: trace.header.pid,
                thread,
                context,
            };
            let values = samples.entry(key).or_default();
            values[LATENCY] = values[LATENCY].saturating_add(latency);
            values[CALLS] += 1;
        }
    }
    let calls = strings.intern("calls");
    let count = strings.intern("count");
    let latency = strings.intern("latency");
    let nanoseconds = strings.intern("nanoseconds");
    let (probe_key, thread_key, pid_key) = (
        strings.intern("probe"),
        strings.intern("thread"),
        strings.intern("pid"),
    );
    let (trace_id_key, span_id_key) = (strings.intern("trace_id"), strings.intern("span_id"));
    let mut frames: Vec<(String, u64)> = frames.into_iter().collect();
    frames.sort_unstable_by_key(|&(_, id)| id);
    let mut samples: Vec<(SampleKey, [i64; 2])> = samples.into_iter().collect();
    // Written in one order whatever the hashing, so that a report is the
    // same every time it is made.
    samples.sort_unstable_by(|(a, _), (b, _)| {
        (a.pid, a.thread, a.probe, &a.locations, a.context).cmp(&(
            b.pid,
            b.thread,
            b.probe,
            &b.locations,
            b.context,
        ))
    });
    let string_label = |key: i64, value: i64| proto::Label {
        key,
        str: value,
        ..proto::Label::default()
    };
    let recorded = first <= last;
    // One mapping that has every function: pprof then symbolizes nothing
    // and asks for no binary.
    let mapping = proto::Mapping {
        id: MAPPING,
        filename: strings.intern("ruby"),
        has_functions: true,
    };
    proto::Profile {
        sample_type: vec![
            proto::ValueType {
                r#type: latency,
                unit: nanoseconds,
            },
            proto::ValueType {
                r#type: calls,
                unit: count,
            },
        ],
        sample: samples
            .into_iter()
            .map(|(key, values)| {
                let mut label = vec![
                    string_label(probe_key, key.probe),
                    string_label(thread_key, key.thread),
                    proto::Label {
                        key: pid_key,
                        num: key.pid as i64,
                        ..proto::Label::default()
                    },
                ];
                if let Some((trace_id, span_id)) = key.context {
                    label.push(string_label(trace_id_key, trace_id));
                    label.push(string_label(span_id_key, span_id));
                }
                proto::Sample {
                    location_id: key.locations,
                    value: values.to_vec(),
                    label,
                }
            })
            .collect(),
        mapping: vec![mapping],
        location: frames
            .iter()
            .map(|&(_, id)| proto::Location {
                id,
                mapping_id: MAPPING,
                line: vec![proto::Line { function_id: id }],
            })
            .collect(),
        function: frames
            .iter()
            .map(|(name, id)| {
                // No system name: pprof takes a function whose name is
                // its system name for an undemangled C++ one, and cuts
                // `<main>` and `(2 levels)` out of Ruby's as if they were
                // template parameters and arguments.
                proto::Function {
                    id: *id,
                    name: strings.intern(name),
                    system_name: 0,
                }
            })
            .collect(),
        time_nanos: if recorded { saturate(first) } else { 0 },
        duration_nanos: if recorded { saturate(last - first) } else { 0 },
        period_type: Some(proto::ValueType {
            r#type: calls,
            unit: count,
        }),
        period: 1,
        comment: Vec::new(),
        default_sample_type: calls,
        string_table: strings.table,
    }
}

const MAPPING: u64 = 1;

/// Where each sample type's value is in a sample.
const LATENCY: usize = 0;
const CALLS: usize = 1;

fn saturate(value: i128) -> i64 {
    value.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// profile.proto's string table: every string once, by index, "" first.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Default for Strings {
    fn default() -> Strings {
        Strings {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }
}

impl Strings {
    fn intern(&mut self, text: &str) -> i64 {
        if let Some(&index) = self.index.get(text) {
            return index;
        }
        let index = self.table.len() as i64;
        self.table.push(text.to_owned());
        self.index.insert(text.to_owned(), index);
        index
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use flate2::read::GzDecoder;
    use std::io::Read;

    fn decoded(traces: &[Trace]) -> proto::Profile {
        let mut out = Vec::new();
        write(traces, &ThreadNames::default(), &mut out).unwrap();
        let mut bytes = Vec::new();
        GzDecoder::new(&out[..]).read_to_end(&mut bytes).unwrap();
        proto::Profile::decode(&bytes[..]).unwrap()
    }

    /// Each sample as its frames (leaf first), labels and values.
    fn samples(profile: &proto::Profile) -> Vec<(Vec<String>, Vec<String>, Vec<i64>)> {
        let text = |index: i64| profile.string_table[index as usize].clone();
        let function = |id: u64| {
            let function = profile.function.iter().find(|f| f.id == id).unwrap();
            text(function.name)
        };
        profile
            .sample
            .iter()
            .map(|sample| {
                let frames = sample
                    .location_id
                    .iter()
                    .map(|&id| {
                        let location = profile.location.iter().find(|l| l.id == id).unwrap();
                        function(location.line[0].function_id)
                    })
                    .collect();
                let labels = sample
                    .label
                    .iter()
                    .map(|label| match label.str {
                        0 => format!("{}={}", text(label.key), label.num),
                        value => format!("{}={}", text(label.key), text(value)),
                    })
                    .collect();
                (frames, labels, sample.value.clone())
            })
            .collect()
    }

    #[test]
    fn samples_stacks_and_latency_calls_summed_by_stack_probe_and_thread() {
        let mut records = calls(&[1500, 2500, -3]);
        records.push(stack_record(b"main;a;b", 2_000_000));
        records.push(stack_record(b"main;a;b", 2_000_100));
        records.push(stack_record(b"main;a", 2_000_200));
        records.push(hits_record("x", 2_000_300));
        let profile = decoded(&[trace("a.trace", standard_probes(), records)]);
        let text = |index: i64| profile.string_table[index as usize].as_str();
        let types: Vec<(&str, &str)> = profile
            .sample_type
            .iter()
            .map(|t| (text(t.r#type), text(t.unit)))
            .collect();
        assert_eq!(types, [("latency", "nanoseconds"), ("calls", "count")]);
        assert_eq!(text(profile.default_sample_type), "calls");
        assert_eq!(profile.time_nanos, EPOCH + 1_000_000);
        assert_eq!(profile.duration_nanos, 1_000_300);
        let labels = |probe: &str| {
            vec![
                format!("probe={probe}"),
                "thread=7".to_owned(),
                "pid=4321".to_owned(),
            ]
        };
        let mut found = samples(&profile);
        found.sort();
        assert_eq!(
            found,
            [
                (
                    vec!["a".to_owned(), "main".to_owned()],
                    labels("my_controller_stack:index"),
                    vec![0, 1]
                ),
                (
                    vec!["b".to_owned(), "a".to_owned(), "main".to_owned()],
                    labels("my_controller_stack:index"),
                    vec![0, 2]
                ),
                (
                    vec!["my_controller:index".to_owned()],
                    labels("my_controller:index"),
                    vec![4000, 3]
                ),
            ]
        );
    }

    #[test]
    fn labels_a_sample_with_its_trace_context_when_it_is_known() {
        use stapsdt::ring::Context;
        use stapsdt::trace_context::TraceContext;
        let a = TraceContext::from_hex(b"4bf92f3577b34da6a3ce929d0e0e4736", b"00f067aa0ba902b7")
            .unwrap();
        let mut records = calls(&[1500, 2500, 700]);
        records[0].context = Context::Known(a);
        records[1].context = Context::Known(a);
        records[2].context = Context::Unknown;
        let profile = decoded(&[trace("a.trace", standard_probes(), records)]);
        let mut found: Vec<(Vec<String>, Vec<i64>)> = samples(&profile)
            .into_iter()
            .map(|(_, labels, values)| (labels, values))
            .collect();
        found.sort();
        let plain = ["probe=my_controller:index", "thread=7", "pid=4321"].map(str::to_owned);
        let mut traced = plain.to_vec();
        traced.push("trace_id=4bf92f3577b34da6a3ce929d0e0e4736".to_owned());
        traced.push("span_id=00f067aa0ba902b7".to_owned());
        assert_eq!(
            found,
            [(plain.to_vec(), vec![700, 1]), (traced, vec![4000, 2])]
        );
    }

    #[test]
    fn keeps_every_character_of_a_frame_name_with_no_system_name() {
        let records = vec![stack_record(
            b"<main>;block (2 levels) in <main>;Foo#bar(x)",
            1,
        )];
        let profile = decoded(&[trace("a.trace", standard_probes(), records)]);
        let names: Vec<&str> = profile
            .function
            .iter()
            .map(|function| {
                assert_eq!(function.system_name, 0);
                profile.string_table[function.name as usize].as_str()
            })
            .collect();
        assert_eq!(
            names,
            [
                "my_controller:index",
                "Foo#bar(x)",
                "block (2 levels) in <main>",
                "<main>"
            ]
        );
    }
}
