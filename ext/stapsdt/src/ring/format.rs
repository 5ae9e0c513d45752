//! The file format of docs/recording.md (version 2) as constants and pure
//! functions: the writer, the reader and the snapshot share them, so that a
//! field's offset or a stamp's layout is stated once.

use crate::names::{self, InvalidName, NameKind, MAX_NAME_LEN};
use crate::probe::{ArgType, MAX_ARGS};
use crate::trace_context::{SPAN_ID_LEN, TRACE_ID_LEN};
use std::fmt;

pub const MAGIC: [u8; 8] = *b"STATRACE";
/// The version the writer writes: 2 added trace contexts (context records,
/// and the context tag in every record's thread word).
pub const VERSION: u32 = 2;
/// The oldest version the reader reads: a version-1 record is a version-2
/// record made outside any context.
pub const OLDEST_VERSION: u32 = 1;
pub const HEADER_SIZE: u64 = 4096;
pub const TABLE_OFFSET: u64 = HEADER_SIZE;
/// A ring file's slots start on a page, so that they can be mapped apart.
pub const PAGE: u64 = 4096;
pub const SLOT_SIZE: u64 = 32;
pub const SLOT_WORDS: usize = 4;

/// Flag bits.
pub const OVERWRITE: u32 = 1;
pub const COMPLETE: u32 = 2;

/// The longest String argument kept, in bytes: longer ones keep their first
/// `MAX_STRING` bytes.
pub const MAX_STRING: u32 = 1024;
/// `latency_arg` or `stack_arg` when the probe has none.
pub const NO_ARG: u8 = 255;

/// Byte offsets of the header's fields.
pub mod offset {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const HEADER_SIZE: usize = 12;
    pub const TABLE_OFFSET: usize = 16;
    pub const TABLE_CAPACITY: usize = 24;
    pub const RING_OFFSET: usize = 32;
    pub const SLOT_COUNT: usize = 40;
    pub const SLOT_SIZE: usize = 48;
    pub const FLAGS: usize = 52;
    pub const PID: usize = 56;
    pub const PID_NAMESPACE: usize = 64;
    pub const ANCHOR_MONOTONIC_NS: usize = 72;
    pub const ANCHOR_REALTIME_NS: usize = 80;
    pub const MAX_STRING: usize = 88;
    pub const RESERVED: usize = 92;
    // The counters, each on a 64-byte line of its own: writers on different
    // CPUs change them all the time.
    pub const HEAD: usize = 128;
    pub const RECORDS: usize = 192;
    pub const DROPPED: usize = 256;
    pub const TAIL: usize = 320;
    pub const TABLE_USED: usize = 384;
}

/// The header's fields before the counters end at this offset.
pub const FIELDS_END: usize = 96;

/// The header's fixed fields (those before the counters). The constant
/// ones (magic, version, sizes, `table_offset`) are not fields here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// `VERSION` for a ring this writer makes; a trace file keeps its
    /// ring's.
    pub version: u32,
    pub table_capacity: u64,
    pub ring_offset: u64,
    pub slot_count: u64,
    pub flags: u32,
    pub pid: u64,
    pub pid_namespace: u64,
    pub anchor_monotonic_ns: u64,
    pub anchor_realtime_ns: i64,
    pub max_string: u32,
}

impl Header {
    pub fn overwrite(&self) -> bool {
        self.flags & OVERWRITE != 0
    }

    pub fn complete(&self) -> bool {
        self.flags & COMPLETE != 0
    }

    /// When a record stamped `monotonic_ns` was made, in nanoseconds since
    /// the Unix epoch: the ring's anchor pairs the process's two clocks.
    pub fn realtime_ns(&self, monotonic_ns: u64) -> i128 {
        i128::from(self.anchor_realtime_ns) + i128::from(monotonic_ns)
            - i128::from(self.anchor_monotonic_ns)
    }

    /// Writes every field up to the counters into `out`, whose first
    /// `FIELDS_END` bytes it overwrites.
    pub fn encode(&self, out: &mut [u8]) {
        let out = &mut out[..FIELDS_END];
        out.fill(0);
        let mut put = |at: usize, bytes: &[u8]| out[at..at + bytes.len()].copy_from_slice(bytes);
        put(offset::MAGIC, &MAGIC);
        put(offset::VERSION, &self.version.to_le_bytes());
        put(offset::HEADER_SIZE, &(HEADER_SIZE as u32).to_le_bytes());
        put(offset::TABLE_OFFSET, &TABLE_OFFSET.to_le_bytes());
        put(offset::TABLE_CAPACITY, &self.table_capacity.to_le_bytes());
        put(offset::RING_OFFSET, &self.ring_offset.to_le_bytes());
        put(offset::SLOT_COUNT, &self.slot_count.to_le_bytes());
        put(offset::SLOT_SIZE, &(SLOT_SIZE as u32).to_le_bytes());
        put(offset::FLAGS, &self.flags.to_le_bytes());
        put(offset::PID, &self.pid.to_le_bytes());
        put(offset::PID_NAMESPACE, &self.pid_namespace.to_le_bytes());
        put(
            offset::ANCHOR_MONOTONIC_NS,
            &self.anchor_monotonic_ns.to_le_bytes(),
        );
        put(
            offset::ANCHOR_REALTIME_NS,
            &self.anchor_realtime_ns.to_le_bytes(),
        );
        put(offset::MAX_STRING, &self.max_string.to_le_bytes());
    }
}

