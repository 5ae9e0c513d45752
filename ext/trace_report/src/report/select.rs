//! The records a report is made of, when the command is asked for fewer
//! than the files hold: the probes some patterns name, and a window of
//! time. What is left out is left out of every format alike; the records
//! lost stay those of the whole files, as they were counted.

use super::text::wall_time;
use crate::{Records, Trace};
use stapsdt::ring::ProbeEntry;
use stapsdt::trace_context::TRACE_ID_LEN;

/// Where a window starts or ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// Nanoseconds after the first record of all the files.
    FromFirst(i64),
    /// A wall-clock time, in nanoseconds since the Unix epoch.
    Wall(i64),
}

/// What to keep: with no patterns, every probe; without bounds, all time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// `provider:probe` globs (`*` any run of characters, `?` one), as
    /// `record` takes them; a probe is kept if any names it.
    pub patterns: Vec<String>,
    /// Records from this time on are kept...
    pub since: Option<Bound>,
    /// ...and those before this time...
    pub until: Option<Bound>,
    /// ...and those made in this trace (its id), if one is given.
    pub trace_id: Option<[u8; TRACE_ID_LEN]>,
}

impl Selection {
    pub fn is_everything(&self) -> bool {
        self.patterns.is_empty()
            && self.since.is_none()
            && self.until.is_none()
            && self.trace_id.is_none()
    }
}

/// Leaves in `traces` only the probes and records `selection` keeps. A
/// latency probe's record is its call's end: a call is in the window if
/// it ended in it.
///
/// Refuses a pattern that names no probe of the files (a typo would
/// otherwise report nothing, silently), saying which probes there are.
pub fn select(traces: &mut [Trace], selection: &Selection) -> Result<(), String> {
    named_in(traces, &selection.patterns)?;
    if selection.is_everything() {
        return Ok(());
    }
    let first = traces
        .iter()
        .filter_map(|trace| {
            let least = trace.records.iter().map(|record| record.time_ns).min()?;
            Some(wall_time(trace, least))
        })
        .min()
        .unwrap_or(0);
    let wall = |bound: Bound| match bound {
        Bound::FromFirst(after) => first + i128::from(after),
        Bound::Wall(time) => i128::from(time),
    };
    let since = selection.since.map_or(i128::MIN, wall);
    let until = selection.until.map_or(i128::MAX, wall);
    for trace in traces {
        narrow(trace, selection, since, until);
    }
    Ok(())
}

/// Refuses the first of `patterns` that names no probe of `traces`.
fn named_in(traces: &[Trace], patterns: &[String]) -> Result<(), String> {
    let mut labels: Vec<String> = Vec::new();
    for probe in traces.iter().flat_map(|trace| &trace.probes) {
        let label = format!("{}:{}", probe.provider, probe.name);
        if !labels.contains(&label) {
            labels.push(label);
        }
    }
    let Some(pattern) = patterns
        .iter()
        .find(|pattern| !labels.iter().any(|label| glob(pattern, label)))
    else {
        return Ok(());
    };
    let names: Vec<&str> = traces.iter().map(|trace| trace.name.as_str()).collect();
    let probes = if labels.is_empty() {
        "they have no probes".to_owned()
    } else {
        format!("their probes: {}", labels.join(", "))
    };
    Err(format!(
        "--probe {pattern} names no probe of {}; {probes}",
        names.join(", ")
    ))
}

fn narrow(trace: &mut Trace, selection: &Selection, since: i128, until: i128) {
    let patterns = &selection.patterns;
    // Each probe kept, by its id in the file: its id among those kept.
    let mut kept: Vec<ProbeEntry> = Vec::new();
    let ids: Vec<Option<u32>> = trace
        .probes
        .iter()
        .map(|probe| {
            let label = format!("{}:{}", probe.provider, probe.name);
            let named = patterns.is_empty() || patterns.iter().any(|pattern| glob(pattern, &label));
            named.then(|| {
                let id = kept.len() as u32;
                kept.push(ProbeEntry {
                    id,
                    ..probe.clone()
                });
                id
            })
        })
        .collect();
    let mut records = Records::new(&kept);
    for record in &trace.records {
        let Some(id) = ids[record.probe as usize] else {
            continue;
        };
        let time = wall_time(trace, record.time_ns);
        if time < since || time >= until {
            continue;
        }
        if let Some(trace_id) = &selection.trace_id {
            if record.context.known().map(|context| context.trace_id()) != Some(trace_id) {
                continue;
            }
        }
        let mut record = record.to_record();
        record.probe = id;
        records.push(&record);
    }
    // Records left out (and context records, which the narrowed records
    // no longer count) are not lost: the file's count of records it
    // reserved shrinks with them, so that what it lost stays as it was.
    let left_out = trace.records_read() - records.len() as u64;
    trace.counters.records = trace.records_total() - left_out;
    trace.probes = kept;
    trace.records = records;
}

