//! The format's checks, as its one reader (`scan`) makes them on a ring or
//! trace file, which the `static-tracing` command reads through. Each check has
//! its place in a fixed order and its one message, which the hostile
//! corpus (ext/stapsdt/tests/hostile/corpus.txt) holds the Rust tests and
//! the command's specs to alike. Sizes in the file are never trusted: every
//! one is checked against the input before anything is read or allocated
//! by it, so that a hostile file gives an error, never a panic, and
//! allocations stay within a small multiple of the input's length.

use super::contexts::Context;
use super::format::{
    self, decode_entry, decode_stamp, hex, offset, Counters, Header, Stamp, COMPLETE, HEADER_SIZE,
    INDEX_MASK, MAGIC, OLDEST_VERSION, OVERWRITE, PAGE, SLOT_SIZE, STRING_LENGTH, TABLE_OFFSET,
    VERSION,
};
use super::format::{ProbeEntry, Slot, Value, CONTEXT_PROBE, CONTEXT_SLOTS, CONTEXT_TAGS};
use crate::probe::ArgType;
use crate::trace_context::{TraceContext, SPAN_ID_LEN, TRACE_ID_LEN};
use std::fmt;

/// The file breaks the format: the message says where and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatError {
    message: String,
}

impl FormatError {
    pub(super) fn file(message: impl Into<String>) -> FormatError {
        FormatError {
            message: message.into(),
        }
    }

    /// `what`, at `offset` in the file, was not what was `expected`.
    pub(super) fn invalid(
        what: impl fmt::Display,
        offset: u64,
        expected: impl fmt::Display,
        found: impl fmt::Display,
    ) -> FormatError {
        FormatError::file(format!(
            "{what} (offset {offset}): expected {expected}, found {found}"
        ))
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FormatError {}

/// A record read back: a call of a probe, or a context record (its
/// thread's trace context changed: [`Record::is_context`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its first slot's sequence number.
    pub seq: u64,
    pub slots: u64,
    pub time_ns: u64,
    /// Its probe's id (an index into `Trace::probes`), or `CONTEXT_PROBE`
    /// for a context record.
    pub probe: u32,
    pub tid: u32,
    /// Its context tag, as the record holds it (see `format::Maker`).
    pub tag: u32,
    /// A call's arguments; none for a context record.
    pub args: Vec<Value>,
    /// The context a call was made in (once the reader's `Contexts` took
    /// it in); a context record's own.
    pub context: Context,
}

impl Record {
    /// A context record: its thread's context from now on, not a call.
    pub fn is_context(&self) -> bool {
        self.probe == CONTEXT_PROBE
    }
}

/// A ring or trace file read whole.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    pub header: Header,
    pub counters: Counters,
    pub probes: Vec<ProbeEntry>,
    /// In sequence order.
    pub records: Vec<Record>,
}