/// The header's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Slots reserved so far: the next record starts at this sequence number.
    pub head: u64,
    /// Records reserved so far (dropped ones not included).
    pub records: u64,
    /// Records not written: the ring was full (without overwrite), the
    /// probe table was, or the record did not fit the ring or its probe.
    pub dropped: u64,
    /// Without overwrite: slots the reader has consumed.
    pub tail: u64,
    /// Bytes of the probe table in use.
    pub table_used: u32,
}

impl Counters {
    /// Writes the counters at their offsets in `out` (a header).
    pub fn encode(&self, out: &mut [u8]) {
        let mut put = |at: usize, bytes: &[u8]| out[at..at + bytes.len()].copy_from_slice(bytes);
        put(offset::HEAD, &self.head.to_le_bytes());
        put(offset::RECORDS, &self.records.to_le_bytes());
        put(offset::DROPPED, &self.dropped.to_le_bytes());
        put(offset::TAIL, &self.tail.to_le_bytes());
        put(offset::TABLE_USED, &self.table_used.to_le_bytes());
    }
}

// Stamps.

pub const STAMP_SHIFT: u32 = 16;
/// Bit 15: a record's first slot.
pub const FIRST: u64 = 0x8000;
/// Bits 0 to 14: a first slot's count of slots, a later slot's index.
pub const INDEX_MASK: u64 = 0x7fff;
/// A stamp keeps the low 48 bits of a sequence number.
pub const SEQUENCE_BITS: u32 = 48;
pub const SEQUENCE_MASK: u64 = (1 << SEQUENCE_BITS) - 1;

/// The stamp of the first slot of a record of `slots` slots from sequence
/// number `seq` (bits of `seq` above 48 fall off).
#[inline]
pub const fn first_stamp(seq: u64, slots: u64) -> u64 {
    (seq << STAMP_SHIFT) | FIRST | slots
}

/// The stamp of slot `index` (1 to `slots - 1`) of the record from `seq`.
#[inline]
pub const fn later_stamp(seq: u64, index: u64) -> u64 {
    (seq.wrapping_add(index) << STAMP_SHIFT) | index
}

/// What a stamp says, before it is checked against its position and head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stamp {
    /// 0: never written, or being written.
    Empty,
    /// A record's first slot; `seq` has 48 bits, `slots` may be 0 (invalid).
    First { seq: u64, slots: u64 },
    /// Slot `index` of a record; `seq` (48 bits) is this slot's.
    Later { seq: u64, index: u64 },
    /// Neither: bit 15 clear with index 0, but not 0.
    Broken,
}

pub const fn decode_stamp(stamp: u64) -> Stamp {
    let seq = stamp >> STAMP_SHIFT;
    let index = stamp & INDEX_MASK;
    if stamp == 0 {
        Stamp::Empty
    } else if stamp & FIRST != 0 {
        Stamp::First { seq, slots: index }
    } else if index == 0 {
        Stamp::Broken
    } else {
        Stamp::Later { seq, index }
    }
}

/// The sequence number the 48 bits of a stamp stand for in a file whose
/// head is `head`: themselves while head fits in 48 bits, else the latest
/// number at or below head with those low bits.
#[inline]
pub const fn widen(seq: u64, head: u64) -> u64 {
    if head > SEQUENCE_MASK {
        head - (head.wrapping_sub(seq) & SEQUENCE_MASK)
    } else {
        seq
    }
}

// A record's word 2: its probe, its thread and the context it was made in.

/// Bits 0 to 19 of word 2: the probe id.
pub const PROBE_BITS: u32 = 20;
pub const PROBE_MASK: u64 = (1 << PROBE_BITS) - 1;
/// The probe id of a context record: no probe table holds this many
/// probes (`MAX_PROBES`).
pub const CONTEXT_PROBE: u32 = PROBE_MASK as u32;
/// Probe ids run from 0 to `MAX_PROBES - 1`.
pub const MAX_PROBES: usize = CONTEXT_PROBE as usize;
/// Bits 32 to 53: the thread id (Linux's are below `PID_MAX_LIMIT`, 2^22).
pub const TID_SHIFT: u32 = 32;
pub const TID_BITS: u32 = 22;
pub const TID_MASK: u64 = (1 << TID_BITS) - 1;
/// The context tag's 22 bits: its low 12 in bits 20 to 31, its high 10 in
/// bits 54 to 63 (around the thread id, which keeps the place it had in
/// version 1).
pub const TAG_BITS: u32 = 22;
pub const TAG_MASK: u32 = (1 << TAG_BITS) - 1;
const TAG_LOW_BITS: u32 = 12;
const TAG_LOW_MASK: u64 = (1 << TAG_LOW_BITS) - 1;
pub const TAG_HIGH_SHIFT: u32 = TID_SHIFT + TID_BITS;
/// A record made outside any trace context.
pub const NO_CONTEXT: u32 = 0;
/// A record whose thread's context could not be put in the ring (its
/// context record was dropped): its context is unknown.
pub const UNKNOWN_CONTEXT: u32 = TAG_MASK;
/// The tags a context record can have.
pub const CONTEXT_TAGS: std::ops::RangeInclusive<u32> = 1..=TAG_MASK - 1;

