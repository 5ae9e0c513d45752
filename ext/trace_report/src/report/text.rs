//! The report as text: a line saying what was read (files, processes,
//! records, their time span, the records lost and why), then per probe its
//! calls and, for a latency probe, the nearest-rank p50, p90 and p99 and
//! the max of its latencies, with their histogram in bpftrace's
//! power-of-two buckets of microseconds, labelled as `static-tracing
//! latency` labels them.

use super::durations;
use super::histogram;
use super::probe_calls::{probe_calls, ProbeCalls, SlowCall, Tally};
use super::{LostRecords, Options};
use crate::Trace;
use stapsdt::ring::Context;
use std::io::{self, Write};

pub(super) const PERCENTILES: [usize; 3] = [50, 90, 99];

pub fn write(traces: &[Trace], options: &Options, out: &mut impl Write) -> io::Result<()> {
    let mut tallies: Vec<Tally> = traces
        .iter()
        .map(|trace| Tally::of(trace, options.slowest))
        .collect();
    writeln!(out, "{}", summary(traces, &tallies))?;
    for probe in probe_calls(traces, &mut tallies, options.slowest) {
        writeln!(out)?;
        write_probe(out, probe)?;
    }
    Ok(())
}

fn summary(traces: &[Trace], tallies: &[Tally]) -> String {
    let records: usize = traces.iter().map(|trace| trace.records.len()).sum();
    // A pid is a process's only within its pid namespace: the same pid in
    // two namespaces is two processes, and listed twice.
    let mut processes: Vec<(u64, u64)> = Vec::new();
    for trace in traces {
        let process = (trace.header.pid, trace.header.pid_namespace);
        if !processes.contains(&process) {
            processes.push(process);
        }
    }
    let pids: Vec<String> = processes.iter().map(|(pid, _)| pid.to_string()).collect();
    let noun = if pids.len() == 1 {
        "process"
    } else {
        "processes"
    };
    format!(
        "Read {}: {noun} {}, {}{}; {}.",
        count(traces.len() as u128, "file"),
        pids.join(", "),
        count(records as u128, "record"),
        span(traces, tallies),
        lost(traces)
    )
}

/// The wall-clock time between the first record and the last, of all the
/// files, each on its own clock.
fn span(traces: &[Trace], tallies: &[Tally]) -> String {
    let times = traces.iter().zip(tallies).filter_map(|(trace, tally)| {
        let (least, greatest) = tally.times?;
        Some((wall_time(trace, least), wall_time(trace, greatest)))
    });
    let range = times.reduce(|(least, greatest), (low, high)| (least.min(low), greatest.max(high)));
    match range {
        Some((first, last)) => format!(" over {}", durations::format(last - first)),
        None => String::new(),
    }
}

/// Exact, whatever the anchors: a hostile file's must not wrap.
pub(super) fn wall_time(trace: &Trace, monotonic_ns: u64) -> i128 {
    trace.header.realtime_ns(monotonic_ns)
}

/// Records lost, by why: the writer dropped them (the ring was full, or
/// its probe table), it overwrote them (flight mode), or they were being
/// written when the ring was read.
fn lost(traces: &[Trace]) -> String {
    let lost = LostRecords::of(traces);
    let reasons = [
        (
            "dropped because the ring (or its probe table) was full",
            lost.dropped,
        ),
        ("overwritten in flight mode", lost.overwritten),
        ("being written when the ring was read", lost.being_written),
    ];
    let reasons: Vec<(&str, u128)> = reasons
        .into_iter()
        .filter(|&(_, number)| number > 0)
        .collect();
    if reasons.is_empty() {
        return "none lost".to_owned();
    }
    let total: u128 = reasons.iter().map(|&(_, number)| number).sum();
    let each: Vec<String> = reasons
        .iter()
        .map(|(why, number)| format!("{number} {why}"))
        .collect();
    format!("{total} lost ({})", each.join(", "))
}

