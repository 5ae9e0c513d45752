//! Records as Chrome trace-event JSON (the Trace Event Format), which
//! Perfetto UI, chrome://tracing and speedscope open: per process a
//! `process_name` metadata event; per call of a latency probe a complete
//! event ("X") from its start (its end, when the record was made, less its
//! latency) for its latency; per other record an instant event ("i",
//! thread scoped). Times are wall-clock microseconds, written with all
//! three decimals of their nanoseconds (Perfetto keeps them). A thread
//! whose name the file holds gets a `thread_name` metadata event.
//!
//! The stacks of stack probes are a timeline too, as viewers draw one
//! only of complete events (speedscope finds a file of instant events
//! alone "empty"): each frame of a thread's stack is a complete event
//! (category `stack`) from the record where it appears to the next of the
//! thread's stack records where it is gone, the frames a stack shares
//! with the one before merged into one event; those of the thread's last
//! stack last until the file's last record.
//!
//! A file can hold millions of records: each event is written straight
//! into the buffered output, with nothing allocated per record but the
//! text of a String argument that is not UTF-8.

use super::folded::cleaned;
use super::threads::ThreadNames;
use crate::records::Args;
use crate::Trace;
use serde_json::ser::{CompactFormatter, Formatter};
use stapsdt::ring::{Arg, Context, ProbeEntry};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write};

pub fn write<W: Write>(traces: &[Trace], names: &ThreadNames, out: &mut W) -> io::Result<()> {
    let mut events = Events {
        names,
        out,
        first: true,
        float_text: String::new(),
    };
    events.out.write_all(b"{\"traceEvents\":[\n")?;
    for trace in traces {
        events.trace(trace)?;
    }
    events.out.write_all(b"\n],\"displayTimeUnit\":\"ns\"}\n")
}

struct Events<'a, W: Write> {
    names: &'a ThreadNames,
    out: &'a mut W,
    first: bool,
    /// Where a Float's shortest digits are found: reused, as there can be
    /// millions of Floats too.
    float_text: String,
}

