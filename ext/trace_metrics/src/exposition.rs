//! The Prometheus text exposition format (version 0.0.4) of tallies
//! (`static-tracing export`, the Rack endpoint; docs/fleet.md).

use crate::tally::{bucket_bound_micros, ProbeTally, Tally, BUCKETS};
use std::fmt::Write;

/// The families, in the order they are written.
const CALLS: &str = "static_tracing_probe_calls_total";
const LATENCY: &str = "static_tracing_probe_latency_seconds";
const LOST: &str = "static_tracing_lost_records_total";
const REFUSED: &str = "static_tracing_ring_refused";

/// The Prometheus text exposition format (version 0.0.4) of `rings`, each
/// a process's tally and the pid it is labelled with: every family once,
/// with its HELP and TYPE, then its series for every ring.
pub fn exposition(rings: &[(u64, &Tally)]) -> String {
    let series: usize = rings.iter().map(|(_, tally)| tally.probes().len()).sum();
    let mut out = String::with_capacity(1024 + series * 64 * (BUCKETS + 4));
    family(
        &mut out,
        CALLS,
        "counter",
        "Calls of a probe that the process recorded, read from its ring.",
    );
    for (pid, tally) in rings {
        for probe in tally.probes() {
            let labels = probe_labels(*pid, probe);
            let _ = writeln!(out, "{CALLS}{{{labels}}} {}", probe.calls);
        }
    }
    family(
        &mut out,
        LATENCY,
        "histogram",
        "Durations of a latency probe's calls, in the text report's power-of-two buckets.",
    );
    let bounds: Vec<String> = (0..BUCKETS)
        .map(|bucket| seconds_of_micros(bucket_bound_micros(bucket)))
        .collect();
    for (pid, tally) in rings {
        for probe in tally.probes() {
            let Some(histogram) = &probe.latency else {
                continue;
            };
            let labels = probe_labels(*pid, probe);
            let mut cumulative = 0;
            for (count, bound) in histogram.buckets.iter().zip(&bounds) {
                cumulative += count;
                let _ = writeln!(
                    out,
                    "{LATENCY}_bucket{{{labels},le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "{LATENCY}_bucket{{{labels},le=\"+Inf\"}} {}",
                histogram.count
            );
            let _ = writeln!(
                out,
                "{LATENCY}_sum{{{labels}}} {}",
                seconds_of_nanos(histogram.sum_ns)
            );
            let _ = writeln!(out, "{LATENCY}_count{{{labels}}} {}", histogram.count);
        }
    }
    family(
        &mut out,
        LOST,
        "counter",
        "Records the process reserved that were not read: dropped (its ring or probe table was full), or overwritten before they were read.",
    );
    for (pid, tally) in rings {
        let lost = tally.lost();
        for (reason, count) in [("dropped", lost.dropped), ("overwritten", lost.overwritten)] {
            let _ = writeln!(out, "{LOST}{{pid=\"{pid}\",reason=\"{reason}\"}} {count}");
        }
    }
    family(
        &mut out,
        REFUSED,
        "gauge",
        "1 once the process rewrote its ring under the reader (a table that shrank, a header or counter changed): it is read no more, and its other series stay as they were.",
    );
    for (pid, tally) in rings {
        let refused = u8::from(tally.refused().is_some());
        let _ = writeln!(out, "{REFUSED}{{pid=\"{pid}\"}} {refused}");
    }
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn probe_labels(pid: u64, probe: &ProbeTally) -> String {
    format!(
        "pid=\"{pid}\",provider=\"{}\",probe=\"{}\"",
        label_value(&probe.provider),
        label_value(&probe.name)
    )
}

/// A label value as the text format quotes it. A probe's names are
/// `[A-Za-z_][A-Za-z0-9_]*` (the gem's rule, which the reader checks), so
/// this only guards against that rule changing.
fn label_value(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `micros` microseconds in seconds, exactly, as Go's shortest `%g` writes
/// a float (Prometheus's own clients write `le` so): `1e-06`, `1.6e-05`,
/// `0.000128`, `33.554432`. Series of one histogram are summed by their
/// `le` label's text, which must then be the same in every exporter.
fn seconds_of_micros(micros: u64) -> String {
    let digits = micros.to_string();
    let trimmed = digits.trim_end_matches('0');
    // The decimal exponent of the leading digit, in seconds.
    let exponent = digits.len() as i32 - 1 - 6;
    if exponent < -4 {
        let (first, rest) = trimmed.split_at(1);
        let point = if rest.is_empty() { "" } else { "." };
        return format!("{first}{point}{rest}e-{:02}", -exponent);
    }
    let padded = format!("{digits:0>7}");
    let (whole, fraction) = padded.split_at(padded.len() - 6);
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        whole.to_owned()
    } else {
        format!("{whole}.{fraction}")
    }
}

/// `nanoseconds` in seconds, exactly, in decimal: no float rounds it.
fn seconds_of_nanos(nanoseconds: i128) -> String {
    let sign = if nanoseconds < 0 { "-" } else { "" };
    let magnitude = nanoseconds.unsigned_abs();
    let (whole, fraction) = (magnitude / 1_000_000_000, magnitude % 1_000_000_000);
    let fraction = format!("{fraction:09}");
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::LiveRing;
    use stapsdt::ring::format::SLOT_SIZE;
    use stapsdt::ring::Arg;
    use std::time::Duration;

    #[test]
    fn writes_le_bounds_as_prometheus_clients_do() {
        let bounds: Vec<String> = [0, 1, 3, 4, 6, 7, 10, 20, 25]
            .into_iter()
            .map(|bucket| seconds_of_micros(bucket_bound_micros(bucket)))
            .collect();
        assert_eq!(
            bounds,
            [
                "1e-06",
                "2e-06",
                "8e-06",
                "1.6e-05",
                "6.4e-05",
                "0.000128",
                "0.001024",
                "1.048576",
                "33.554432"
            ]
        );
    }

    #[test]
    fn writes_the_text_format_family_by_family() {
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        let query = live.text_probe("query");
        live.latencies(index, &[500, 1500, 1_500_000]);
        assert!(live.ring.record(query, 1, 7, &[Arg::Str(b"x")]));
        let (mut one, mut two) = (Tally::new("one"), Tally::new("two"));
        one.scrape(&live).unwrap();
        two.scrape(&live).unwrap();
        let text = exposition(&[(11, &one), (12, &two)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            &lines[..4],
            [
                "# HELP static_tracing_probe_calls_total Calls of a probe that the process recorded, read from its ring.",
                "# TYPE static_tracing_probe_calls_total counter",
                "static_tracing_probe_calls_total{pid=\"11\",provider=\"app\",probe=\"index\"} 3",
                "static_tracing_probe_calls_total{pid=\"11\",provider=\"app\",probe=\"query\"} 1",
            ]
        );
        let bucket = |pid: u64, le: &str| {
            format!("static_tracing_probe_latency_seconds_bucket{{pid=\"{pid}\",provider=\"app\",probe=\"index\",le=\"{le}\"}}")
        };
        for (le, count) in [
            ("1e-06", 1),
            ("2e-06", 2),
            ("0.001024", 2),
            ("0.002048", 3),
            ("+Inf", 3),
        ] {
            assert!(
                lines.contains(&format!("{} {count}", bucket(12, le)).as_str()),
                "{le}"
            );
        }
        let histograms = lines
            .iter()
            .filter(|line| line.contains("_bucket{"))
            .count();
        assert_eq!(histograms, 2 * (BUCKETS + 1));
        assert!(lines.contains(
            &"static_tracing_probe_latency_seconds_sum{pid=\"11\",provider=\"app\",probe=\"index\"} 0.001502"
        ));
        assert!(lines.contains(
            &"static_tracing_probe_latency_seconds_count{pid=\"11\",provider=\"app\",probe=\"index\"} 3"
        ));
        assert_eq!(
            &lines[lines.len() - 8..lines.len() - 4],
            [
                "static_tracing_lost_records_total{pid=\"11\",reason=\"dropped\"} 0",
                "static_tracing_lost_records_total{pid=\"11\",reason=\"overwritten\"} 0",
                "static_tracing_lost_records_total{pid=\"12\",reason=\"dropped\"} 0",
                "static_tracing_lost_records_total{pid=\"12\",reason=\"overwritten\"} 0",
            ]
        );
        assert_eq!(
            &lines[lines.len() - 2..],
            [
                "static_tracing_ring_refused{pid=\"11\"} 0",
                "static_tracing_ring_refused{pid=\"12\"} 0",
            ]
        );
        let families: Vec<&str> = lines
            .iter()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .collect();
        assert_eq!(
            families,
            [
                "static_tracing_probe_calls_total counter",
                "static_tracing_probe_latency_seconds histogram",
                "static_tracing_lost_records_total counter",
                "static_tracing_ring_refused gauge"
            ]
        );
    }

    /// The CPU time this thread has used.
    fn thread_cpu_time() -> Duration {
        let mut time = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the timespec it is given, which
        // lives for the call.
        let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
        assert_eq!(status, 0);
        Duration::new(time.tv_sec as u64, time.tv_nsec as u32)
    }

    /// The scrape the command serves: 8 processes of 100 latency probes,
    /// each with flight rings of 16 MiB (the default), each having made
    /// 10,000 calls since the last scrape; read and written as text. The
    /// bar (docs/fleet.md) is for an optimized build, as the gem ships:
    /// `cargo test --release -p trace_metrics scrape_cost -- --nocapture`.
    #[test]
    fn scrape_cost() {
        const PROCESSES: usize = 8;
        const PROBES: u32 = 100;
        const CALLS: u64 = 10_000;
        let rings: Vec<LiveRing> = (0..PROCESSES)
            .map(|_| {
                let live = LiveRing::new((16 << 20) / SLOT_SIZE, true);
                for probe in 0..PROBES {
                    live.latency_probe(&format!("action_{probe}"));
                }
                live
            })
            .collect();
        let calls = |round: u64| {
            for live in &rings {
                for call in 0..CALLS {
                    let probe = (call % u64::from(PROBES)) as u32;
                    live.ring.record_integer(
                        probe,
                        call,
                        7,
                        ((call * 7919 + round) % 50_000_000) as i64,
                    );
                }
            }
        };
        let mut tallies: Vec<Tally> = (0..PROCESSES).map(|_| Tally::new("ring")).collect();
        let scrape = |tallies: &mut Vec<Tally>| {
            let start = thread_cpu_time();
            for (tally, live) in tallies.iter_mut().zip(&rings) {
                tally.scrape(live).unwrap();
            }
            let labelled: Vec<(u64, &Tally)> = tallies
                .iter()
                .enumerate()
                .map(|(pid, tally)| (pid as u64, tally))
                .collect();
            let text = exposition(&labelled);
            (thread_cpu_time() - start, text.len())
        };
        calls(0);
        scrape(&mut tallies);
        let mut costs = Vec::new();
        for round in 1..=5 {
            calls(round);
            costs.push(scrape(&mut tallies));
        }
        let (cost, bytes) = *costs.iter().min().unwrap();
        let total: u64 = tallies
            .iter()
            .flat_map(|tally| tally.probes())
            .map(|probe| probe.calls)
            .sum();
        assert_eq!(total, PROCESSES as u64 * CALLS * 6);
        println!(
            "one scrape of {PROCESSES} rings of {PROBES} probes, {CALLS} new calls each: {:.1} ms of CPU, {bytes} bytes of text",
            cost.as_secs_f64() * 1e3
        );
        if !cfg!(debug_assertions) {
            assert!(cost < Duration::from_millis(50), "{cost:?}");
        }
    }
}