fn write_probe(out: &mut impl Write, probe: ProbeCalls) -> io::Result<()> {
    let calls = if probe.calls == 0 {
        "no calls".to_owned()
    } else {
        count(u128::from(probe.calls), "call")
    };
    let line = format!("{}  {calls}", probe.label);
    let slowest = probe.slowest;
    let mut latencies = match probe.latencies {
        Some(latencies) if !latencies.is_empty() => latencies,
        _ => return writeln!(out, "{line}"),
    };
    let max = latencies.iter().copied().max().unwrap_or_default();
    let percentiles: Vec<String> = PERCENTILES
        .iter()
        .zip(percentiles(&mut latencies))
        .map(|(percent, value)| format!("p{percent} {}", duration(value)))
        .collect();
    writeln!(
        out,
        "{line}, {}, max {}",
        percentiles.join(", "),
        duration(max)
    )?;
    histogram::write(out, &histogram::latency_buckets(&latencies))?;
    write_slowest(out, &slowest)
}

/// A latency probe's slowest calls, after a blank line: each its
/// duration, process, thread and trace context.
fn write_slowest(out: &mut impl Write, slowest: &[SlowCall]) -> io::Result<()> {
    if slowest.is_empty() {
        return Ok(());
    }
    let width = slowest
        .iter()
        .map(|call| duration(call.duration).len())
        .max()
        .unwrap_or(0);
    writeln!(out, "\n  slowest:")?;
    for call in slowest {
        writeln!(
            out,
            "  {:>width$}  process {} thread {}  {}",
            duration(call.duration),
            call.pid,
            call.tid,
            context_text(&call.context)
        )?;
    }
    Ok(())
}

/// A record's trace context, as the text report shows it.
pub(super) fn context_text(context: &Context) -> String {
    match context {
        Context::None => "no trace context".to_owned(),
        Context::Unknown => "trace context unknown".to_owned(),
        Context::Known(context) => context.to_string(),
    }
}

fn duration(nanoseconds: i64) -> String {
    durations::format(i128::from(nanoseconds))
}

/// The nearest-rank [`PERCENTILES`] of `values`: for each, the smallest
/// value that that percentage of the values are at most. Each is selected
/// in place (reordering `values`), in time linear in their number, where
/// sorting a million latencies would cost several times as much.
pub(super) fn percentiles(values: &mut [i64]) -> [i64; PERCENTILES.len()] {
    let mut found = [0; PERCENTILES.len()];
    // Ranks ascend: once a value is selected, those after it are at least
    // it, and the next is among them.
    let mut start = 0;
    for (value, &percent) in found.iter_mut().zip(&PERCENTILES) {
        let rank = ((percent * values.len()).div_ceil(100)).max(1) - 1;
        *value = *values[start..].select_nth_unstable(rank - start).1;
        start = rank;
    }
    found
}