impl<W: Write> Events<'_, W> {
    fn trace(&mut self, trace: &Trace) -> io::Result<()> {
        let pid = trace.header.pid;
        self.start()?;
        self.out
            .write_all(b"{\"name\":\"process_name\",\"ph\":\"M\",\"ts\":0,\"pid\":")?;
        CompactFormatter.write_u64(self.out, pid)?;
        self.out
            .write_all(b",\"tid\":0,\"args\":{\"name\":\"ruby ")?;
        CompactFormatter.write_u64(self.out, pid)?;
        self.out.write_all(b"\"}}")?;
        for (tid, name) in self.names.of_process(trace) {
            self.start()?;
            self.out
                .write_all(b"{\"name\":\"thread_name\",\"ph\":\"M\",\"ts\":0,\"pid\":")?;
            CompactFormatter.write_u64(self.out, pid)?;
            self.out.write_all(b",\"tid\":")?;
            CompactFormatter.write_u32(self.out, tid)?;
            self.out.write_all(b",\"args\":{\"name\":")?;
            json_string(self.out, name)?;
            self.out.write_all(b"}}")?;
        }

        let prefixes: Vec<Vec<u8>> = trace.probes.iter().map(prefix).collect();
        let latency_args: Vec<Option<usize>> = trace
            .probes
            .iter()
            .map(|probe| probe.latency_arg.map(usize::from))
            .collect();
        // The wall-clock time of the file's clock at 0, added to each
        // record's; exact, whatever the anchors.
        let epoch = i128::from(trace.header.anchor_realtime_ns)
            - i128::from(trace.header.anchor_monotonic_ns);
        let stack_args: Vec<Option<usize>> = trace
            .probes
            .iter()
            .map(|probe| probe.stack_arg.map(usize::from))
            .collect();
        let mut stacks: HashMap<u32, Vec<OpenFrame<'_>>> = HashMap::new();
        for record in &trace.records {
            let position = record.probe as usize;
            let time = epoch + i128::from(record.time_ns);
            if let Some(Some(Arg::Str(stack))) = stack_args[position].map(|arg| record.arg(arg)) {
                let open = stacks.entry(record.tid).or_default();
                self.stack(pid, record.tid, open, stack, time)?;
            }
            self.start()?;
            self.out.write_all(&prefixes[position])?;
            let latency_arg = latency_args[position];
            match latency_arg {
                Some(arg) => {
                    // The reader checked that it is an Integer; a negative
                    // latency (the process fired one) lasts nothing.
                    let latency = match record.arg(arg) {
                        Some(Arg::Int(latency)) => i128::from(latency.max(0)),
                        _ => 0,
                    };
                    self.out.write_all(b",\"ts\":")?;
                    self.micros(time - latency)?;
                    self.out.write_all(b",\"dur\":")?;
                    self.micros(latency)?;
                }
                None => {
                    self.out.write_all(b",\"ts\":")?;
                    self.micros(time)?;
                }
            }
            self.out.write_all(b",\"pid\":")?;
            CompactFormatter.write_u64(self.out, pid)?;
            self.out.write_all(b",\"tid\":")?;
            CompactFormatter.write_u32(self.out, record.tid)?;
            self.out.write_all(b",\"args\":{")?;
            self.arguments(record.args(), latency_arg)?;
            self.context(
                &record.context,
                record.args().len() > usize::from(latency_arg.is_some()),
            )?;
            self.out.write_all(b"}}")?;
        }
        if !stacks.is_empty() {
            let last = trace.records.iter().map(|record| record.time_ns).max();
            let end = epoch + i128::from(last.unwrap_or_default());
            let mut threads: Vec<(u32, Vec<OpenFrame<'_>>)> = stacks.into_iter().collect();
            threads.sort_unstable_by_key(|&(tid, _)| tid);
            for (tid, mut open) in threads {
                self.close_frames(pid, tid, &mut open, 0, end)?;
            }
        }
        Ok(())
    }

    /// Moves thread `tid`'s timeline of stacks to `stack`, recorded at
    /// `time`: closes the frames of the stack before that it does not
    /// share, opens its own.
    fn stack<'s>(
        &mut self,
        pid: u64,
        tid: u32,
        open: &mut Vec<OpenFrame<'s>>,
        stack: &'s [u8],
        time: i128,
    ) -> io::Result<()> {
        let frames = || stack.split(|&byte| byte == b';');
        let shared = open
            .iter()
            .zip(frames())
            .take_while(|(open, frame)| open.name == *frame)
            .count();
        self.close_frames(pid, tid, open, shared, time)?;
        if !stack.is_empty() {
            open.extend(
                frames()
                    .skip(shared)
                    .map(|name| OpenFrame { name, start: time }),
            );
        }
        Ok(())
    }

    /// Ends the frames of `open` past the first `keep` at `end`, innermost
    /// first, each a complete event.
    fn close_frames(
        &mut self,
        pid: u64,
        tid: u32,
        open: &mut Vec<OpenFrame<'_>>,
        keep: usize,
        end: i128,
    ) -> io::Result<()> {
        while open.len() > keep {
            let frame = open.pop().expect("more than keep frames");
            self.start()?;
            self.out.write_all(b"{\"name\":")?;
            json_string(self.out, &cleaned(frame.name))?;
            self.out
                .write_all(b",\"cat\":\"stack\",\"ph\":\"X\",\"ts\":")?;
            self.micros(frame.start)?;
            self.out.write_all(b",\"dur\":")?;
            self.micros(end - frame.start)?;
            self.out.write_all(b",\"pid\":")?;
            CompactFormatter.write_u64(self.out, pid)?;
            self.out.write_all(b",\"tid\":")?;
            CompactFormatter.write_u32(self.out, tid)?;
            self.out.write_all(b",\"args\":{}}")?;
        }
        Ok(())
    }

    /// Events are separated, not terminated, by ",\n".
    fn start(&mut self) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        Ok(())
    }

    /// A record's trace context among its args: `"trace_id"` and
    /// `"span_id"` (hex) when known, `"trace_context":"unknown"` when its
    /// context record was not read, nothing outside any; after a comma
    /// when `after_others`.
    fn context(&mut self, context: &Context, after_others: bool) -> io::Result<()> {
        let comma: &[u8] = if after_others { b"," } else { b"" };
        match context {
            Context::None => Ok(()),
            Context::Unknown => {
                self.out.write_all(comma)?;
                self.out.write_all(b"\"trace_context\":\"unknown\"")
            }
            Context::Known(context) => {
                self.out.write_all(comma)?;
                write!(
                    self.out,
                    "\"trace_id\":\"{}\",\"span_id\":\"{}\"",
                    context.trace_hex(),
                    context.span_hex()
                )
            }
        }
    }

    /// `"arg0":value,...` by the arguments' positions, but the one left out.
    fn arguments(&mut self, args: Args<'_>, left_out: Option<usize>) -> io::Result<()> {
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
        Ok(())
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

    /// Nanoseconds as microseconds with three decimals: exact.
    fn micros(&mut self, nanoseconds: i128) -> io::Result<()> {
        if nanoseconds < 0 {
            self.out.write_all(b"-")?;
        }
        let magnitude = nanoseconds.unsigned_abs();
        CompactFormatter.write_u128(self.out, magnitude / 1000)?;
        let fraction = magnitude % 1000;
        let digit = |place: u128| b'0' + (fraction / place % 10) as u8;
        self.out.write_all(&[b'.', digit(100), digit(10), digit(1)])
    }
}