impl Trace {
    /// Records reserved and not in the file: dropped, overwritten, or
    /// being written while it was read.
    pub fn lost(&self) -> u64 {
        let missing = self
            .counters
            .records
            .saturating_sub(self.records.len() as u64);
        self.counters.dropped.saturating_add(missing)
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// The header of a file of `file_len` bytes whose first bytes (its
/// header's 4096, or all it has) are `bytes`.
pub(super) fn header(bytes: &[u8], file_len: u64) -> Result<Header, FormatError> {
    let truncated = || {
        FormatError::file(format!(
            "truncated: it has {file_len} bytes, less than its {HEADER_SIZE}-byte header"
        ))
    };
    // Too short to tell, but what there is could be ours: cut, not foreign.
    if bytes.len() < MAGIC.len() && MAGIC.starts_with(bytes) {
        return Err(truncated());
    }
    if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
        let found = &bytes[..bytes.len().min(MAGIC.len())];
        return Err(FormatError::file(format!(
            "not a static_tracing ring or trace file: magic (offset 0): expected \"STATRACE\", found {:?}",
            String::from_utf8_lossy(found)
        )));
    }
    if bytes.len() >= 12 {
        let version = u32_at(bytes, offset::VERSION);
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(FormatError::invalid(
                "format version",
                offset::VERSION as u64,
                format!("{OLDEST_VERSION} or {VERSION} (the versions this static-tracing reads)"),
                version,
            ));
        }
    }
    if file_len < HEADER_SIZE || (bytes.len() as u64) < HEADER_SIZE {
        return Err(truncated());
    }
    let field = |name: &str, at: usize, expected: &dyn fmt::Display, found: &dyn fmt::Display| {
        FormatError::invalid(format!("header field {name}"), at as u64, expected, found)
    };
    let header_size = u32_at(bytes, offset::HEADER_SIZE);
    if u64::from(header_size) != HEADER_SIZE {
        return Err(field(
            "header_size",
            offset::HEADER_SIZE,
            &HEADER_SIZE,
            &header_size,
        ));
    }
    let table_offset = u64_at(bytes, offset::TABLE_OFFSET);
    if table_offset != TABLE_OFFSET {
        return Err(field(
            "table_offset",
            offset::TABLE_OFFSET,
            &TABLE_OFFSET,
            &table_offset,
        ));
    }
    let slot_size = u32_at(bytes, offset::SLOT_SIZE);
    if u64::from(slot_size) != SLOT_SIZE {
        return Err(field(
            "slot_size",
            offset::SLOT_SIZE,
            &SLOT_SIZE,
            &slot_size,
        ));
    }
    let reserved = u32_at(bytes, offset::RESERVED);
    if reserved != 0 {
        return Err(field("reserved", offset::RESERVED, &0, &reserved));
    }
    let header = Header {
        version: u32_at(bytes, offset::VERSION),
        table_capacity: u64_at(bytes, offset::TABLE_CAPACITY),
        ring_offset: u64_at(bytes, offset::RING_OFFSET),
        slot_count: u64_at(bytes, offset::SLOT_COUNT),
        flags: u32_at(bytes, offset::FLAGS),
        pid: u64_at(bytes, offset::PID),
        pid_namespace: u64_at(bytes, offset::PID_NAMESPACE),
        anchor_monotonic_ns: u64_at(bytes, offset::ANCHOR_MONOTONIC_NS),
        anchor_realtime_ns: u64_at(bytes, offset::ANCHOR_REALTIME_NS) as i64,
        max_string: u32_at(bytes, offset::MAX_STRING),
    };
    if header.flags & !(OVERWRITE | COMPLETE) != 0 {
        let found = format!("0x{:x}", header.flags);
        return Err(field(
            "flags",
            offset::FLAGS,
            &"no bits but 0 (overwrite) and 1 (complete)",
            &found,
        ));
    }
    if header.table_capacity % 8 != 0 {
        return Err(field(
            "table_capacity",
            offset::TABLE_CAPACITY,
            &"a multiple of 8",
            &header.table_capacity,
        ));
    }
    if HEADER_SIZE.checked_add(header.table_capacity) != Some(header.ring_offset) {
        let expected = format!(
            "table_offset + table_capacity = {}",
            HEADER_SIZE as u128 + u128::from(header.table_capacity)
        );
        return Err(field(
            "ring_offset",
            offset::RING_OFFSET,
            &expected,
            &header.ring_offset,
        ));
    }
    if !header.complete() {
        if header.ring_offset % PAGE != 0 {
            let expected = format!("a multiple of {PAGE} in a ring file");
            return Err(field(
                "ring_offset",
                offset::RING_OFFSET,
                &expected,
                &header.ring_offset,
            ));
        }
        if !header.slot_count.is_power_of_two() {
            return Err(field(
                "slot_count",
                offset::SLOT_COUNT,
                &"a power of two in a ring file",
                &header.slot_count,
            ));
        }
    }
    let slots_end =
        u128::from(header.ring_offset) + u128::from(header.slot_count) * u128::from(SLOT_SIZE);
    if slots_end > u128::from(file_len) {
        return Err(FormatError::file(format!(
            "truncated: its {} slots end at byte {slots_end}, the file has {file_len} bytes",
            header.slot_count
        )));
    }
    Ok(header)
}

