//! A file's records held for the reports: one after another in one
//! buffer, each as its sequence number, time, probe id, thread and trace
//! context (an index into a table of the file's contexts), then its
//! arguments as the ring encodes them (an Integer or a Float in 8 bytes, a
//! String as its 2-byte length and its bytes), without the slots' stamps
//! and padding. A million one-Integer records take 32 MB, as many bytes as
//! their slots in the file, in one allocation: held decoded, each with a
//! vector of its own, they took six times as much, a million allocations
//! to make and as many to free. A report decodes one record at a time as
//! it goes, its Strings borrowed from the buffer.

use stapsdt::ring::format::{slots_for, STAMP_SHIFT, STRING_LENGTH};
use stapsdt::ring::{Arg, Context, ProbeEntry, Record, Slot, Value};
use stapsdt::trace_context::TraceContext;
use stapsdt::ArgType;
use std::collections::HashMap;
use std::fmt;

/// Sequence number, time, probe id, thread and context, before the
/// arguments.
const FIXED: usize = 28;

/// A record's context as held: none, unknown, or `KNOWN` plus its index
/// in `Records::contexts`.
const NO_CONTEXT: u32 = 0;
const UNKNOWN_CONTEXT: u32 = 1;
const KNOWN: u32 = 2;

/// A file's records, in the order pushed: sequence order once
/// [`Records::sort`] has run.
#[derive(Clone, Default)]
pub struct Records {
    bytes: Vec<u8>,
    len: usize,
    /// By probe id: what a record's arguments are.
    layouts: Vec<Layout>,
    /// Some record came before one of a lower sequence number.
    unsorted: bool,
    last_seq: u64,
    /// The trace contexts the records were made in, each once.
    contexts: Vec<TraceContext>,
    context_index: HashMap<TraceContext, u32>,
    /// Context records read: not held (their contexts are, on the records
    /// made in them), but read, not lost.
    context_records: u64,
}

#[derive(Clone, Debug)]
struct Layout {
    types: Vec<ArgType>,
    /// The arguments' bytes when none is a String: every record of the
    /// probe is skipped over at once.
    fixed_len: Option<usize>,
}

impl Records {
    /// Records of the probes of `probes` (a file's table, by id).
    pub fn new(probes: &[ProbeEntry]) -> Records {
        let layouts = probes
            .iter()
            .map(|probe| Layout {
                types: probe.types.clone(),
                fixed_len: (!probe.types.contains(&ArgType::String))
                    .then_some(8 * probe.types.len()),
            })
            .collect();
        Records {
            layouts,
            ..Records::default()
        }
    }

    /// Holds `record`, whose probe id and arguments the reader checked
    /// against the probe table this was made with; a context record is
    /// counted, not held.
    pub fn push(&mut self, record: &Record) {
        if record.is_context() {
            self.context_records += 1;
            return;
        }
        debug_assert!(self.fits(record), "{record:?}");
        if self.len > 0 && record.seq < self.last_seq {
            self.unsorted = true;
        }
        self.last_seq = record.seq;
        self.len += 1;
        let bytes = &mut self.bytes;
        bytes.extend_from_slice(&record.seq.to_le_bytes());
        bytes.extend_from_slice(&record.time_ns.to_le_bytes());
        bytes.extend_from_slice(&record.probe.to_le_bytes());
        bytes.extend_from_slice(&record.tid.to_le_bytes());
        let context = self.context_number(&record.context);
        let bytes = &mut self.bytes;
        bytes.extend_from_slice(&context.to_le_bytes());
        for arg in &record.args {
            match arg {
                Value::Int(value) => bytes.extend_from_slice(&value.to_le_bytes()),
                Value::Float(value) => bytes.extend_from_slice(&value.to_le_bytes()),
                Value::Str(text) => {
                    // At most max_string bytes, which the file gives in 16 bits.
                    bytes.extend_from_slice(&(text.len() as u16).to_le_bytes());
                    bytes.extend_from_slice(text);
                }
            }
        }
    }