/// A frame of a thread's stack as the timeline has it: its bytes in the
/// record, and since when it has been on the stack.
struct OpenFrame<'a> {
    name: &'a [u8],
    start: i128,
}

/// The start of each event of `probe`'s records, to its phase.
fn prefix(probe: &ProbeEntry) -> Vec<u8> {
    let mut prefix = b"{\"name\":".to_vec();
    let label = format!("{}:{}", probe.provider, probe.name);
    // Writing into a Vec cannot fail.
    json_string(&mut prefix, &label).expect("writing to a Vec");
    prefix.extend_from_slice(b",\"cat\":");
    json_string(&mut prefix, &probe.provider).expect("writing to a Vec");
    prefix.extend_from_slice(if probe.latency_arg.is_some() {
        b",\"ph\":\"X\""
    } else {
        b",\"ph\":\"i\",\"s\":\"t\""
    });
    prefix
}

/// `text` as a JSON string, as Ruby's JSON.generate writes it (control
/// characters escaped, the rest as UTF-8).
fn json_string(out: &mut (impl Write + ?Sized), text: &str) -> io::Result<()> {
    serde_json::to_writer(out, text).map_err(io::Error::from)
}

/// A finite float as Ruby's `Float#to_s` writes it: its shortest digits
/// that read back as it, in fixed notation with at least one decimal from
/// 0.0001 up to 16 digits before the point (15 when no digit follows it),
/// and as `1.5e-07` or `1.0e+20` beyond. Any JSON number would do; the text
/// Ruby wrote keeps reports made before and after comparable with diff.
fn write_ruby_float(out: &mut impl Write, value: f64, scratch: &mut String) -> io::Result<()> {
    // Ruby's DBL_DIG: how many digits before the point are shown fixed.
    const DBL_DIG: usize = 15;
    const ZEROS: &[u8] = b"000000000000000000000000";
    scratch.clear();
    write!(scratch, "{value:e}").expect("writing to a String");
    let (mantissa, exponent) = scratch.split_once('e').expect("{:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("{:e} has a decimal exponent");
    let mut buffer = [0u8; MAX_DIGITS];
    let mut count = 0;
    for digit in mantissa.bytes().filter(u8::is_ascii_digit) {
        buffer[count] = digit;
        count += 1;
    }
    even_at_a_tie(&mut buffer[..count], exponent, value);
    let digits = &buffer[..count];
    if mantissa.starts_with('-') {
        out.write_all(b"-")?;
    }
    // The point goes after `point` digits (before them, if not positive).
    let point = exponent + 1;
    match usize::try_from(point) {
        Ok(point) if point > 0 && point <= DBL_DIG + 1 && point < count => {
            out.write_all(&digits[..point])?;
            out.write_all(b".")?;
            out.write_all(&digits[point..])
        }
        Ok(point) if point > 0 && point <= DBL_DIG => {
            out.write_all(digits)?;
            out.write_all(&ZEROS[..point - count])?;
            out.write_all(b".0")
        }
        _ if point <= 0 && point > -4 => {
            out.write_all(b"0.")?;
            out.write_all(&ZEROS[..point.unsigned_abs() as usize])?;
            out.write_all(digits)
        }
        _ => {
            out.write_all(&digits[..1])?;
            out.write_all(b".")?;
            out.write_all(if count > 1 { &digits[1..] } else { b"0" })?;
            write!(out, "e{:+03}", point - 1)
        }
    }
}

/// The most significant digits an f64 needs to read back as itself.
const MAX_DIGITS: usize = 17;

/// When `value` lies exactly halfway between two numbers of as many
/// significant digits as its shortest `digits` (the first of them
/// `exponent` places before the point's), and both read back as it, Ruby
/// shows the one whose last digit is even; Rust's shortest digits take the
/// larger. 81395800798160.125 is "81395800798160.12" in Ruby.
fn even_at_a_tie(digits: &mut [u8], exponent: i32, value: f64) {
    let shown = digits
        .iter()
        .fold(0u64, |number, digit| number * 10 + u64::from(digit - b'0'));
    // The halfway point has one digit more, a 5.
    let place = exponent - digits.len() as i32;
    for below in [shown.checked_sub(1), Some(shown)].into_iter().flatten() {
        if !equals_decimal(value.abs(), below * 10 + 5, place) {
            continue;
        }
        let even = below + below % 2;
        let text = even.to_string();
        if text.len() == digits.len() && reads_back(&text, exponent, value) {
            digits.copy_from_slice(text.as_bytes());
        }
        return;
    }
}

/// Whether `value` (finite, not negative) is exactly `decimal` (odd)
/// times 10^`place`: whether their odd parts and their powers of two are
/// the same.
fn equals_decimal(value: f64, decimal: u64, place: i32) -> bool {
    let bits = value.to_bits();
    let biased = (bits >> 52) as i32;
    let fraction = bits & ((1 << 52) - 1);
    // value = mantissa * 2^binary
    let (mantissa, binary) = if biased == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1 << 52), biased - 1075)
    };
    if mantissa == 0 {
        return false;
    }
    let twos = mantissa.trailing_zeros();
    let odd = u128::from(mantissa >> twos);
    if binary + twos as i32 != place {
        return false;
    }
    // decimal * 10^place = decimal * 5^place * 2^place
    let fives = |power: i32| 5u128.checked_pow(power.unsigned_abs());
    if place >= 0 {
        fives(place).and_then(|five| five.checked_mul(u128::from(decimal))) == Some(odd)
    } else {
        fives(place).and_then(|five| five.checked_mul(odd)) == Some(u128::from(decimal))
    }
}

