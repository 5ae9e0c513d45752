//! The metrics of tallies as scrapers read them (`static-tracing export`,
//! the Rack endpoint; docs/fleet.md): the Prometheus text format (version
//! 0.0.4), or OpenMetrics 1.0 when the scraper asks for it, which adds to
//! each latency bucket its exemplar: the trace id of a call in it.

use crate::tally::{bucket_bound_micros, Exemplar, ProbeTally, Tally, BUCKETS};
use std::fmt::Write;

/// The families, in the order they are written. A counter's samples are
/// its family's name and `_total`.
const CALLS: &str = "static_tracing_probe_calls";
const LATENCY: &str = "static_tracing_probe_latency_seconds";
const LOST: &str = "static_tracing_lost_records";
const REFUSED: &str = "static_tracing_ring_refused";

/// How the metrics are written: one scrape's choice ([`Format::for_accept`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format, version 0.0.4: what every scraper reads.
    Prometheus,
    /// OpenMetrics 1.0: the same series, and exemplars.
    OpenMetrics,
}

impl Format {
    /// The format for a scrape whose `Accept` header is `accept`:
    /// OpenMetrics when the scraper ranks it above the text format (as
    /// Prometheus does), the text format otherwise, with no header, or for
    /// one that only takes anything (`*/*`).
    pub fn for_accept(accept: Option<&str>) -> Format {
        let (mut open_metrics, mut text) = (0.0f64, 0.0f64);
        for range in accept.unwrap_or_default().split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let mut quality = Some(1.0);
            for parameter in parts {
                if let Some((name, value)) = parameter.split_once('=') {
                    if name.trim().eq_ignore_ascii_case("q") {
                        quality = value
                            .trim()
                            .parse::<f64>()
                            .ok()
                            .filter(|q| (0.0..=1.0).contains(q));
                    }
                }
            }
            // A range whose quality does not parse is ignored.
            let Some(quality) = quality else { continue };
            match media.as_str() {
                "application/openmetrics-text" => open_metrics = open_metrics.max(quality),
                "text/plain" | "text/*" | "*/*" => text = text.max(quality),
                _ => {}
            }
        }
        if open_metrics > 0.0 && open_metrics >= text {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The metrics of `rings`, each a process's tally and the pid it is
/// labelled with, in `format`: every family once, with its HELP and TYPE,
/// then its series for every ring.
pub fn exposition(rings: &[(u64, &Tally)], format: Format) -> String {
    let open_metrics = format == Format::OpenMetrics;
    let series: usize = rings.iter().map(|(_, tally)| tally.probes().len()).sum();
    let per_series = if open_metrics { 160 } else { 64 };
    let mut out = String::with_capacity(1024 + series * per_series * (BUCKETS + 4));
    family(
        &mut out,
        format,
        CALLS,
        "counter",
        "Calls of a probe that the process recorded, read from its ring.",
    );
    for (pid, tally) in rings {
        for probe in tally.probes() {
            let labels = probe_labels(*pid, probe);
            let _ = writeln!(out, "{CALLS}_total{{{labels}}} {}", probe.calls);
        }
    }
    family(
        &mut out,
        format,
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
            let bounds = bounds.iter().map(String::as_str).chain(["+Inf"]);
            // Each bucket counts the calls below its bound; +Inf, every one.
            let counts = histogram.buckets.iter().scan(0, |below, count| {
                *below += count;
                Some(*below)
            });
            let counts = counts.chain([histogram.count]);
            for ((cumulative, bound), exemplar) in counts.zip(bounds).zip(&histogram.exemplars) {
                let _ = write!(
                    out,
                    "{LATENCY}_bucket{{{labels},le=\"{bound}\"}} {cumulative}"
                );
                match exemplar {
                    Some(exemplar) if open_metrics => write_exemplar(&mut out, exemplar),
                    _ => out.push('\n'),
                }
            }
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
        format,
        LOST,
        "counter",
        "Records the process reserved that were not read: dropped (its ring or probe table was full), or overwritten before they were read.",
    );
    for (pid, tally) in rings {
        let lost = tally.lost();
        for (reason, count) in [("dropped", lost.dropped), ("overwritten", lost.overwritten)] {
            let _ = writeln!(
                out,
                "{LOST}_total{{pid=\"{pid}\",reason=\"{reason}\"}} {count}"
            );
        }
    }
    family(
        &mut out,
        format,
        REFUSED,
        "gauge",
        "1 once the process rewrote its ring under the reader (a table that shrank, a header or counter changed): it is read no more, and its other series stay as they were.",
    );
    for (pid, tally) in rings {
        let refused = u8::from(tally.refused().is_some());
        let _ = writeln!(out, "{REFUSED}{{pid=\"{pid}\"}} {refused}");
    }
    if open_metrics {
        out.push_str("# EOF\n");
    }
    out
}

/// ` # {trace_id="…",span_id="…"} VALUE TIMESTAMP` and the line's end: the
/// call's duration and when it ended, in seconds, exactly.
fn write_exemplar(out: &mut String, exemplar: &Exemplar) {
    let _ = writeln!(
        out,
        " # {{trace_id=\"{}\",span_id=\"{}\"}} {} {}",
        exemplar.context.trace_hex(),
        exemplar.context.span_hex(),
        seconds_of_nanos(i128::from(exemplar.duration_ns)),
        seconds_of_nanos(i128::from(exemplar.realtime_ns))
    );
}

/// A family's metadata. The text format names a counter's family by its
/// samples' name (`_total` and all); OpenMetrics by the name before it,
/// and gives a unit where the name ends in one.
fn family(out: &mut String, format: Format, name: &str, kind: &str, help: &str) {
    let suffix = if kind == "counter" && format == Format::Prometheus {
        "_total"
    } else {
        ""
    };
    let _ = writeln!(out, "# HELP {name}{suffix} {help}");
    let _ = writeln!(out, "# TYPE {name}{suffix} {kind}");
    if format == Format::OpenMetrics && name.ends_with("_seconds") {
        let _ = writeln!(out, "# UNIT {name} seconds");
    }
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
        let text = exposition(&[(11, &one), (12, &two)], Format::Prometheus);
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

    #[test]
    fn serves_open_metrics_to_a_scraper_that_ranks_it_first() {
        let cases = [
            // Prometheus 2, and 3 with its default scrape protocols.
            ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1", Format::OpenMetrics),
            ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1", Format::OpenMetrics),
            ("Application/OpenMetrics-Text; Version=1.0.0", Format::OpenMetrics),
            // Prometheus asked for its text format first, curl, a browser.
            ("text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5", Format::Prometheus),
            ("*/*", Format::Prometheus),
            ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", Format::Prometheus),
            ("", Format::Prometheus),
            // Refused, or with a quality that does not parse.
            ("application/openmetrics-text;q=0", Format::Prometheus),
            ("application/openmetrics-text;q=high", Format::Prometheus),
            ("application/openmetrics-text;q=2", Format::Prometheus),
            (";;,=,q=,application/openmetrics-text;q", Format::OpenMetrics),
        ];
        for (accept, format) in cases {
            assert_eq!(Format::for_accept(Some(accept)), format, "{accept}");
        }
        assert_eq!(Format::for_accept(None), Format::Prometheus);
        assert!(Format::OpenMetrics
            .content_type()
            .starts_with("application/openmetrics-text; version=1.0.0"));
    }

    #[test]
    fn writes_open_metrics_with_each_buckets_exemplar() {
        use stapsdt::ring::Maker;
        use stapsdt::trace_context::TraceContext;
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        let context =
            TraceContext::from_hex(b"4bf92f3577b34da6a3ce929d0e0e4736", b"00f067aa0ba902b7")
                .unwrap();
        assert!(live.ring.record_context(10, Maker::new(7, 1), &context));
        assert!(live
            .ring
            .record_integer_by(index, 312_000_007, Maker::new(7, 1), 312_000_001));
        live.latencies(index, &[1500]);
        let mut tally = Tally::new("one");
        tally.scrape(&live).unwrap();
        let text = exposition(&[(11, &tally)], Format::OpenMetrics);
        let lines: Vec<&str> = text.lines().collect();
        let metadata: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|line| line.starts_with("# ") && !line.starts_with("# HELP"))
            .collect();
        assert_eq!(
            metadata,
            [
                "# TYPE static_tracing_probe_calls counter",
                "# TYPE static_tracing_probe_latency_seconds histogram",
                "# UNIT static_tracing_probe_latency_seconds seconds",
                "# TYPE static_tracing_lost_records counter",
                "# TYPE static_tracing_ring_refused gauge",
                "# EOF",
            ]
        );
        assert_eq!(lines.last(), Some(&"# EOF"));
        assert!(lines.contains(
            &"static_tracing_probe_calls_total{pid=\"11\",provider=\"app\",probe=\"index\"} 2"
        ));
        // 312ms, in the bucket below 2^19us (0.524288s), ended 312.000007s
        // after the ring's anchor.
        let with_exemplars: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|line| line.contains(" # {"))
            .collect();
        assert_eq!(
            with_exemplars,
            ["static_tracing_probe_latency_seconds_bucket{pid=\"11\",provider=\"app\",probe=\"index\",le=\"0.524288\"} 2 # {trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\",span_id=\"00f067aa0ba902b7\"} 0.312000001 1700000000.312000007"]
        );
        assert!(
            lines.contains(&"static_tracing_lost_records_total{pid=\"11\",reason=\"dropped\"} 0")
        );
        // The same series as the text format, and no exemplar in it.
        let text = exposition(&[(11, &tally)], Format::Prometheus);
        let samples = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|line| !line.starts_with('#'))
                .map(|line| line.split(" # ").next().unwrap().to_owned())
                .collect()
        };
        assert_eq!(
            samples(&text),
            samples(&exposition(&[(11, &tally)], Format::OpenMetrics))
        );
        assert!(!text.contains("trace_id"));
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
            let text = exposition(&labelled, Format::Prometheus);
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