/// Who made a record: its thread, and the tag of the trace context the
/// thread was in, as word 2 holds them beside the probe id. A record's
/// context is that of the latest context record of its thread with its tag
/// (`NO_CONTEXT`: none; `UNKNOWN_CONTEXT`: unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Maker(u64);

impl Maker {
    /// Thread `tid` (its low 22 bits) in the context tagged `tag` (its low 22 bits).
    #[inline]
    pub const fn new(tid: u32, tag: u32) -> Maker {
        let tag = tag as u64;
        Maker(
            ((tag & TAG_LOW_MASK) << PROBE_BITS)
                | ((tid as u64 & TID_MASK) << TID_SHIFT)
                | ((tag >> TAG_LOW_BITS) << TAG_HIGH_SHIFT),
        )
    }

    /// The maker word 2 names (its probe id left out).
    #[inline]
    pub const fn of(word: u64) -> Maker {
        Maker(word & !PROBE_MASK)
    }

    pub const fn tid(self) -> u32 {
        ((self.0 >> TID_SHIFT) & TID_MASK) as u32
    }

    pub const fn tag(self) -> u32 {
        (((self.0 >> PROBE_BITS) & TAG_LOW_MASK) | ((self.0 >> TAG_HIGH_SHIFT) << TAG_LOW_BITS))
            as u32
    }

    /// Word 2 of a record of `probe` (below `2^PROBE_BITS`) by this maker.
    #[inline]
    pub const fn word(self, probe: u32) -> u64 {
        self.0 | (probe as u64 & PROBE_MASK)
    }
}

// Context records.

/// A context record's payload: the trace id, then the span id.
pub const CONTEXT_PAYLOAD: usize = TRACE_ID_LEN + SPAN_ID_LEN;
/// The slots a context record takes.
pub const CONTEXT_SLOTS: u64 = slots_for(CONTEXT_PAYLOAD);

// Slots.

/// A slot's 32 bytes, read as the format lays them out: word 0 is the
/// stamp; in a record's first slot word 1 is its time, word 2 its probe id,
/// thread id and context tag (see [`Maker`]), and word 3 the first
/// `FIRST_PAYLOAD` bytes of its payload; a later slot's words 1 to 3 are
/// `LATER_PAYLOAD` bytes of payload. Every reader of slots reads them
/// through here, not by offset.
#[derive(Clone, Copy, Debug)]
pub struct Slot<'a>(&'a [u8]);

impl<'a> Slot<'a> {
    /// The slot at the start of `bytes`, which hold at least `SLOT_SIZE`.
    pub fn at(bytes: &'a [u8]) -> Slot<'a> {
        Slot(&bytes[..SLOT_SIZE as usize])
    }

    fn word(&self, index: usize) -> u64 {
        u64::from_le_bytes(self.0[8 * index..8 * index + 8].try_into().unwrap())
    }

    pub fn stamp(&self) -> u64 {
        self.word(0)
    }

    /// A first slot's count of slots of its record (0 in a broken stamp).
    pub fn slots(&self) -> u64 {
        self.stamp() & INDEX_MASK
    }

    pub fn time_ns(&self) -> u64 {
        self.word(1)
    }

    /// The probe id: an index into the probe table, or `CONTEXT_PROBE`
    /// for a context record.
    pub fn probe(&self) -> u32 {
        (self.word(2) & PROBE_MASK) as u32
    }

    /// Word 2's low half as a version-1 file has it: the probe id alone.
    pub fn probe_field(&self) -> u32 {
        self.word(2) as u32
    }

    pub fn tid(&self) -> u32 {
        Maker::of(self.word(2)).tid()
    }

    /// The context tag (see [`Maker`]): `NO_CONTEXT` in a version-1 file.
    pub fn tag(&self) -> u32 {
        Maker::of(self.word(2)).tag()
    }

    /// Word 2's bits above a version-1 thread id's 22: a version-2
    /// record's context tag, 0 in a version-1 file.
    pub fn above_tid(&self) -> u32 {
        (self.word(2) >> TAG_HIGH_SHIFT) as u32
    }

    /// The payload bytes a record's first slot holds.
    pub fn first_payload(&self) -> &'a [u8] {
        &self.0[SLOT_SIZE as usize - FIRST_PAYLOAD..]
    }

    /// The payload bytes a record's later slot holds.
    pub fn later_payload(&self) -> &'a [u8] {
        &self.0[SLOT_SIZE as usize - LATER_PAYLOAD..]
    }

    /// The slot's bytes after its stamp: what a copy renumbering records keeps.
    pub fn after_stamp(&self) -> &'a [u8] {
        &self.0[8..]
    }
}

// Payloads.

/// Payload bytes in a record's first slot, and in each later one.
pub const FIRST_PAYLOAD: usize = 8;
pub const LATER_PAYLOAD: usize = 24;
/// A String's length prefix (u16).
pub const STRING_LENGTH: usize = 2;
/// The largest payload a record can have: six Strings cut at `MAX_STRING`.
pub const MAX_PAYLOAD: usize = MAX_ARGS * (STRING_LENGTH + MAX_STRING as usize);
/// The most slots a record can take.
pub const MAX_RECORD_SLOTS: u64 = slots_for(MAX_PAYLOAD);