pub(super) fn counters(bytes: &[u8], header: &Header) -> Result<Counters, FormatError> {
    let counters = Counters {
        head: u64_at(bytes, offset::HEAD),
        records: u64_at(bytes, offset::RECORDS),
        dropped: u64_at(bytes, offset::DROPPED),
        tail: u64_at(bytes, offset::TAIL),
        table_used: u32_at(bytes, offset::TABLE_USED),
    };
    let used = u64::from(counters.table_used);
    if used > header.table_capacity || used % 8 != 0 {
        return Err(FormatError::invalid(
            "header field table_used",
            offset::TABLE_USED as u64,
            format!(
                "a multiple of 8 at most table_capacity ({})",
                header.table_capacity
            ),
            used,
        ));
    }
    Ok(counters)
}

/// The entries of `table`, the `table_used` bytes from `table_offset`
/// (which header() and counters() put within the file).
pub(super) fn table(table: &[u8]) -> Result<Vec<ProbeEntry>, FormatError> {
    let start = TABLE_OFFSET as usize;
    let table_used = table.len();
    let mut probes = Vec::new();
    let mut at = 0;
    while at < table.len() {
        let id = probes.len();
        let (entry, size) = decode_entry(&table[at..]).map_err(|problem| {
            let what = format!("probe table entry {id} {}", problem.what);
            let expected =
                if problem.what == "entry" || problem.expected.ends_with("before table_used") {
                    format!("{} ({table_used})", problem.expected)
                } else {
                    problem.expected
                };
            FormatError::invalid(
                what,
                (start + at + problem.at) as u64,
                expected,
                problem.found,
            )
        })?;
        probes.push(ProbeEntry {
            // At least 24 bytes an entry in a table of at most 4 GiB.
            id: id as u32,
            provider: entry.provider.to_owned(),
            name: entry.probe.to_owned(),
            types: entry.types().to_vec(),
            latency_arg: entry.latency_arg,
            stack_arg: entry.stack_arg,
        });
        at += size;
    }
    Ok(probes)
}

/// The slots of a file (or of a snapshot's copy), walked as the reader
/// walks them: from the oldest position (head's), each first slot's record
/// taken if its later slots hold it, and every stamp checked.
pub(super) struct Slots<'a> {
    /// Slots of 32 bytes from position `window` on (wrapping past the last
    /// position to the first): every slot of the ring, or a window of them
    /// (see `scan`). A slot outside reads as never written.
    pub(super) area: &'a [u8],
    pub(super) window: u64,
    pub(super) slot_count: u64,
    pub(super) head: u64,
    /// `head` was read before the slots, from a live ring (the cut): a
    /// record of a later sequence number, below `limit`, was written after
    /// it, and is passed over rather than refused.
    pub(super) cut: bool,
    /// What head was when the slots had been read (`head` but for a cut):
    /// a stamp of this sequence number or later breaks the format.
    pub(super) limit: u64,
    /// For messages: where `area` is in the file.
    pub(super) ring_offset: u64,
    pub(super) probes: &'a [ProbeEntry],
    pub(super) max_string: u32,
    /// The file's format version: a version-1 file has no context records
    /// and no context tags.
    pub(super) version: u32,
}

/// A record found whole and valid, by its first slot's position.
pub(super) struct Found {
    pub(super) position: u64,
    pub(super) seq: u64,
    pub(super) slots: u64,
}

enum Step {
    /// Nothing to take here: an empty slot, a later slot, or a record not
    /// whole (being written or overwritten).
    Skip,
    Record(Found),
    /// What the reader refuses the file for.
    Invalid(FormatError),
}