/// "1 file", "2 records", as the command words counts.
fn count(number: u128, noun: &str) -> String {
    let plural = if number == 1 { "" } else { "s" };
    format!("{number} {noun}{plural}")
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn text_of(traces: &[Trace]) -> String {
        let mut out = Vec::new();
        write(traces, &Options::default(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// The lines of a probe's histogram, trailing blanks kept.
    fn histogram_of(report: &str, label: &str) -> Vec<String> {
        let block = report
            .split("\n\n")
            .find(|block| block.starts_with(&format!("{label}  ")))
            .unwrap();
        block.lines().skip(1).map(str::to_owned).collect()
    }

    #[test]
    fn lists_a_latency_probes_slowest_calls_with_their_threads_and_trace_contexts() {
        use stapsdt::ring::Context;
        use stapsdt::trace_context::TraceContext;
        let a = TraceContext::from_hex(b"4bf92f3577b34da6a3ce929d0e0e4736", b"00f067aa0ba902b7")
            .unwrap();
        let mut records = calls(&[3_000, 312_000_000, 7, 45_000_000, 9_000, 45_000_000, 1]);
        records[1].context = Context::Known(a);
        records[1].tid = 12;
        records[3].context = Context::Unknown;
        let mut other = trace("b.trace", standard_probes(), calls(&[50_000_000]));
        other.header.pid = 999;
        let report = text_of(&[trace("a.trace", standard_probes(), records), other]);
        let block = report
            .split("\n\n")
            .find(|block| block.starts_with("  slowest:"))
            .unwrap();
        assert_eq!(
            block.lines().collect::<Vec<_>>(),
            [
                "  slowest:",
                "  312ms  process 4321 thread 12  trace 4bf92f3577b34da6a3ce929d0e0e4736 span 00f067aa0ba902b7",
                "   50ms  process 999 thread 7  no trace context",
                "   45ms  process 4321 thread 7  trace context unknown",
                "   45ms  process 4321 thread 7  no trace context",
                "    9us  process 4321 thread 7  no trace context",
            ]
        );
        // One block of slowest calls: the other probes have no latency.
        assert_eq!(report.matches("slowest:").count(), 1);
        let mut none = Vec::new();
        write(
            &[trace("c.trace", standard_probes(), calls(&[5]))],
            &Options { slowest: 0 },
            &mut none,
        )
        .unwrap();
        assert!(!String::from_utf8(none).unwrap().contains("slowest"));
    }

    #[test]
    fn sums_up_files_processes_records_their_span_and_the_records_lost_and_why() {
        let mut first = trace("a.trace", standard_probes(), calls(&[1000; 10]));
        first.counters.records = 20;
        first.counters.dropped = 2;
        let mut flight = trace(
            "b.trace",
            standard_probes(),
            calls_from(&[1000; 2], 6_000_000),
        );
        flight.counters.records = 5;
        flight.header.pid = 999;
        flight.header.flags = stapsdt::ring::format::OVERWRITE;
        assert_eq!(
            first_line(&text_of(&[first, flight])),
            "Read 2 files: processes 4321, 999, 12 records over 5ms; 15 lost (2 dropped because \
             the ring (or its probe table) was full, 3 overwritten in flight mode, 10 being written \
             when the ring was read)."
        );

        let single = trace("c.trace", standard_probes(), calls(&[5]));
        assert_eq!(
            first_line(&text_of(&[single])),
            "Read 1 file: process 4321, 1 record over 0ns; none lost."
        );
        // 999.999ms, which rounds to 1000ms: shown as 1s.
        let mut records = calls(&[1, 1]);
        records.extend(calls_from(&[1], 1_000_999_000));
        let second = trace("e.trace", standard_probes(), records);
        assert_eq!(
            first_line(&text_of(&[second])),
            "Read 1 file: process 4321, 3 records over 1s; none lost."
        );
        let empty = trace("d.trace", standard_probes(), vec![]);
        assert!(text_of(&[empty]).starts_with("Read 1 file: process 4321, 0 records; none lost.\n"));
    }

    #[test]
    fn lists_a_pid_once_per_pid_namespace() {
        let mut traces: Vec<Trace> = (0..4)
            .map(|_| trace("a.trace", vec![index_probe(0)], vec![]))
            .collect();
        traces[1].header.pid = 5;
        traces[2].header.pid_namespace = 1;
        assert_eq!(
            first_line(&text_of(&traces)),
            "Read 4 files: processes 4321, 5, 4321, 0 records; none lost."
        );
    }

    #[test]
    fn spans_the_records_by_each_files_wall_clock() {
        let mut early = trace("a.trace", vec![index_probe(0)], calls_from(&[1], 5_000));
        // Its clock started 2s after the other's: its record is 2s later.
        early.header.anchor_monotonic_ns = 1_000_000_000;
        early.header.anchor_realtime_ns = EPOCH + 3_000_000_000;
        let late = trace("b.trace", vec![index_probe(0)], calls_from(&[1], 5_000));
        assert_eq!(
            first_line(&text_of(&[early, late])),
            "Read 2 files: process 4321, 2 records over 2s; none lost."
        );
    }

    #[test]
    fn counts_each_probes_calls_and_gives_a_latency_probes_percentiles_by_nearest_rank() {
        let mut records = calls(&(1..=10).map(|ms| ms * 1_000_000).collect::<Vec<_>>());
        records.push(hits_record("x", 20_000_000));
        records.push(hits_record("y", 20_000_001));
        let report = text_of(&[trace("a.trace", standard_probes(), records)]);
        // Ranks ceil(0.5 * 10) = 5, ceil(0.9 * 10) = 9, ceil(0.99 * 10) = 10.
        assert!(report
            .contains("\n\nmy_controller:index  10 calls, p50 5ms, p90 9ms, p99 10ms, max 10ms\n"));
        assert!(report.contains("\n\napp:hits  2 calls\n"));
        assert!(report.contains("\n\nmy_controller_stack:index  no calls\n"));

        let hundred = calls(&(1..=100).map(|us| us * 1000).collect::<Vec<_>>());
        let report = text_of(&[trace("b.trace", standard_probes(), hundred)]);
        assert!(report
            .contains("my_controller:index  100 calls, p50 50us, p90 90us, p99 99us, max 100us\n"));
    }

    #[test]
    fn takes_the_nearest_rank_at_the_edges() {
        assert_eq!(percentiles(&mut [7]), [7, 7, 7]);
        assert_eq!(percentiles(&mut [2, 1]), [1, 2, 2]);
        let mut hundred: Vec<i64> = (1..=100).rev().collect();
        assert_eq!(percentiles(&mut hundred), [50, 90, 99]);
        // Shuffled: the values' order does not matter.
        let mut hundred_and_one: Vec<i64> = (0..101).map(|n| n * 37 % 101 + 1).collect();
        assert_eq!(percentiles(&mut hundred_and_one), [51, 91, 100]);
        let mut ties = vec![5, 1, 5, 5, 1, 9, 5, 5, 5, 5];
        assert_eq!(percentiles(&mut ties), [5, 5, 9]);
    }

    #[test]
    fn the_whole_report() {
        let mut records = calls(&[1500, 2500, 900]);
        records.push(hits_record("x", 20_000_000));
        let report = text_of(&[trace("a.trace", standard_probes(), records)]);
        assert_eq!(
            report,
            "Read 1 file: process 4321, 4 records over 19ms; none lost.\n\
             \n\
             my_controller:index  3 calls, p50 1.5us, p90 2.5us, p99 2.5us, max 2.5us\n  \
             < 1us       1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n  \
             [1us, 2us)  1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n  \
             [2us, 4us)  1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\
             \n  \
             slowest:\n  \
             2.5us  process 4321 thread 7  no trace context\n  \
             1.5us  process 4321 thread 7  no trace context\n  \
             900ns  process 4321 thread 7  no trace context\n\
             \n\
             app:hits  1 call\n\
             \n\
             my_controller_stack:index  no calls\n"
        );
    }

    // bpftrace's hist(arg0 / 1000) of these: arg0 / 1000 truncates toward
    // zero, so -1500ns is -1 ("< 0"), -5, 0 and 999ns are [0], 1000 and
    // 1999ns are [1], 2000 and 3999ns [2, 4), 4000ns [4, 8), 1.5ms
    // (1500us) [1K, 2K), with every empty bucket between.
    #[test]
    fn shows_the_latencies_in_the_buckets_bpftraces_hist_fills() {
        let latencies = [-1500, -5, 0, 999, 1000, 1999, 2000, 3999, 4000, 1_500_000];
        let report = text_of(&[trace("a.trace", standard_probes(), calls(&latencies))]);
        let mut expected = vec![
            "  < 0               1 |@@@@@@@@@@@@@@@@@                                   |"
                .to_owned(),
            "  < 1us             3 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|"
                .to_owned(),
            "  [1us, 2us)        2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                  |"
                .to_owned(),
            "  [2us, 4us)        2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                  |"
                .to_owned(),
            "  [4us, 8us)        1 |@@@@@@@@@@@@@@@@@                                   |"
                .to_owned(),
        ];
        let bounds = ["8us", "16us", "32us", "64us", "128us", "256us", "512us"];
        for pair in bounds.windows(2) {
            let range = format!("[{}, {})", pair[0], pair[1]);
            expected.push(format!("  {range:<16}  0 |{}|", " ".repeat(52)));
        }
        expected.push(
            "  [512us, 1.02ms)   0 |                                                    |"
                .to_owned(),
        );
        expected.push(
            "  [1.02ms, 2.05ms)  1 |@@@@@@@@@@@@@@@@@                                   |"
                .to_owned(),
        );
        assert_eq!(histogram_of(&report, "my_controller:index"), expected);
        assert!(report
            .contains("my_controller:index  10 calls, p50 1us, p90 4us, p99 1.5ms, max 1.5ms\n"));
    }

    #[test]
    fn starts_the_histogram_at_the_lowest_bucket_filled_and_ends_it_at_the_highest() {
        let report = text_of(&[trace(
            "a.trace",
            standard_probes(),
            calls(&[5_000, 6_000, 20_000]),
        )]);
        assert_eq!(
            histogram_of(&report, "my_controller:index"),
            [
                "  [4us, 8us)    2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|",
                "  [8us, 16us)   0 |                                                    |",
                "  [16us, 32us)  1 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |"
            ]
        );
    }

    #[test]
    fn shows_negative_and_huge_latencies() {
        let report = text_of(&[trace(
            "a.trace",
            standard_probes(),
            calls(&[i64::MIN, 0, i64::MAX]),
        )]);
        assert!(report.contains(
            "my_controller:index  3 calls, p50 0ns, p90 9223372037s, p99 9223372037s, max 9223372037s\n"
        ));
        // As the Ruby report drew them: every bucket from "< 0" to that of
        // 2^63ns, the labels padded to the longest.
        let histogram = histogram_of(&report, "my_controller:index");
        let blank = format!("|{}|", " ".repeat(52));
        let full = format!("|{}|", "@".repeat(52));
        assert_eq!(histogram.len(), 56);
        assert_eq!(
            histogram[0],
            format!("  < 0                          1 {full}")
        );
        assert_eq!(
            histogram[1],
            format!("  < 1us                        1 {full}")
        );
        assert_eq!(
            histogram[2],
            format!("  [1us, 2us)                   0 {blank}")
        );
        assert_eq!(
            histogram[23],
            format!("  [2.1s, 4.19s)                0 {blank}")
        );
        assert_eq!(
            histogram[54],
            format!("  [4503599627s, 9007199255s)   0 {blank}")
        );
        assert_eq!(
            histogram[55],
            format!("  [9007199255s, 18014398509s)  1 {full}")
        );
    }

    #[test]
    fn merges_several_files_a_probe_in_two_files_is_one_line_its_calls_summed() {
        let mut records = calls(&[1000, 2000]);
        records.push(hits_record("x", 5));
        let first = trace("a.trace", standard_probes(), records);
        let mut second = trace("b.trace", vec![index_probe(0)], calls(&[3000; 3]));
        second.header.pid = 5555;
        let report = text_of(&[first, second]);
        let lines: Vec<&str> = report
            .lines()
            .filter(|line| {
                line.starts_with("my_controller:index ") || line.starts_with("app:hits ")
            })
            .collect();
        assert_eq!(
            lines,
            [
                "my_controller:index  5 calls, p50 3us, p90 3us, p99 3us, max 3us",
                "app:hits  1 call"
            ]
        );
        assert_eq!(
            histogram_of(&report, "my_controller:index"),
            [
                "  [1us, 2us)  1 |@@@@@@@@@@@@@                                       |",
                "  [2us, 4us)  4 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|"
            ]
        );
    }

    #[test]
    fn a_probe_is_a_latency_probe_if_it_is_one_in_any_file() {
        let plain = probe(
            0,
            "my_controller",
            "index",
            vec![stapsdt::ArgType::Int64],
            None,
            None,
        );
        let first = trace("a.trace", vec![plain], calls(&[7_000]));
        let second = trace("b.trace", vec![index_probe(0)], calls(&[3_000]));
        let report = text_of(&[first, second]);
        // The first file's call counts, but its latency is not one.
        assert!(
            report.contains("\nmy_controller:index  2 calls, p50 3us, p90 3us, p99 3us, max 3us\n")
        );
    }
}