// A first slot's stamp can say how many slots any record takes.
const _: () = assert!(MAX_RECORD_SLOTS <= INDEX_MASK);

/// How many slots a payload of `payload_len` bytes fills.
#[inline]
pub const fn slots_for(payload_len: usize) -> u64 {
    if payload_len <= FIRST_PAYLOAD {
        1
    } else {
        1 + (payload_len - FIRST_PAYLOAD).div_ceil(LATER_PAYLOAD) as u64
    }
}

/// The payload bytes `slots` slots hold.
#[inline]
pub const fn payload_capacity(slots: u64) -> usize {
    FIRST_PAYLOAD + (slots as usize - 1) * LATER_PAYLOAD
}

/// The bytes a String argument of `len` bytes takes in a payload, once cut.
#[inline]
pub const fn string_size(len: usize) -> usize {
    STRING_LENGTH + cut_len(len)
}

/// The length a String of `len` bytes is cut to.
#[inline]
pub const fn cut_len(len: usize) -> usize {
    if len > MAX_STRING as usize {
        MAX_STRING as usize
    } else {
        len
    }
}

// Types.

pub const TYPE_INTEGER: u8 = 1;
pub const TYPE_FLOAT: u8 = 2;
pub const TYPE_STRING: u8 = 3;

pub const fn type_code(arg: ArgType) -> u8 {
    match arg {
        ArgType::Int64 => TYPE_INTEGER,
        ArgType::Float64 => TYPE_FLOAT,
        ArgType::String => TYPE_STRING,
    }
}

pub const fn arg_type(code: u8) -> Option<ArgType> {
    match code {
        TYPE_INTEGER => Some(ArgType::Int64),
        TYPE_FLOAT => Some(ArgType::Float64),
        TYPE_STRING => Some(ArgType::String),
        _ => None,
    }
}

/// The name the Ruby side gives a type, as messages show it.
pub const fn type_name(arg: ArgType) -> &'static str {
    match arg {
        ArgType::Int64 => "Integer",
        ArgType::Float64 => "Float",
        ArgType::String => "String",
    }
}

// Probe table entries.

pub const ENTRY_HEADER: usize = 16;
/// Two names of the longest length, padded.
pub const MAX_ENTRY_SIZE: usize = entry_size(MAX_NAME_LEN, MAX_NAME_LEN);
/// Two one-byte names, padded: how many probes a table can hold at most.
pub const MIN_ENTRY_SIZE: usize = entry_size(1, 1);

/// The size of the entry of a probe whose names have these lengths.
pub const fn entry_size(provider_len: usize, probe_len: usize) -> usize {
    (ENTRY_HEADER + provider_len + probe_len).next_multiple_of(8)
}

/// A probe as the table describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    pub provider: &'a str,
    pub probe: &'a str,
    pub types: &'a [ArgType],
    /// The argument holding a duration in ns (an Integer).
    pub latency_arg: Option<u8>,
    /// The argument holding a folded stack (a String).
    pub stack_arg: Option<u8>,
}

/// Why a probe cannot be described by an entry: the reader would refuse the
/// whole file for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryError {
    Name(InvalidName),
    TooManyArgs(usize),
    /// `latency_arg` is not the index of an Integer argument.
    LatencyArg(u8),
    /// `stack_arg` is not the index of a String argument.
    StackArg(u8),
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryError::Name(err) => err.fmt(f),
            EntryError::TooManyArgs(count) => {
                write!(
                    f,
                    "{count} argument types, at most {MAX_ARGS} are supported"
                )
            }
            EntryError::LatencyArg(index) => {
                write!(f, "latency argument {index} is not an Integer argument")
            }
            EntryError::StackArg(index) => {
                write!(f, "stack argument {index} is not a String argument")
            }
        }
    }
}

impl std::error::Error for EntryError {}

/// An encoded entry, on the stack: the table is appended to on a path that
/// must not fail for want of memory.
#[derive(Clone, Copy)]
pub struct EncodedEntry {
    bytes: [u8; MAX_ENTRY_SIZE],
    len: usize,
}

impl EncodedEntry {
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl fmt::Debug for EncodedEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("EncodedEntry")
            .field(&self.as_bytes())
            .finish()
    }
}

impl Entry<'_> {
    /// What the reader would refuse in this entry, if anything.
    pub fn check(&self) -> Result<(), EntryError> {
        names::validate(NameKind::Provider, self.provider).map_err(EntryError::Name)?;
        names::validate(NameKind::Probe, self.probe).map_err(EntryError::Name)?;
        if self.types.len() > MAX_ARGS {
            return Err(EntryError::TooManyArgs(self.types.len()));
        }
        let is = |index: u8, wanted: ArgType| self.types.get(usize::from(index)) == Some(&wanted);
        match self.latency_arg {
            Some(index) if !is(index, ArgType::Int64) => return Err(EntryError::LatencyArg(index)),
            _ => {}
        }
        match self.stack_arg {
            Some(index) if !is(index, ArgType::String) => return Err(EntryError::StackArg(index)),
            _ => {}
        }
        Ok(())
    }

    pub fn encode(&self) -> Result<EncodedEntry, EntryError> {
        self.check()?;
        let (provider, probe) = (self.provider.as_bytes(), self.probe.as_bytes());
        let len = entry_size(provider.len(), probe.len());
        let mut bytes = [0; MAX_ENTRY_SIZE];
        // The checks above bound every length: the casts cannot truncate.
        bytes[0..2].copy_from_slice(&(len as u16).to_le_bytes());
        bytes[2] = self.types.len() as u8;
        bytes[3] = provider.len() as u8;
        bytes[4] = probe.len() as u8;
        bytes[5] = self.latency_arg.unwrap_or(NO_ARG);
        bytes[6] = self.stack_arg.unwrap_or(NO_ARG);
        for (code, &arg) in bytes[8..8 + MAX_ARGS].iter_mut().zip(self.types) {
            *code = type_code(arg);
        }
        let names = ENTRY_HEADER + provider.len();
        bytes[ENTRY_HEADER..names].copy_from_slice(provider);
        bytes[names..names + probe.len()].copy_from_slice(probe);
        Ok(EncodedEntry { bytes, len })
    }
}