/// Whether `digits`, with the point after the first and `exponent`, read
/// back as `value`'s magnitude.
fn reads_back(digits: &str, exponent: i32, value: f64) -> bool {
    let (first, rest) = digits.split_at(1);
    let text = format!("{first}.{rest}e{exponent}");
    text.parse::<f64>().map(f64::to_bits) == Ok(value.abs().to_bits())
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use stapsdt::ring::{Record, Value};
    use stapsdt::ArgType;

    fn chrome(traces: &[Trace]) -> String {
        let mut out = Vec::new();
        write(traces, &ThreadNames::default(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn hits(text: &[u8], number: i64, float: f64, time_ns: u64, tid: u32) -> Record {
        let args = vec![
            Value::Str(text.to_vec()),
            Value::Int(number),
            Value::Float(float),
        ];
        record(1, args, time_ns, tid)
    }

    #[test]
    fn writes_what_the_ruby_report_wrote() {
        let mut records = calls(&[2_500_001, -3]);
        records.push(hits(
            b"a \"quoted\"\nline",
            i64::MIN,
            f64::NAN,
            9_000_123,
            8,
        ));
        records.push(record(
            2,
            vec![Value::Str(b"main;work".to_vec())],
            9_500_000,
            8,
        ));
        // Not UTF-8: a byte that begins nothing, and a character cut short.
        let awkward = [b"bad \xFF\xE3\x81 ", "\u{2028}".as_bytes(), b" \x01\x7F/"].concat();
        records.push(hits(&awkward, i64::MAX, 1.0e20, 9_600_000, 9));
        records.push(hits(b"", 0, f64::NEG_INFINITY, 9_700_000, 9));
        let first = trace("a.trace", standard_probes(), records);
        let mut second = trace("b.trace", standard_probes(), calls(&[1]));
        second.header.pid = 9;
        // What the Ruby report wrote for these, and the stack's frames as
        // complete events, which it did not write.
        let ruby = "{\"traceEvents\":[\n\
            {\"name\":\"process_name\",\"ph\":\"M\",\"ts\":0,\"pid\":4321,\"tid\":0,\"args\":{\"name\":\"ruby 4321\"}},\n\
            {\"name\":\"my_controller:index\",\"cat\":\"my_controller\",\"ph\":\"X\",\"ts\":1699999999998499.999,\
            \"dur\":2500.001,\"pid\":4321,\"tid\":7,\"args\":{}},\n\
            {\"name\":\"my_controller:index\",\"cat\":\"my_controller\",\"ph\":\"X\",\"ts\":1700000000001001.000,\
            \"dur\":0.000,\"pid\":4321,\"tid\":7,\"args\":{}},\n\
            {\"name\":\"app:hits\",\"cat\":\"app\",\"ph\":\"i\",\"s\":\"t\",\"ts\":1700000000009000.123,\"pid\":4321,\
            \"tid\":8,\"args\":{\"arg0\":\"a \\\"quoted\\\"\\nline\",\"arg1\":-9223372036854775808,\"arg2\":\"NaN\"}},\n\
            {\"name\":\"my_controller_stack:index\",\"cat\":\"my_controller_stack\",\"ph\":\"i\",\"s\":\"t\",\
            \"ts\":1700000000009500.000,\"pid\":4321,\"tid\":8,\"args\":{\"arg0\":\"main;work\"}},\n\
            {\"name\":\"app:hits\",\"cat\":\"app\",\"ph\":\"i\",\"s\":\"t\",\"ts\":1700000000009600.000,\"pid\":4321,\
            \"tid\":9,\"args\":{\"arg0\":\"bad \u{fffd}\u{fffd} \u{2028} \\u0001\u{7f}/\",\"arg1\":9223372036854775807,\
            \"arg2\":1.0e+20}},\n\
            {\"name\":\"app:hits\",\"cat\":\"app\",\"ph\":\"i\",\"s\":\"t\",\"ts\":1700000000009700.000,\"pid\":4321,\
            \"tid\":9,\"args\":{\"arg0\":\"\",\"arg1\":0,\"arg2\":\"-Infinity\"}},\n\
            {\"name\":\"work\",\"cat\":\"stack\",\"ph\":\"X\",\"ts\":1700000000009500.000,\"dur\":200.000,\
            \"pid\":4321,\"tid\":8,\"args\":{}},\n\
            {\"name\":\"main\",\"cat\":\"stack\",\"ph\":\"X\",\"ts\":1700000000009500.000,\"dur\":200.000,\
            \"pid\":4321,\"tid\":8,\"args\":{}},\n\
            {\"name\":\"process_name\",\"ph\":\"M\",\"ts\":0,\"pid\":9,\"tid\":0,\"args\":{\"name\":\"ruby 9\"}},\n\
            {\"name\":\"my_controller:index\",\"cat\":\"my_controller\",\"ph\":\"X\",\"ts\":1700000000000999.999,\
            \"dur\":0.001,\"pid\":9,\"tid\":7,\"args\":{}}\n\
            ],\"displayTimeUnit\":\"ns\"}\n";
        let written = chrome(&[first, second]);
        assert_eq!(written, ruby);
        serde_json::from_str::<serde_json::Value>(&written).unwrap();
    }

    #[test]
    fn leaves_the_latency_out_of_a_calls_arguments_and_keeps_the_others() {
        let types = vec![ArgType::String, ArgType::Int64, ArgType::Float64];
        let timed = probe(0, "db", "query", types, Some(1), None);
        let args = vec![
            Value::Str(b"SELECT 1".to_vec()),
            Value::Int(2_000),
            Value::Float(0.25),
        ];
        let written = chrome(&[trace(
            "a.trace",
            vec![timed],
            vec![record(0, args, 5_000, 3)],
        )]);
        assert!(written.contains(
            "{\"name\":\"db:query\",\"cat\":\"db\",\"ph\":\"X\",\"ts\":1700000000000003.000,\"dur\":2.000,\
             \"pid\":4321,\"tid\":3,\"args\":{\"arg0\":\"SELECT 1\",\"arg2\":0.25}}\n"
        ));
    }

    #[test]
    fn writes_times_before_the_epoch_and_past_64_bits_exactly() {
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
        assert!(written.contains("\"ts\":-1.500,"));
        assert!(written.contains("\"ts\":-0.500,"));
        // i64::MAX + u64::MAX ns, which no 64-bit integer holds.
        assert!(written.contains("\"ts\":27670116110564327.422,"));
    }

    #[test]
    // The ties are written out exactly, to every digit of their binary value.
    #[allow(clippy::excessive_precision)]
    fn writes_floats_as_rubys_float_to_s() {
        // What Ruby's Float#to_s returned for each value.
        let ruby: [(f64, &str); 28] = [
            (0.25, "0.25"),
            (1.0e20, "1.0e+20"),
            (1e15, "1.0e+15"),
            (1e16, "1.0e+16"),
            (1e-4, "0.0001"),
            (1e-5, "1.0e-05"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (0.1, "0.1"),
            (123456789012345.6, "123456789012345.6"),
            (1234567890123456.8, "1234567890123456.8"),
            (1234567890123456.0, "1.234567890123456e+15"),
            (5e-324, "5.0e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (100.0, "100.0"),
            (1.5e-7, "1.5e-07"),
            (9007199254740993.0, "9.007199254740992e+15"),
            (100000000000000.0, "100000000000000.0"),
            (-2.5e-300, "-2.5e-300"),
            (0.001, "0.001"),
            (1673424096320954.25, "1673424096320954.2"),
            (-110329936768328.625, "-110329936768328.62"),
            (110329936768328.875, "110329936768328.88"),
            (0.30000000000000004, "0.30000000000000004"),
            (81395800798160.125, "81395800798160.12"),
            (-9708747456522.0625, "-9708747456522.062"),
            (2.5, "2.5"),
            (1.5e17, "1.5e+17"),
        ];
        let mut scratch = String::new();
        for (value, shown) in ruby {
            let mut out = Vec::new();
            write_ruby_float(&mut out, value, &mut scratch).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), shown, "{value:e}");
            assert_eq!(shown.parse::<f64>().unwrap().to_bits(), value.to_bits());
        }
    }

    #[test]
    fn gives_a_records_trace_context_among_its_args() {
        use stapsdt::ring::Context;
        use stapsdt::trace_context::TraceContext;
        let a = TraceContext::from_hex(b"4bf92f3577b34da6a3ce929d0e0e4736", b"00f067aa0ba902b7")
            .unwrap();
        let mut records = calls(&[1500, 2500, 700]);
        records[0].context = Context::Known(a);
        records[1].context = Context::Unknown;
        let mut hits = hits_record("x", 3_000_000);
        hits.context = Context::Known(a);
        records.push(hits);
        let written = chrome(&[trace("a.trace", standard_probes(), records)]);
        let document: serde_json::Value = serde_json::from_str(&written).unwrap();
        let args: Vec<&serde_json::Value> = document["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .skip(1)
            .map(|event| &event["args"])
            .collect();
        assert_eq!(
            args,
            [
                &serde_json::json!({"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"}),
                &serde_json::json!({"trace_context": "unknown"}),
                &serde_json::json!({}),
                &serde_json::json!({"arg0": "x", "arg1": 1, "arg2": 0.5,
                    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"}),
            ]
        );
    }
}