impl Slots<'_> {
    /// Where the slot at `position` is in `area`, if it is there.
    fn at(&self, position: u64) -> Option<usize> {
        // Both below slot_count: no overflow.
        let start = ((position + self.slot_count - self.window) % self.slot_count) * SLOT_SIZE;
        let start = usize::try_from(start).ok()?;
        (start + SLOT_SIZE as usize <= self.area.len()).then_some(start)
    }

    fn stamp(&self, position: u64) -> u64 {
        self.at(position)
            .map_or(0, |start| u64_at(self.area, start))
    }

    /// A slot whose stamp was read: in the area.
    fn slot(&self, position: u64) -> Slot<'_> {
        let start = self.at(position).unwrap_or(self.area.len());
        Slot::at(&self.area[start..])
    }

    /// The position of the `index`th slot from the oldest.
    fn position(&self, index: u64) -> u64 {
        // Both below slot_count, which is below 2^59 (its slots are in memory).
        (self.head % self.slot_count + index) % self.slot_count
    }

    fn slot_offset(&self, position: u64) -> u64 {
        self.ring_offset + position * SLOT_SIZE
    }

    /// The valid records whose first slot's index (0 for the oldest slot,
    /// the one after head's) is from `from` to before `to`, in index order,
    /// and the index after the last slot looked at (`to`, or past it when a
    /// record runs on); the first invalid one's error. Every slot of such
    /// a record must be in the area.
    pub(super) fn records_between(
        &self,
        from: u64,
        to: u64,
    ) -> Result<(Vec<Record>, u64), FormatError> {
        let mut records = Vec::new();
        let mut payload = Vec::new();
        let mut index = from;
        while index < to {
            let mut args = Vec::new();
            match self.step(index, &mut payload, Some(&mut args)) {
                Step::Skip => index += 1,
                Step::Invalid(err) => return Err(err),
                Step::Record(found) => {
                    records.push(self.record(&found, args));
                    index += found.slots;
                }
            }
        }
        Ok((records, index))
    }

    /// The records one after another from the slot `index` (counted from
    /// the oldest) up to, not including, `to`, as a reader following a live
    /// ring takes them: each must start where the one before ended, whole;
    /// with `overwrite`, the later slots of a record whose first slot was
    /// overwritten are passed over. Returns them and the index of the
    /// first slot not taken, where the next read starts.
    pub(super) fn contiguous(
        &self,
        mut index: u64,
        to: u64,
        overwrite: bool,
    ) -> Result<(Vec<Record>, u64), FormatError> {
        let mut records = Vec::new();
        let mut payload = Vec::new();
        while index < to {
            let position = self.position(index);
            // The sequence number the slot `index` holds this lap; callers
            // start at or after the index of sequence number 0.
            let expected = (self.head + index).wrapping_sub(self.slot_count);
            let stamp = self.stamp(position);
            match decode_stamp(stamp) {
                Stamp::Later { seq, .. }
                    if overwrite && seq == expected & format::SEQUENCE_MASK =>
                {
                    index += 1;
                    continue;
                }
                Stamp::First { seq, .. } if seq == expected & format::SEQUENCE_MASK => {}
                _ => break,
            }
            let mut args = Vec::new();
            match self.step(index, &mut payload, Some(&mut args)) {
                Step::Record(found) => {
                    records.push(self.record(&found, args));
                    index += found.slots;
                }
                Step::Skip => break,
                Step::Invalid(err) => return Err(err),
            }
        }
        Ok((records, index))
    }

    fn record(&self, found: &Found, args: Vec<Value>) -> Record {
        let first = self.slot(found.position);
        let mut record = Record {
            seq: found.seq,
            slots: found.slots,
            time_ns: first.time_ns(),
            probe: first.probe(),
            tid: first.tid(),
            tag: first.tag(),
            args,
            context: Context::None,
        };
        if record.is_context() {
            // arguments() checked the ids.
            record.context = Context::Known(self.context_of(found.position).unwrap());
        }
        record
    }

    /// The ids a context record's slots hold, if neither is all zero.
    fn context_of(&self, position: u64) -> Option<TraceContext> {
        let mut payload = [0; TRACE_ID_LEN + SPAN_ID_LEN];
        let first = self.slot(position).first_payload();
        payload[..first.len()].copy_from_slice(first);
        let later = self.slot((position + 1) % self.slot_count).later_payload();
        payload[first.len()..].copy_from_slice(&later[..TRACE_ID_LEN + SPAN_ID_LEN - first.len()]);
        TraceContext::new(
            payload[..TRACE_ID_LEN].try_into().unwrap(),
            payload[TRACE_ID_LEN..].try_into().unwrap(),
        )
    }

    /// Which slots of `area` (by their index there) hold a slot of a
    /// valid record whose first slot is in it too: what a snapshot keeps.
    /// Only the area's slots are walked, from its oldest.
    pub(super) fn kept(&self) -> Vec<bool> {
        let slot_size = SLOT_SIZE as usize;
        let area_slots = (self.area.len() / slot_size) as u64;
        let mut kept = vec![false; area_slots as usize];
        // The index (from the oldest position, head's) of the area's first slot.
        let start = (self.window + self.slot_count - self.head % self.slot_count) % self.slot_count;
        let end = start + area_slots.min(self.slot_count);
        let mut payload = Vec::new();
        let mut index = start;
        while index < end {
            match self.step(index, &mut payload, None) {
                Step::Record(found) => {
                    for slot in 0..found.slots {
                        if let Some(at) = self.at((found.position + slot) % self.slot_count) {
                            kept[at / slot_size] = true;
                        }
                    }
                    index += found.slots;
                }
                Step::Skip | Step::Invalid(_) => index += 1,
            }
        }
        kept
    }

    fn step(&self, index: u64, payload: &mut Vec<u8>, args: Option<&mut Vec<Value>>) -> Step {
        let position = self.position(index);
        let stamp = self.stamp(position);
        let seq = match decode_stamp(stamp) {
            Stamp::Empty => return Step::Skip,
            Stamp::Broken => {
                return Step::Invalid(self.bad_stamp(
                    position,
                    stamp,
                    format!("0, a first slot's stamp (bit 15 set) or a later slot's (index 1 to {INDEX_MASK})"),
                    "index 0 with bit 15 clear",
                ))
            }
            Stamp::First { seq, .. } | Stamp::Later { seq, .. }
                if self.cut
                    && (self.head..self.limit).contains(&format::widen(seq, self.limit)) =>
            {
                // Written after the cut: neither read nor lost.
                return Step::Skip;
            }
            Stamp::Later { seq, .. } => {
                return match self.sequence(position, stamp, seq) {
                    Ok(_) => Step::Skip,
                    Err(err) => Step::Invalid(err),
                }
            }
            Stamp::First { seq, .. } => seq,
        };
        let seq = match self.sequence(position, stamp, seq) {
            Ok(seq) => seq,
            Err(err) => return Step::Invalid(err),
        };
        let slots = stamp & INDEX_MASK;
        if slots == 0 {
            let expected = format!("a first slot's count of slots from 1 to {INDEX_MASK}");
            return Step::Invalid(self.bad_stamp(position, stamp, expected, 0));
        }
        if slots > self.slot_count {
            let expected = format!("a record of at most slot_count ({}) slots", self.slot_count);
            return Step::Invalid(self.bad_stamp(
                position,
                stamp,
                expected,
                format!("{slots} slots"),
            ));
        }
        // seq < head: no overflow.
        if u128::from(seq) + u128::from(slots) > u128::from(self.head) {
            let expected = format!("a record that ends by head ({})", self.head);
            return Step::Invalid(self.bad_stamp(
                position,
                stamp,
                expected,
                format!("{slots} slots from {seq}"),
            ));
        }
        let whole = (1..slots).all(|slot| {
            let later = (position + slot) % self.slot_count;
            self.stamp(later) == format::later_stamp(seq, slot)
        });
        if !whole {
            return Step::Skip;
        }
        match self.arguments(position, seq, slots, payload, args) {
            Ok(()) => Step::Record(Found {
                position,
                seq,
                slots,
            }),
            Err(err) => Step::Invalid(err),
        }
    }

    /// The sequence number of a stamp's 48 bits: below head, and congruent
    /// to the slot's position modulo slot_count.
    fn sequence(&self, position: u64, stamp: u64, bits: u64) -> Result<u64, FormatError> {
        let seq = format::widen(bits, self.limit);
        if seq >= self.limit {
            let expected = format!("a sequence number below head ({})", self.limit);
            return Err(self.bad_stamp(position, stamp, expected, seq));
        }
        if seq % self.slot_count != position {
            let expected = format!(
                "a sequence number congruent to its position {position} modulo slot_count ({})",
                self.slot_count
            );
            return Err(self.bad_stamp(position, stamp, expected, seq));
        }
        Ok(seq)
    }

    fn bad_stamp(
        &self,
        position: u64,
        stamp: u64,
        expected: impl fmt::Display,
        found: impl fmt::Display,
    ) -> FormatError {
        FormatError::invalid(
            format!("stamp of slot {position} (0x{stamp:x})"),
            self.slot_offset(position),
            expected,
            found,
        )
    }

    /// Checks (and with `args`, decodes) the payload of the record at
    /// `position`, as the reader does.
    fn arguments(
        &self,
        position: u64,
        seq: u64,
        slots: u64,
        payload: &mut Vec<u8>,
        mut args: Option<&mut Vec<Value>>,
    ) -> Result<(), FormatError> {
        let error = |what: String, expected: String, found: String| {
            FormatError::invalid(
                format!("record {seq} in slot {position}: {what}"),
                self.slot_offset(position),
                expected,
                found,
            )
        };
        let first = self.slot(position);
        let probe_id = if self.version == 1 {
            // A version-1 record: the probe id is word 2's low half, and
            // the thread id its high half, which no Linux thread id fills.
            if first.above_tid() != 0 {
                return Err(error(
                    "thread id".to_owned(),
                    format!("below {} (a Linux thread id)", 1u64 << format::TID_BITS),
                    u64::from(first.tid() | (first.above_tid() << format::TID_BITS)).to_string(),
                ));
            }
            let field = first.probe_field();
            if field >= CONTEXT_PROBE {
                return Err(error(
                    "probe id".to_owned(),
                    format!("below {} (the probe table's entries)", self.probes.len()),
                    field.to_string(),
                ));
            }
            field
        } else {
            first.probe()
        };
        if probe_id == CONTEXT_PROBE {
            return self.context_record(position, slots, &error);
        }
        let Some(probe) = self.probes.get(probe_id as usize) else {
            return Err(error(
                "probe id".to_owned(),
                format!("below {} (the probe table's entries)", self.probes.len()),
                probe_id.to_string(),
            ));
        };
        payload.clear();
        payload.extend_from_slice(self.slot(position).first_payload());
        for slot in 1..slots {
            let later = (position + slot) % self.slot_count;
            payload.extend_from_slice(self.slot(later).later_payload());
        }
        // The end of arguments that hold no String is known from the
        // types alone: the slots must hold them, and nothing after them.
        let fixed = !probe.types.contains(&ArgType::String);
        if fixed {
            payload_ends(probe, slots, payload, 8 * probe.types.len(), &error)?;
        }
        let mut at = 0;
        for (index, &arg) in probe.types.iter().enumerate() {
            let mut take = |len: usize| {
                let end = at + len;
                if end > payload.len() {
                    let plural = if slots == 1 { "" } else { "s" };
                    return Err(error(
                        format!("argument {index} of {}", probe.described()),
                        format!(
                            "to end within the {} payload bytes of its {slots} slot{plural}",
                            payload.len()
                        ),
                        format!("it ends at byte {end}"),
                    ));
                }
                let bytes = &payload[at..end];
                at = end;
                Ok(bytes)
            };
            let bytes = match arg {
                ArgType::Int64 | ArgType::Float64 => take(8)?,
                ArgType::String => {
                    let len = u16::from_le_bytes(take(STRING_LENGTH)?.try_into().unwrap());
                    if u32::from(len) > self.max_string {
                        return Err(error(
                            format!("argument {index} (String) length"),
                            format!("at most max_string ({})", self.max_string),
                            len.to_string(),
                        ));
                    }
                    take(usize::from(len))?
                }
            };
            if let Some(args) = args.as_deref_mut() {
                args.push(match arg {
                    ArgType::Int64 => Value::Int(i64::from_le_bytes(bytes.try_into().unwrap())),
                    ArgType::Float64 => Value::Float(f64::from_le_bytes(bytes.try_into().unwrap())),
                    ArgType::String => Value::Str(bytes.to_vec()),
                });
            }
        }
        if fixed {
            return Ok(());
        }
        payload_ends(probe, slots, payload, at, &error)
    }
}