/// An entry read back: `Entry` with its types held in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodedEntry<'a> {
    pub provider: &'a str,
    pub probe: &'a str,
    types: [ArgType; MAX_ARGS],
    arg_count: usize,
    pub latency_arg: Option<u8>,
    pub stack_arg: Option<u8>,
}

impl<'a> DecodedEntry<'a> {
    pub fn types(&self) -> &[ArgType] {
        &self.types[..self.arg_count]
    }

    pub fn entry(&self) -> Entry<'_> {
        Entry {
            provider: self.provider,
            probe: self.probe,
            types: self.types(),
            latency_arg: self.latency_arg,
            stack_arg: self.stack_arg,
        }
    }
}

/// Where and how an entry breaks the format: `at` is the offset in the entry
/// of the field that does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryProblem {
    pub what: String,
    pub at: usize,
    pub expected: String,
    pub found: String,
}

fn problem(
    what: impl Into<String>,
    at: usize,
    expected: impl Into<String>,
    found: impl fmt::Display,
) -> EntryProblem {
    EntryProblem {
        what: what.into(),
        at,
        expected: expected.into(),
        found: found.to_string(),
    }
}

/// Decodes the entry at the start of `bytes` (the table from it up to
/// `table_used`), checked field by field in a fixed order: the name
/// lengths, the size they need, the reserved bytes, the types and the
/// arguments that name them, the names, the padding. The first field that
/// breaks the format is the one reported, so that a file is always refused
/// for the same reason. Returns the entry and its size.
pub fn decode_entry(bytes: &[u8]) -> Result<(DecodedEntry<'_>, usize), EntryProblem> {
    let remaining = bytes.len();
    if remaining < ENTRY_HEADER {
        return Err(problem(
            "entry",
            0,
            format!("a {ENTRY_HEADER}-byte entry header before table_used"),
            format!("{remaining} bytes"),
        ));
    }
    let size = usize::from(u16::from_le_bytes([bytes[0], bytes[1]]));
    let (arg_count, provider_len, probe_len) =
        (bytes[2], usize::from(bytes[3]), usize::from(bytes[4]));
    let (latency, stack) = (bytes[5], bytes[6]);
    name_len("provider", 3, provider_len)?;
    name_len("probe", 4, probe_len)?;
    if size % 8 != 0 {
        return Err(problem("entry_size", 0, "a multiple of 8", size));
    }
    let names_end = ENTRY_HEADER + provider_len + probe_len;
    if size < names_end {
        return Err(problem(
            "entry_size",
            0,
            format!("at least {names_end} (header and names)"),
            size,
        ));
    }
    if size > remaining {
        return Err(problem(
            "entry_size",
            0,
            format!("at most the {remaining} bytes left before table_used"),
            size,
        ));
    }
    if bytes[7] != 0 {
        return Err(problem("reserved byte", 7, "0", bytes[7]));
    }
    let reserved = u16::from_le_bytes([bytes[14], bytes[15]]);
    if reserved != 0 {
        return Err(problem("reserved bytes", 14, "0", reserved));
    }
    if usize::from(arg_count) > MAX_ARGS {
        return Err(problem(
            "arg_count",
            2,
            format!("0 to {MAX_ARGS}"),
            arg_count,
        ));
    }
    let arg_count = usize::from(arg_count);
    let mut types = [ArgType::Int64; MAX_ARGS];
    for (index, &code) in bytes[8..8 + MAX_ARGS].iter().enumerate() {
        let what = format!("types[{index}]");
        if index < arg_count {
            types[index] = arg_type(code).ok_or_else(|| {
                problem(
                    what,
                    8 + index,
                    "1 (Integer), 2 (Float) or 3 (String)",
                    code,
                )
            })?;
        } else if code != 0 {
            return Err(problem(
                what,
                8 + index,
                format!("0 (past arg_count {arg_count})"),
                code,
            ));
        }
    }
    let types_shown = || {
        if arg_count == 0 {
            "none".to_owned()
        } else {
            let names: Vec<&str> = types[..arg_count].iter().map(|&t| type_name(t)).collect();
            names.join(", ")
        }
    };
    let arg = |field: &str, index: u8, wanted: ArgType, at: usize| {
        if index == NO_ARG {
            return Ok(None);
        }
        if usize::from(index) < arg_count && types[usize::from(index)] == wanted {
            return Ok(Some(index));
        }
        let article = if wanted == ArgType::Int64 { "an" } else { "a" };
        Err(problem(
            field,
            at,
            format!(
                "{NO_ARG} (none) or the index of {article} {} argument (types: {})",
                type_name(wanted),
                types_shown()
            ),
            index,
        ))
    };
    let latency_arg = arg("latency_arg", latency, ArgType::Int64, 5)?;
    let stack_arg = arg("stack_arg", stack, ArgType::String, 6)?;
    let provider = name(bytes, "provider", ENTRY_HEADER, provider_len)?;
    let probe = name(bytes, "probe", ENTRY_HEADER + provider_len, probe_len)?;
    let padding = &bytes[names_end..size];
    if padding.iter().any(|&byte| byte != 0) {
        return Err(problem(
            "padding",
            names_end,
            format!("zero bytes after the names, up to entry_size ({size})"),
            hex(padding),
        ));
    }
    let entry = DecodedEntry {
        provider,
        probe,
        types,
        arg_count,
        latency_arg,
        stack_arg,
    };
    Ok((entry, size))
}