    /// The number a record made in `context` holds.
    fn context_number(&mut self, context: &Context) -> u32 {
        match context {
            Context::None => NO_CONTEXT,
            Context::Unknown => UNKNOWN_CONTEXT,
            Context::Known(context) => {
                let next = self.contexts.len() as u32;
                let index = *self.context_index.entry(*context).or_insert(next);
                if index == next {
                    self.contexts.push(*context);
                }
                KNOWN + index
            }
        }
    }

    /// Holds a record read as its first slot says (its sequence number's
    /// 48 bits, time, probe and thread) and its payload, whose arguments
    /// the reader checked against the probe table this was made with.
    /// Slots carry no resolved context: the record is held as made in
    /// an unknown one (a context record is left out).
    pub fn push_slots(&mut self, first: Slot<'_>, payload: &[u8]) {
        let Some(layout) = self.layouts.get(first.probe() as usize) else {
            return;
        };
        let len = layout
            .fixed_len
            .unwrap_or_else(|| args_len(&layout.types, payload));
        self.len += 1;
        self.bytes
            .extend_from_slice(&(first.stamp() >> STAMP_SHIFT).to_le_bytes());
        self.bytes.extend_from_slice(&first.time_ns().to_le_bytes());
        self.bytes.extend_from_slice(&first.probe().to_le_bytes());
        self.bytes.extend_from_slice(&first.tid().to_le_bytes());
        let context = if first.tag() == stapsdt::ring::format::NO_CONTEXT {
            NO_CONTEXT
        } else {
            UNKNOWN_CONTEXT
        };
        self.bytes.extend_from_slice(&context.to_le_bytes());
        self.bytes.extend_from_slice(&payload[..len]);
    }

    /// The record's probe is known, and its arguments are of its types.
    fn fits(&self, record: &Record) -> bool {
        let Some(layout) = self.layouts.get(record.probe as usize) else {
            return false;
        };
        layout.types.len() == record.args.len()
            && layout
                .types
                .iter()
                .zip(&record.args)
                .all(|(arg, value)| match (arg, value) {
                    (ArgType::Int64, Value::Int(_)) | (ArgType::Float64, Value::Float(_)) => true,
                    (ArgType::String, Value::Str(text)) => text.len() <= usize::from(u16::MAX),
                    _ => false,
                })
    }

    /// Puts the records in sequence order, as [`scan::read`] does: they
    /// come out of it only when one was written a lap late, over a newer
    /// one's slot, so this rarely moves anything.
    ///
    /// [`scan::read`]: stapsdt::ring::scan::read
    pub fn sort(&mut self) {
        if !self.unsorted {
            return;
        }
        let mut spans: Vec<(u64, usize, usize)> = Vec::with_capacity(self.len);
        let mut records = self.iter();
        let mut start = 0;
        while let Some(record) = records.next() {
            spans.push((record.seq, start, records.at));
            start = records.at;
        }
        // Stable, as Vec::sort_by_key: records of one sequence number (a
        // hostile file's) keep their order.
        spans.sort_by_key(|&(seq, ..)| seq);
        let mut sorted = Vec::with_capacity(self.bytes.len());
        for (_, start, end) in spans {
            sorted.extend_from_slice(&self.bytes[start..end]);
        }
        self.bytes = sorted;
        self.unsorted = false;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Context records read (not held: see [`Records::push`]).
    pub fn context_records(&self) -> u64 {
        self.context_records
    }

    /// Bytes held.
    pub fn held_bytes(&self) -> usize {
        self.bytes.len()
    }

    pub fn iter(&self) -> Iter<'_> {
        Iter {
            records: self,
            at: 0,
            left: self.len,
        }
    }
}

impl fmt::Debug for Records {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a Records {
    type Item = RecordRef<'a>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The records, decoded one at a time.
pub struct Iter<'a> {
    records: &'a Records,
    /// Where the next record starts in the buffer.
    at: usize,
    left: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = RecordRef<'a>;

