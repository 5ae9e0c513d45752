//! Reports of trace files, as `static-tracing report` makes them: text
//! (what was read, then per probe its calls, latency percentiles and
//! histogram), its figures as JSON, Chrome trace-event JSON, speedscope's
//! format, a gzipped pprof profile, folded stacks for flamegraph.pl, and a
//! flame graph as SVG. Each is one report of all the files given. Text,
//! Chrome and folded are byte for byte what the command's Ruby reports
//! wrote before they moved here, so that scripts reading them see no
//! change.

mod chrome;
pub mod durations;
mod folded;
pub mod histogram;
mod json;
mod pprof;
mod probe_calls;
pub mod select;
mod speedscope;
mod svg;
mod text;
pub mod threads;

#[cfg(test)]
pub(crate) mod testing;

use crate::Trace;
use std::fmt;
use std::io::{self, BufWriter, Write};
use std::str::FromStr;
pub use threads::ThreadNames;

/// Reports can be millions of lines: they reach the destination in pieces
/// this large, not line by line.
const OUTPUT_BUFFER: usize = 1 << 20;

/// A report's format, as `--format` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Chrome,
    Speedscope,
    Pprof,
    Folded,
    Svg,
}

impl Format {
    /// The names `--format` takes, the default first.
    pub const NAMES: [&'static str; 7] = [
        "text",
        "json",
        "chrome",
        "speedscope",
        "pprof",
        "folded",
        "svg",
    ];

    const ALL: [Format; 7] = [
        Format::Text,
        Format::Json,
        Format::Chrome,
        Format::Speedscope,
        Format::Pprof,
        Format::Folded,
        Format::Svg,
    ];

    pub fn named(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|format| format.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
            Format::Chrome => "chrome",
            Format::Speedscope => "speedscope",
            Format::Pprof => "pprof",
            Format::Folded => "folded",
            Format::Svg => "svg",
        }
    }
}

/// A name that is none of [`Format::NAMES`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownFormat(pub String);

impl fmt::Display for UnknownFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown report format {:?}: one of {}",
            self.0,
            Format::NAMES.join(", ")
        )
    }
}

impl std::error::Error for UnknownFormat {}

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(name: &str) -> Result<Format, UnknownFormat> {
        Format::named(name).ok_or_else(|| UnknownFormat(name.to_owned()))
    }
}

/// What a report shows beyond what every report does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// How many of each latency probe's slowest calls the text and JSON
    /// reports list.
    pub slowest: usize,
}

impl Options {
    pub const DEFAULT_SLOWEST: usize = 5;
}

impl Default for Options {
    fn default() -> Options {
        Options {
            slowest: Options::DEFAULT_SLOWEST,
        }
    }
}

/// Why a report was not made, or not all written.
#[derive(Debug)]
pub enum ReportError {
    /// The files hold nothing this format can show (folded stacks of files
    /// without a stack probe): the message says what they hold instead.
    Refused(String),
    /// Writing the report failed.
    Io(io::Error),
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportError::Refused(message) => f.write_str(message),
            ReportError::Io(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for ReportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReportError::Refused(_) => None,
            ReportError::Io(err) => Some(err),
        }
    }
}

impl From<io::Error> for ReportError {
    fn from(err: io::Error) -> ReportError {
        ReportError::Io(err)
    }
}

/// Refuses `traces` if `format` can make nothing of them. The command asks
/// before it opens its output, so that a refused report leaves an existing
/// output file as it was.
pub fn check(traces: &[Trace], format: Format) -> Result<(), ReportError> {
    match format {
        Format::Text | Format::Json | Format::Chrome | Format::Speedscope | Format::Pprof => Ok(()),
        Format::Folded | Format::Svg => folded::check(traces).map_err(ReportError::Refused),
    }
}

/// Writes the report of `traces` in `format` to `out`, refusing it as
/// [`check`] does; `names` are their threads' (as `stapsdt::ring::trace_file::read_thread_names` finds them).
pub fn write(
    traces: &[Trace],
    names: &ThreadNames,
    format: Format,
    options: &Options,
    out: &mut dyn Write,
) -> Result<(), ReportError> {
    check(traces, format)?;
    let mut out = BufWriter::with_capacity(OUTPUT_BUFFER, out);
    match format {
        Format::Text => text::write(traces, options, &mut out)?,
        Format::Json => json::write(traces, options, &mut out)?,
        Format::Chrome => chrome::write(traces, names, &mut out)?,
        Format::Speedscope => speedscope::write(traces, names, &mut out)?,
        Format::Pprof => pprof::write(traces, names, &mut out)?,
        Format::Folded => folded::write(traces, &mut out)?,
        Format::Svg => svg::write(traces, &mut out)?,
    }
    out.flush()?;
    Ok(())
}