/// Whether `text` matches `pattern`, whose `*` stands for any run of
/// characters and `?` for one, as File.fnmatch does for names without
/// other special characters (probe names have none).
fn glob(pattern: &str, text: &str) -> bool {
    let (pattern, text): (Vec<char>, Vec<char>) =
        (pattern.chars().collect(), text.chars().collect());
    // The last `*` seen, and where in the text its run would end next.
    let (mut star, mut resume) = (None, 0);
    let (mut at, mut position) = (0, 0);
    while position < text.len() {
        match pattern.get(at) {
            Some('*') => {
                star = Some(at);
                resume = position;
                at += 1;
            }
            Some(&character) if character == '?' || character == text[position] => {
                at += 1;
                position += 1;
            }
            _ => match star {
                Some(star_at) => {
                    at = star_at + 1;
                    resume += 1;
                    position = resume;
                }
                None => return false,
            },
        }
    }
    pattern[at..].iter().all(|&character| character == '*')
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn labels(trace: &Trace) -> Vec<String> {
        trace
            .probes
            .iter()
            .map(|probe| format!("{}:{}", probe.provider, probe.name))
            .collect()
    }

    #[test]
    fn matches_globs_as_record_does() {
        for (pattern, text, matches) in [
            ("my_controller:*", "my_controller:index", true),
            ("*:index", "my_controller_stack:index", true),
            ("my_*:ind?x", "my_controller:index", true),
            ("my_controller:*", "my_controller_stack:index", false),
            ("*", "a:b", true),
            ("a:b", "a:bc", false),
            ("a*b*c:d", "axxbyyc:d", true),
            ("a*b*c:d", "axxbyy:d", false),
        ] {
            assert_eq!(glob(pattern, text), matches, "{pattern} {text}");
        }
    }

    #[test]
    fn keeps_the_probes_named_and_renumbers_them() {
        let mut records = calls(&[10, 20]);
        records.push(stack_record(b"main", 2_000_000));
        records.push(hits_record("x", 3_000_000));
        let mut traces = [trace("a.trace", standard_probes(), records)];
        traces[0].counters.records = 6;
        let selection = Selection {
            patterns: vec!["*_stack:*".to_owned(), "app:hits".to_owned()],
            ..Selection::default()
        };
        select(&mut traces, &selection).unwrap();
        assert_eq!(
            labels(&traces[0]),
            ["app:hits", "my_controller_stack:index"]
        );
        let kept: Vec<(u32, u64)> = traces[0]
            .records
            .iter()
            .map(|record| (record.probe, record.time_ns))
            .collect();
        assert_eq!(kept, [(1, 2_000_000), (0, 3_000_000)]);
        // 6 reserved, 4 read: 2 lost, before and after.
        assert_eq!(traces[0].lost(), 2);
    }

    #[test]
    fn keeps_the_records_of_one_trace_never_an_unknown_contexts() {
        use stapsdt::ring::Context;
        use stapsdt::trace_context::TraceContext;
        let a = TraceContext::new([1; 16], [2; 8]).unwrap();
        let a_other_span = TraceContext::new([1; 16], [3; 8]).unwrap();
        let b = TraceContext::new([4; 16], [5; 8]).unwrap();
        let contexts = [
            Context::Known(a),
            Context::None,
            Context::Known(b),
            Context::Unknown,
            Context::Known(a_other_span),
        ];
        let mut records = calls(&[1, 2, 3, 4, 5]);
        for (record, context) in records.iter_mut().zip(contexts) {
            record.context = context;
        }
        let mut traces = [trace("a.trace", standard_probes(), records)];
        traces[0].counters.records = 7;
        select(
            &mut traces,
            &Selection {
                trace_id: Some([1; 16]),
                ..Selection::default()
            },
        )
        .unwrap();
        let kept: Vec<(u64, Context)> = traces[0]
            .records
            .iter()
            .map(|record| (record.time_ns, record.context))
            .collect();
        assert_eq!(
            kept,
            [
                (1_000_000, Context::Known(a)),
                (1_004_000, Context::Known(a_other_span))
            ]
        );
        // 7 reserved, 5 read: 2 lost, before and after.
        assert_eq!(traces[0].lost(), 2);
    }

    #[test]
    fn refuses_a_pattern_that_names_no_probe_saying_which_there_are() {
        let mut traces = [
            trace("a.trace", standard_probes(), vec![]),
            trace("b.trace", vec![index_probe(0)], vec![]),
        ];
        let selection = |patterns: &[&str]| Selection {
            patterns: patterns.iter().map(|&pattern| pattern.to_owned()).collect(),
            ..Selection::default()
        };
        assert_eq!(
            select(&mut traces, &selection(&["app:*", "nosuch:*"])),
            Err(
                "--probe nosuch:* names no probe of a.trace, b.trace; their probes: \
                 my_controller:index, app:hits, my_controller_stack:index"
                    .to_owned()
            )
        );
        // Refused before anything is left out.
        assert_eq!(traces[0].probes.len(), 3);
        let mut empty = [trace("c.trace", vec![], vec![])];
        assert_eq!(
            select(&mut empty, &selection(&["app:*"])),
            Err("--probe app:* names no probe of c.trace; they have no probes".to_owned())
        );
    }

    #[test]
    fn keeps_the_records_of_a_window_from_the_first_record_or_of_the_wall_clock() {
        let window = |since, until| {
            let mut traces = [
                trace("a.trace", vec![index_probe(0)], calls(&[1, 2, 3, 4])),
                trace("b.trace", vec![index_probe(0)], calls_from(&[5], 1_000_500)),
            ];
            select(
                &mut traces,
                &Selection {
                    since,
                    until,
                    ..Selection::default()
                },
            )
            .unwrap();
            traces
                .iter()
                .map(|trace| trace.records.iter().map(|record| record.time_ns).collect())
                .collect::<Vec<Vec<u64>>>()
        };
        assert_eq!(
            window(Some(Bound::FromFirst(500)), Some(Bound::FromFirst(2000))),
            [vec![1_001_000], vec![1_000_500]]
        );
        assert_eq!(
            window(None, Some(Bound::Wall(EPOCH + 1_000_500))),
            [vec![1_000_000], vec![]]
        );
        assert_eq!(
            window(Some(Bound::Wall(EPOCH + 1_002_000)), None),
            [vec![1_002_000, 1_003_000], vec![]]
        );
    }
}