    fn next(&mut self) -> Option<RecordRef<'a>> {
        let bytes = &self.records.bytes[self.at..];
        if bytes.len() < FIXED {
            return None;
        }
        let probe = u32_at(bytes, 16);
        let layout = &self.records.layouts[probe as usize];
        let args = &bytes[FIXED..];
        let args_len = layout
            .fixed_len
            .unwrap_or_else(|| args_len(&layout.types, args));
        self.at += FIXED + args_len;
        self.left -= 1;
        Some(RecordRef {
            seq: u64_at(bytes, 0),
            time_ns: u64_at(bytes, 8),
            probe,
            tid: u32_at(bytes, 20),
            context: match u32_at(bytes, 24) {
                NO_CONTEXT => Context::None,
                UNKNOWN_CONTEXT => Context::Unknown,
                known => Context::Known(self.records.contexts[(known - KNOWN) as usize]),
            },
            types: &layout.types,
            args: &args[..args_len],
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

/// The length of the arguments of `types` at the start of `bytes`.
fn args_len(types: &[ArgType], bytes: &[u8]) -> usize {
    types.iter().fold(0, |at, arg| match arg {
        ArgType::Int64 | ArgType::Float64 => at + 8,
        ArgType::String => at + STRING_LENGTH + usize::from(u16_at(bytes, at)),
    })
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap())
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// A record held, as [`Record`] but for its arguments, which are read
/// from the buffer when asked for.
#[derive(Clone, Copy)]
pub struct RecordRef<'a> {
    /// Its first slot's sequence number.
    pub seq: u64,
    pub time_ns: u64,
    /// Its probe's id (an index into `Trace::probes`).
    pub probe: u32,
    pub tid: u32,
    /// The trace context it was made in.
    pub context: Context,
    types: &'a [ArgType],
    args: &'a [u8],
}

impl<'a> RecordRef<'a> {
    pub fn args(&self) -> Args<'a> {
        Args {
            types: self.types.iter(),
            bytes: self.args,
        }
    }

    /// The argument at `index`, if the probe has one there.
    pub fn arg(&self, index: usize) -> Option<Arg<'a>> {
        self.args().nth(index)
    }

    /// The record as the reader gave it, its arguments copied out.
    pub fn to_record(&self) -> Record {
        Record {
            seq: self.seq,
            // The reader took only records whose slots its arguments fill.
            slots: slots_for(self.args.len()),
            time_ns: self.time_ns,
            probe: self.probe,
            tid: self.tid,
            // The tag is not held: the context it named is.
            tag: 0,
            context: self.context,
            args: self
                .args()
                .map(|arg| match arg {
                    Arg::Int(value) => Value::Int(value),
                    Arg::Float(value) => Value::Float(value),
                    Arg::Str(text) => Value::Str(text.to_vec()),
                })
                .collect(),
        }
    }
}

impl fmt::Debug for RecordRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordRef")
            .field("seq", &self.seq)
            .field("time_ns", &self.time_ns)
            .field("probe", &self.probe)
            .field("tid", &self.tid)
            .field("args", &self.args().collect::<Vec<_>>())
            .finish()
    }
}

/// A record's arguments, in order, decoded as they are asked for.
#[derive(Clone)]
pub struct Args<'a> {
    types: std::slice::Iter<'a, ArgType>,
    bytes: &'a [u8],
}

impl<'a> Iterator for Args<'a> {
    type Item = Arg<'a>;

    fn next(&mut self) -> Option<Arg<'a>> {
        let arg = *self.types.next()?;
        let (value, rest) = match arg {
            ArgType::Int64 | ArgType::Float64 => {
                let (value, rest) = self.bytes.split_at(8);
                let value = value.try_into().unwrap();
                let value = match arg {
                    ArgType::Int64 => Arg::Int(i64::from_le_bytes(value)),
                    _ => Arg::Float(f64::from_le_bytes(value)),
                };
                (value, rest)
            }
            ArgType::String => {
                let len = usize::from(u16_at(self.bytes, 0));
                let (text, rest) = self.bytes[STRING_LENGTH..].split_at(len);
                (Arg::Str(text), rest)
            }
        };
        self.bytes = rest;
        Some(value)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.types.size_hint()
    }
}