fn name_len(kind: &str, at: usize, len: usize) -> Result<(), EntryProblem> {
    if (1..=MAX_NAME_LEN).contains(&len) {
        return Ok(());
    }
    Err(problem(
        format!("{kind}_len"),
        at,
        format!("1 to {MAX_NAME_LEN}"),
        len,
    ))
}

/// The name of `len` bytes at `at`, whose length `name_len` checked.
fn name<'a>(bytes: &'a [u8], kind: &str, at: usize, len: usize) -> Result<&'a str, EntryProblem> {
    let text = &bytes[at..at + len];
    match std::str::from_utf8(text) {
        Ok(text) if names::is_valid(text) => Ok(text),
        _ => Err(problem(
            format!("{kind} name"),
            at,
            "letters, digits and underscores, not starting with a digit",
            quoted(text),
        )),
    }
}

/// Bytes as lowercase hex digits, two a byte: how messages show bytes that
/// should have been zero.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Bytes that should have been a name, quoted and escaped byte for byte as
/// Ruby's `String#inspect` shows binary text: what is not printable ASCII
/// shows as its byte (`\xFF`), never as a replacement character, so that
/// the message says exactly what the file holds.
pub(crate) fn quoted(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for (at, &byte) in bytes.iter().enumerate() {
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            // `#{`, `#$` and `#@` would interpolate in a Ruby literal.
            b'#' if matches!(bytes.get(at + 1), Some(b'{' | b'$' | b'@')) => out.push_str("\\#"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\r' => out.push_str("\\r"),
            0x0c => out.push_str("\\f"),
            0x0b => out.push_str("\\v"),
            0x08 => out.push_str("\\b"),
            0x07 => out.push_str("\\a"),
            0x1b => out.push_str("\\e"),
            0x20..=0x7e => out.push(char::from(byte)),
            _ => out.push_str(&format!("\\x{byte:02X}")),
        }
    }
    out.push('"');
    out
}

// The values a record carries, and the probes that name them: what the
// writer takes, the reader gives back and the table describes.

/// An argument of a record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg<'a> {
    Int(i64),
    Float(f64),
    /// Cut at `MAX_STRING` bytes, keeping the first ones.
    Str(&'a [u8]),
}

/// An entry of the probe table; its id is its index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeEntry {
    pub id: u32,
    pub provider: String,
    pub name: String,
    pub types: Vec<ArgType>,
    pub latency_arg: Option<u8>,
    pub stack_arg: Option<u8>,
}

/// The probe table of `probes`, encoded as the writer encodes it: an
/// error for an entry the writer would refuse.
pub fn encode_table(probes: &[ProbeEntry]) -> Result<Vec<u8>, EntryError> {
    let mut table = Vec::new();
    for probe in probes {
        let entry = Entry {
            provider: &probe.provider,
            probe: &probe.name,
            types: &probe.types,
            latency_arg: probe.latency_arg,
            stack_arg: probe.stack_arg,
        };
        table.extend_from_slice(entry.encode()?.as_bytes());
    }
    Ok(table)
}

impl ProbeEntry {
    /// `provider:name(Integer, String)`, as messages show a probe.
    pub(super) fn described(&self) -> String {
        let types: Vec<&str> = self.types.iter().map(|&t| type_name(t)).collect();
        format!(
            "probe {}:{}({})",
            self.provider,
            self.name,
            types.join(", ")
        )
    }
}

/// An argument's value as read back.
#[derive(Clone, Debug)]
pub enum Value {
    Int(i64),
    Float(f64),
    Str(Vec<u8>),
}