/// Records lost across files, by why: the writer dropped them (the ring
/// was full, or its probe table), it overwrote them (flight mode), or they
/// were being written when the ring was read. What the text and JSON
/// reports both show.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct LostRecords {
    dropped: u128,
    overwritten: u128,
    being_written: u128,
}

impl LostRecords {
    fn of(traces: &[Trace]) -> LostRecords {
        let mut lost = LostRecords::default();
        for trace in traces {
            lost.dropped += u128::from(trace.counters.dropped);
            let unread = u128::from(trace.unread());
            if trace.header.overwrite() {
                lost.overwritten += unread;
            } else {
                lost.being_written += unread;
            }
        }
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{calls, index_probe, trace};
    use super::*;

    /// The reports of a million records, timed: run it in release, with
    /// `cargo test --release -p trace_report -- --ignored --nocapture`.
    #[test]
    #[ignore = "a timing, for release builds"]
    fn a_million_records() {
        use super::testing::{record, standard_probes};
        use stapsdt::ring::Value;
        let records = (0..1_000_000u64)
            .map(|number| match number % 10 {
                0 => record(
                    1,
                    vec![
                        Value::Str(b"GET /".to_vec()),
                        Value::Int(1),
                        Value::Float(0.5),
                    ],
                    number * 100,
                    7,
                ),
                1 => record(
                    2,
                    vec![Value::Str(
                        format!("main;work;f{}", number % 7).into_bytes(),
                    )],
                    number * 100,
                    7,
                ),
                _ => record(
                    0,
                    vec![Value::Int((number * 7919 % 5_000_000) as i64)],
                    number * 100,
                    7,
                ),
            })
            .collect();
        let traces = [trace("a.trace", standard_probes(), records)];
        for format in Format::ALL {
            let mut out = io::sink();
            let started = std::time::Instant::now();
            write(
                &traces,
                &ThreadNames::default(),
                format,
                &Options::default(),
                &mut out,
            )
            .unwrap();
            eprintln!("{}: {:?}", format.name(), started.elapsed());
        }
    }

    #[test]
    fn formats_are_known_by_their_names() {
        for name in Format::NAMES {
            let format: Format = name.parse().unwrap();
            assert_eq!(format.name(), name);
        }
        assert_eq!(Format::named("png"), None);
        assert_eq!(
            "png".parse::<Format>().unwrap_err().to_string(),
            "unknown report format \"png\": one of text, json, chrome, speedscope, pprof, folded, svg"
        );
    }

    #[test]
    fn a_refused_report_writes_nothing() {
        let traces = [trace("a.trace", vec![index_probe(0)], calls(&[1]))];
        let mut out = Vec::new();
        let err = write(
            &traces,
            &ThreadNames::default(),
            Format::Folded,
            &Options::default(),
            &mut out,
        )
        .unwrap_err();
        assert!(matches!(err, ReportError::Refused(_)));
        assert!(out.is_empty());
        assert!(check(&traces, Format::Svg).is_err());
        for format in [
            Format::Text,
            Format::Json,
            Format::Chrome,
            Format::Speedscope,
            Format::Pprof,
        ] {
            assert!(check(&traces, format).is_ok());
        }
    }

    /// A destination that takes `room` bytes and then fails.
    struct Full {
        room: usize,
    }

    impl Write for Full {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let taken = bytes.len().min(self.room);
            self.room -= taken;
            Ok(taken)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_destination_that_fails_is_an_io_error() {
        let traces = [trace("a.trace", vec![index_probe(0)], calls(&[1; 100]))];
        for format in [
            Format::Text,
            Format::Json,
            Format::Chrome,
            Format::Speedscope,
            Format::Pprof,
        ] {
            let err = write(
                &traces,
                &ThreadNames::default(),
                format,
                &Options::default(),
                &mut Full { room: 10 },
            )
            .unwrap_err();
            match err {
                ReportError::Io(err) => assert_eq!(err.raw_os_error(), Some(libc::ENOSPC)),
                other => panic!("{other:?}"),
            }
        }
    }
}