impl ExactSizeIterator for Args<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testing::{hits_probe, index_probe, record, stack_probe};

    fn held(records: &Records) -> Vec<Record> {
        records.iter().map(|record| record.to_record()).collect()
    }

    /// `record` numbered `seq`, of the slots its arguments fill.
    fn numbered(seq: u64, mut record: Record) -> Record {
        let payload = record.args.iter().map(|arg| match arg {
            Value::Int(_) | Value::Float(_) => 8,
            Value::Str(text) => STRING_LENGTH + text.len(),
        });
        record.seq = seq;
        record.slots = slots_for(payload.sum());
        record
    }

    #[test]
    fn gives_back_every_record_as_it_was_pushed() {
        let probes = [index_probe(0), hits_probe(1), stack_probe(2)];
        let long = vec![b'x'; usize::from(u16::MAX)];
        let pushed = vec![
            numbered(0, record(0, vec![Value::Int(i64::MIN)], u64::MAX, u32::MAX)),
            numbered(
                1,
                record(
                    1,
                    vec![
                        Value::Str(b"a\xFFb".to_vec()),
                        Value::Int(-1),
                        Value::Float(f64::NEG_INFINITY),
                    ],
                    5,
                    7,
                ),
            ),
            numbered(9, record(2, vec![Value::Str(Vec::new())], 6, 8)),
            numbered(u64::MAX, record(2, vec![Value::Str(long)], 7, 9)),
        ];
        let mut records = Records::new(&probes);
        for record in &pushed {
            records.push(record);
        }
        records.sort();
        assert_eq!(records.len(), 4);
        assert_eq!(records.iter().len(), 4);
        assert_eq!(held(&records), pushed);
        let hits = records.iter().nth(1).unwrap();
        assert_eq!(hits.arg(2), Some(Arg::Float(f64::NEG_INFINITY)));
        assert_eq!(hits.arg(3), None);
        // The fixed fields, and the arguments without stamps or padding.
        assert_eq!(
            records.held_bytes(),
            4 * FIXED + 8 + (5 + 8 + 8) + 2 + 2 + 65535
        );
    }

    #[test]
    fn sorts_a_record_written_a_lap_late_into_sequence_order() {
        let probes = [index_probe(0), stack_probe(1)];
        let call = |seq: u64| numbered(seq, record(0, vec![Value::Int(seq as i64)], seq, 1));
        let stack = |seq: u64, text: &[u8]| {
            numbered(seq, record(1, vec![Value::Str(text.to_vec())], seq, 1))
        };
        let pushed = [call(4), stack(2, b"two"), call(6), stack(3, b"three")];
        let mut records = Records::new(&probes);
        for record in &pushed {
            records.push(record);
        }
        records.sort();
        let seqs: Vec<u64> = records.iter().map(|record| record.seq).collect();
        assert_eq!(seqs, [2, 3, 4, 6]);
        let mut expected = pushed.to_vec();
        expected.sort_by_key(|record| record.seq);
        assert_eq!(held(&records), expected);
    }

    #[test]
    fn holds_each_records_context_and_counts_context_records_apart() {
        let probes = [index_probe(0)];
        let a = TraceContext::new([1; 16], [2; 8]).unwrap();
        let b = TraceContext::new([3; 16], [4; 8]).unwrap();
        let in_context = |seq: u64, context: Context| {
            let mut record = numbered(seq, record(0, vec![Value::Int(seq as i64)], seq, 7));
            record.context = context;
            record
        };
        let mut switch = record(stapsdt::ring::format::CONTEXT_PROBE, Vec::new(), 0, 7);
        switch.context = Context::Known(a);
        let mut records = Records::new(&probes);
        records.push(&switch);
        let contexts = [
            Context::Known(a),
            Context::None,
            Context::Known(b),
            Context::Unknown,
            Context::Known(a),
        ];
        for (seq, context) in contexts.iter().enumerate() {
            records.push(&in_context(seq as u64, *context));
        }
        assert_eq!((records.len(), records.context_records()), (5, 1));
        let held: Vec<Context> = records.iter().map(|record| record.context).collect();
        assert_eq!(held, contexts);
        // Each context once.
        assert_eq!(records.contexts, [a, b]);
    }

    #[test]
    fn holds_nothing_for_no_records() {
        let records = Records::new(&[index_probe(0)]);
        assert!(records.is_empty());
        assert_eq!(records.iter().next().map(|record| record.seq), None);
        assert_eq!(format!("{records:?}"), "[]");
    }
}