/// Floats compare by their bits: a NaN written is the NaN read.
impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => a.to_bits() == b.to_bits(),
            (Value::Str(a), Value::Str(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Value {}

impl Value {
    /// The value a recorded `arg` reads back as: a String cut at `MAX_STRING`.
    pub fn of(arg: &Arg<'_>) -> Value {
        match *arg {
            Arg::Int(value) => Value::Int(value),
            Arg::Float(value) => Value::Float(value),
            Arg::Str(bytes) => Value::Str(bytes[..cut_len(bytes.len())].to_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_encodes_at_the_documented_offsets() {
        let header = Header {
            version: VERSION,
            table_capacity: 61440,
            ring_offset: 65536,
            slot_count: 2048,
            flags: OVERWRITE,
            pid: 1234,
            pid_namespace: 4026531836,
            anchor_monotonic_ns: 0x0102_0304_0506_0708,
            anchor_realtime_ns: -2,
            max_string: MAX_STRING,
        };
        let mut out = [0xaa; HEADER_SIZE as usize];
        header.encode(&mut out);
        let counters = Counters {
            head: 1,
            records: 2,
            dropped: 3,
            tail: 4,
            table_used: 5,
        };
        counters.encode(&mut out);
        let u32_at = |at: usize| u32::from_le_bytes(out[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(out[at..at + 8].try_into().unwrap());
        assert_eq!(&out[..8], b"STATRACE");
        assert_eq!((u32_at(8), u32_at(12)), (2, 4096));
        assert_eq!(
            (u64_at(16), u64_at(24), u64_at(32), u64_at(40)),
            (4096, 61440, 65536, 2048)
        );
        assert_eq!((u32_at(48), u32_at(52)), (32, 1));
        assert_eq!((u64_at(56), u64_at(64)), (1234, 4026531836));
        assert_eq!((u64_at(72), u64_at(80) as i64), (0x0102_0304_0506_0708, -2));
        assert_eq!((u32_at(88), u32_at(92)), (1024, 0));
        assert_eq!(&out[96..128], &[0xaa; 32], "encode writes the fields only");
        assert_eq!(
            (
                u64_at(128),
                u64_at(192),
                u64_at(256),
                u64_at(320),
                u32_at(384)
            ),
            (1, 2, 3, 4, 5)
        );
        assert!(header.overwrite() && !header.complete());
    }

    #[test]
    fn stamps_encode_and_decode() {
        assert_eq!(first_stamp(0, 1), 0x8001);
        assert_eq!(first_stamp(5, 3), (5 << 16) | 0x8003);
        assert_eq!(later_stamp(5, 2), (7 << 16) | 2);
        assert_eq!(decode_stamp(0), Stamp::Empty);
        assert_eq!(
            decode_stamp(first_stamp(42, 7)),
            Stamp::First { seq: 42, slots: 7 }
        );
        assert_eq!(
            decode_stamp(later_stamp(42, 3)),
            Stamp::Later { seq: 45, index: 3 }
        );
        assert_eq!(decode_stamp(7 << 16), Stamp::Broken);
        // A first slot's count of 0 decodes; the reader refuses it.
        assert_eq!(decode_stamp(FIRST), Stamp::First { seq: 0, slots: 0 });
    }

    #[test]
    fn stamps_keep_48_bits_of_the_sequence_number() {
        let seq = (1 << 48) + 5;
        assert_eq!(first_stamp(seq, 1), first_stamp(5, 1));
        assert_eq!(later_stamp(SEQUENCE_MASK, 1), 1);
        assert_eq!(
            decode_stamp(first_stamp(u64::MAX, 2)),
            Stamp::First {
                seq: SEQUENCE_MASK,
                slots: 2
            }
        );
        assert_eq!(widen(5, 100), 5);
        assert_eq!(widen(5, (1 << 48) + 10), (1 << 48) + 5);
        assert_eq!(widen(SEQUENCE_MASK, (1 << 48) + 10), SEQUENCE_MASK);
        assert_eq!(widen(20, (1 << 48) + 10), 20);
    }

    #[test]
    fn slots_for_payloads_at_every_boundary() {
        for (len, slots) in [(0, 1), (8, 1), (9, 2), (32, 2), (33, 3), (56, 3), (57, 4)] {
            assert_eq!(slots_for(len), slots, "{len} bytes");
            assert!(payload_capacity(slots) >= len);
            assert!(slots == 1 || payload_capacity(slots - 1) < len);
        }
        assert_eq!(MAX_PAYLOAD, 6156);
        assert_eq!(MAX_RECORD_SLOTS, 258);
        assert_eq!(string_size(0), 2);
        assert_eq!(string_size(2000), 1026);
    }

    #[test]
    fn types_have_their_codes() {
        for arg in [ArgType::Int64, ArgType::Float64, ArgType::String] {
            assert_eq!(arg_type(type_code(arg)), Some(arg));
        }
        assert_eq!(type_code(ArgType::Float64), 2);
        assert_eq!(arg_type(0), None);
        assert_eq!(arg_type(4), None);
    }

    fn entry<'a>(
        types: &'a [ArgType],
        latency_arg: Option<u8>,
        stack_arg: Option<u8>,
    ) -> Entry<'a> {
        Entry {
            provider: "app",
            probe: "request_done",
            types,
            latency_arg,
            stack_arg,
        }
    }

    #[test]
    fn an_entry_encodes_as_the_format_says_and_decodes_back() {
        let types = [ArgType::String, ArgType::Int64];
        let entry = entry(&types, Some(1), Some(0));
        let encoded = entry.encode().unwrap();
        let bytes = encoded.as_bytes();
        assert_eq!(bytes.len(), 32); // 16 + 3 + 12 = 31, padded
        assert_eq!(&bytes[..8], &[32, 0, 2, 3, 12, 1, 0, 0]);
        assert_eq!(&bytes[8..16], &[3, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&bytes[16..31], b"apprequest_done");
        assert_eq!(bytes[31], 0);
        let (decoded, size) = decode_entry(bytes).unwrap();
        assert_eq!(size, 32);
        assert_eq!(decoded.entry(), entry);
        // Whatever follows the entry is not its business.
        let mut longer = bytes.to_vec();
        longer.extend_from_slice(&[0xff; 40]);
        assert_eq!(decode_entry(&longer).unwrap(), (decoded, 32));
        assert_eq!(entry_size(128, 128), MAX_ENTRY_SIZE);
        assert_eq!(MIN_ENTRY_SIZE, 24);
    }

    #[test]
    fn entries_the_reader_would_refuse_are_not_encoded() {
        let ints = [ArgType::Int64];
        assert!(matches!(
            Entry {
                provider: "9x",
                ..entry(&ints, None, None)
            }
            .encode(),
            Err(EntryError::Name(_))
        ));
        assert!(matches!(
            Entry {
                probe: "",
                ..entry(&ints, None, None)
            }
            .encode(),
            Err(EntryError::Name(_))
        ));
        let seven = [ArgType::Int64; 7];
        assert_eq!(
            entry(&seven, None, None).encode().unwrap_err(),
            EntryError::TooManyArgs(7)
        );
        assert_eq!(
            entry(&ints, Some(1), None).encode().unwrap_err(),
            EntryError::LatencyArg(1)
        );
        assert_eq!(
            entry(&ints, None, Some(0)).encode().unwrap_err(),
            EntryError::StackArg(0)
        );
        let string = [ArgType::String];
        assert_eq!(
            entry(&string, Some(0), None).encode().unwrap_err(),
            EntryError::LatencyArg(0)
        );
        assert_eq!(
            entry(&string, Some(NO_ARG), None).encode().unwrap_err(),
            EntryError::LatencyArg(255)
        );
    }

    #[test]
    fn broken_entries_say_what_is_wrong() {
        let types = [ArgType::Int64, ArgType::String];
        let good = entry(&types, Some(0), Some(1)).encode().unwrap();
        let mutate = |at: usize, value: u8| {
            let mut bytes = good.as_bytes().to_vec();
            bytes[at] = value;
            decode_entry(&bytes).unwrap_err()
        };
        assert_eq!(
            decode_entry(&good.as_bytes()[..15]).unwrap_err().what,
            "entry"
        );
        assert_eq!(mutate(0, 33).what, "entry_size");
        assert_eq!(mutate(0, 8).what, "entry_size");
        assert_eq!(
            mutate(0, 40).expected,
            "at most the 32 bytes left before table_used"
        );
        assert_eq!(mutate(2, 7).what, "arg_count");
        assert_eq!(mutate(9, 4).what, "types[1]");
        assert_eq!(mutate(10, 1).what, "types[2]");
        assert_eq!(mutate(5, 1).what, "latency_arg");
        assert_eq!(mutate(6, 0).what, "stack_arg");
        assert_eq!(mutate(3, 0).what, "provider_len");
        assert_eq!(mutate(16, b'7').what, "provider name");
        assert_eq!(mutate(20, b'-').what, "probe name");
        let problem = mutate(20, 0xff);
        assert_eq!(
            (problem.at, problem.found.as_str()),
            (19, "\"r\\xFFquest_done\"")
        );
        assert_eq!(mutate(7, 1).what, "reserved byte");
        assert_eq!(mutate(15, 1).found, "256");
        let padding = mutate(31, 5);
        assert_eq!(
            (padding.what.as_str(), padding.at, padding.found.as_str()),
            ("padding", 31, "05")
        );
    }

    #[test]
    fn an_entry_is_refused_for_its_first_broken_field() {
        let types = [ArgType::Int64];
        let good = entry(&types, Some(0), None).encode().unwrap();
        let broken = |edits: &[(usize, u8)]| {
            let mut bytes = good.as_bytes().to_vec();
            for &(at, value) in edits {
                bytes[at] = value;
            }
            decode_entry(&bytes).unwrap_err().what
        };
        // Names too long for their entry: their lengths are what is wrong.
        assert_eq!(broken(&[(4, 200)]), "probe_len");
        assert_eq!(broken(&[(3, 129), (4, 0)]), "provider_len");
        assert_eq!(broken(&[(4, 100)]), "entry_size");
        // The size before the reserved bytes, those before the types.
        assert_eq!(broken(&[(0, 12), (7, 1)]), "entry_size");
        assert_eq!(broken(&[(7, 1), (2, 9)]), "reserved byte");
        assert_eq!(broken(&[(14, 1), (8, 9)]), "reserved bytes");
        // The names before the padding after them.
        assert_eq!(broken(&[(16, b'9'), (31, 1)]), "provider name");
    }

    #[test]
    fn names_are_shown_byte_for_byte_as_ruby_inspects_binary_text() {
        assert_eq!(quoted(b"n-mber"), "\"n-mber\"");
        assert_eq!(
            quoted(b"a\x00\x7f\x1b\x07\x08\x0c\x0b\n\t\r\"\\\xff\xc3\xa9"),
            r#""a\x00\x7F\e\a\b\f\v\n\t\r\"\\\xFF\xC3\xA9""#
        );
        assert_eq!(quoted(b"#{x}#$y#@z#w"), r#""\#{x}\#$y\#@z#w""#);
        assert_eq!(hex(&[0, 1, 0xab]), "0001ab");
    }
}