impl Slots<'_> {
    /// Checks the context record at `position`: its slots, its tag, its
    /// ids, its padding.
    fn context_record(
        &self,
        position: u64,
        slots: u64,
        error: &dyn Fn(String, String, String) -> FormatError,
    ) -> Result<(), FormatError> {
        if slots != CONTEXT_SLOTS {
            return Err(error(
                "slot count for a context record".to_owned(),
                format!(
                    "{CONTEXT_SLOTS} (its trace id and span id take {} bytes)",
                    format::CONTEXT_PAYLOAD
                ),
                slots.to_string(),
            ));
        }
        let first = self.slot(position);
        let tag = first.tag();
        if !CONTEXT_TAGS.contains(&tag) {
            return Err(error(
                "context record's tag".to_owned(),
                format!("{} to {}", CONTEXT_TAGS.start(), CONTEXT_TAGS.end()),
                tag.to_string(),
            ));
        }
        let later = self.slot((position + 1) % self.slot_count).later_payload();
        let (trace_rest, after) = later.split_at(TRACE_ID_LEN - first.first_payload().len());
        let (span, padding) = after.split_at(SPAN_ID_LEN);
        let zero = |bytes: &[u8]| bytes.iter().all(|&byte| byte == 0);
        if zero(first.first_payload()) && zero(trace_rest) {
            return Err(error(
                "context record's trace id".to_owned(),
                "not all zero".to_owned(),
                hex(&[first.first_payload(), trace_rest].concat()),
            ));
        }
        if zero(span) {
            return Err(error(
                "context record's span id".to_owned(),
                "not all zero".to_owned(),
                hex(span),
            ));
        }
        if !zero(padding) {
            return Err(error(
                "padding for a context record".to_owned(),
                format!(
                    "zero bytes after its {} bytes of ids",
                    format::CONTEXT_PAYLOAD
                ),
                hex(padding),
            ));
        }
        Ok(())
    }
}

/// That arguments of `size` bytes end in the record's last slot, and zeros
/// follow them.
fn payload_ends(
    probe: &ProbeEntry,
    slots: u64,
    payload: &[u8],
    size: usize,
    error: &dyn Fn(String, String, String) -> FormatError,
) -> Result<(), FormatError> {
    let needed = format::slots_for(size);
    if needed != slots {
        return Err(error(
            format!("slot count for {}", probe.described()),
            format!("{needed} (its arguments take {size} bytes)"),
            slots.to_string(),
        ));
    }
    let rest = &payload[size..];
    if rest.iter().any(|&byte| byte != 0) {
        return Err(error(
            format!("padding for {}", probe.described()),
            format!("zero bytes after its {size} bytes of arguments"),
            hex(rest),
        ));
    }
    Ok(())
}
