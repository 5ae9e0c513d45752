//! `parse` over files that break the format: truncated ones, wrong magic or
//! version, absurd sizes and counts, bad stamps, bad table entries, and
//! random mutations of valid files. Each gives an error that says what is
//! wrong and where, never a panic; and what parse allocates follows the
//! input's length, never a size the file claims (a counting allocator
//! watches). The hostile corpus (hostile/corpus.txt), which the command's
//! specs hold the reader to as well, gives each case's exact message.
//!
//! `PROPTEST_CASES=n` runs more mutations (under Miri, pass it through with
//! `MIRIFLAGS=-Zmiri-env-forward=PROPTEST_CASES`).

mod proptest_setup;
mod ring_support;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest_setup::config as proptest_config;
use ring_support::{config, HeapRing};
use stapsdt::ring::format::{first_stamp, later_stamp, offset, COMPLETE};
use stapsdt::ring::scan::{self, Pass};
use stapsdt::ring::{parse, Arg, FormatError, Trace, Value};
use stapsdt::ArgType;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

#[cfg(not(miri))]
const MUTATION_CASES: u32 = 2000;
#[cfg(miri)]
const MUTATION_CASES: u32 = 4;

/// Every corpus case, or under Miri (which looks for undefined behaviour,
/// not for messages, at a hundred times the cost) every eighth.
#[cfg(not(miri))]
const CORPUS_STRIDE: usize = 1;
#[cfg(miri)]
const CORPUS_STRIDE: usize = 8;

/// The system allocator, noting the largest block asked for on this thread
/// while it measures.
struct Counting;

thread_local! {
    static MEASURING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // try_with: a thread being torn down allocates too.
    let _ = MEASURING.try_with(|measuring| {
        if measuring.get() {
            LARGEST.with(|largest| largest.set(largest.get().max(size)));
        }
    });
}

// SAFETY: every call is passed on to System unchanged; `note` allocates
// nothing (its thread-locals are const-initialized).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for alloc.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as for alloc.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for alloc.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Messages and the like: allowed whatever the input.
const SMALL: usize = 4096;

/// `parse`, and the largest block it allocated: a small multiple of the
/// input at most (a record read back takes more memory than its 32 bytes
/// of slot, a probe more than its 24 bytes of entry).
fn measured_parse(bytes: &[u8]) -> Result<Trace, FormatError> {
    measured(bytes, parse)
}

/// `read` of `bytes`, and the largest block it allocated: as for `parse`.
fn measured<T>(bytes: &[u8], read: impl FnOnce(&[u8]) -> T) -> T {
    LARGEST.with(|largest| largest.set(0));
    MEASURING.with(|measuring| measuring.set(true));
    let result = read(bytes);
    MEASURING.with(|measuring| measuring.set(false));
    let largest = LARGEST.with(Cell::get);
    assert!(
        largest <= 8 * bytes.len() + SMALL,
        "{largest} bytes allocated at once for a {}-byte input",
        bytes.len()
    );
    result
}

/// A ring of 16 slots holding records of every type, one wrapping from the
/// last position to the first, and what it reads back as.
struct Files {
    /// The live ring's bytes (no `complete` flag).
    live: Vec<u8>,
    /// A snapshot of it: a trace file.
    trace: Vec<u8>,
    parsed: Trace,
}

const RING_OFFSET: usize = 8192;
const SLOT_COUNT: u64 = 16;

fn files() -> Files {
    let ring = HeapRing::new(&config(SLOT_COUNT, true));
    let int = ring
        .add_probe("app", "int", &[ArgType::Int64], Some(0), None)
        .unwrap();
    let pair = ring
        .add_probe(
            "app",
            "pair",
            &[ArgType::Float64, ArgType::String],
            None,
            Some(1),
        )
        .unwrap();
    for round in 0..3 {
        assert!(ring.record_integer(int, round, 1, -7));
        // 8 + 2 + 40 = 50 bytes: 3 slots.
        assert!(ring.record(pair, round, 2, &[Arg::Float(0.25), Arg::Str(&[b'q'; 40])]));
        assert!(ring.record_integer(int, round, 3, 7));
    }
    // Seq 0 to 14 so far: one more 3-slot record wraps (positions 15, 0,
    // 1), over seq 0 and the first slot of seq 1 to 3.
    assert!(ring.record(pair, 9, 2, &[Arg::Float(1.5), Arg::Str(&[b'w'; 40])]));
    let trace = in_ring_layout(&ring.snapshot());
    let files = Files {
        live: ring.bytes(),
        parsed: parse(&trace).unwrap(),
        trace,
    };
    assert_eq!(files.parsed.counters.head, 18);
    assert_eq!(files.parsed.records.len(), 8);
    assert_eq!(files.parsed.counters.records, 10);
    files
}

/// A snapshot (sized to what it holds: its table's capacity is what the
/// table uses) laid out as the live ring is, its slots at `RING_OFFSET`, so
/// that one set of offsets serves both files here. A trace file may have
/// any table capacity: this one is as valid.
fn in_ring_layout(snapshot: &[u8]) -> Vec<u8> {
    let ring_offset = u64::from_le_bytes(
        snapshot[offset::RING_OFFSET..offset::RING_OFFSET + 8]
            .try_into()
            .unwrap(),
    ) as usize;
    let mut bytes = snapshot[..ring_offset].to_vec();
    bytes.resize(RING_OFFSET, 0);
    bytes.extend_from_slice(&snapshot[ring_offset..]);
    put_u64(
        &mut bytes,
        offset::TABLE_CAPACITY,
        (RING_OFFSET - 4096) as u64,
    );
    put_u64(&mut bytes, offset::RING_OFFSET, RING_OFFSET as u64);
    bytes
}

fn put(bytes: &mut [u8], at: usize, value: &[u8]) {
    bytes[at..at + value.len()].copy_from_slice(value);
}

fn put_u64(bytes: &mut [u8], at: usize, value: u64) {
    put(bytes, at, &value.to_le_bytes());
}

fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    put(bytes, at, &value.to_le_bytes());
}

fn slot(position: u64) -> usize {
    RING_OFFSET + 32 * position as usize
}

/// The position and sequence number of the first record with `slots` slots.
fn first_of(files: &Files, slots: u64) -> (u64, u64) {
    let record = files
        .parsed
        .records
        .iter()
        .find(|record| record.slots == slots)
        .unwrap();
    (record.seq % SLOT_COUNT, record.seq)
}

fn refused(bytes: &[u8], expected: &str) {
    match measured_parse(bytes) {
        Ok(_) => panic!("accepted, expected an error about {expected:?}"),
        Err(err) => assert!(
            err.message().contains(expected),
            "expected {expected:?} in {:?}",
            err.message()
        ),
    }
}

#[test]
fn the_files_to_break_read_back() {
    let files = files();
    let live = measured_parse(&files.live).unwrap();
    assert_eq!(live.records, files.parsed.records);
    assert!(files.parsed.header.complete() && !live.header.complete());
}

#[test]
fn files_that_are_not_ring_files_or_are_cut_short() {
    let files = files();
    let not_ours = "not a static_tracing ring or trace file";
    // What could be the start of a file of ours is one cut short.
    refused(
        b"",
        "truncated: it has 0 bytes, less than its 4096-byte header",
    );
    refused(b"STAT", "truncated: it has 4 bytes");
    refused(b"STAX", not_ours);
    refused(b"STATRACX\x01\x00\x00\x00", not_ours);
    let mut version = files.live.clone();
    put_u32(&mut version, offset::VERSION, 3);
    refused(
        &version,
        "format version (offset 8): expected 1 or 2 (the versions this static-tracing reads), found 3",
    );
    refused(&version[..10], "truncated: it has 10 bytes");
    refused(&files.live[..12], "less than its 4096-byte header");
    refused(&files.live[..4095], "truncated: it has 4095 bytes");
    refused(
        &files.live[..RING_OFFSET],
        "truncated: its 16 slots end at byte 8704",
    );
    refused(
        &files.trace[..files.trace.len() - 1],
        "the file has 8703 bytes",
    );
    // More than the slots is fine.
    let mut longer = files.trace.clone();
    longer.extend_from_slice(&[0xff; 100]);
    assert_eq!(
        measured_parse(&longer).unwrap().records,
        files.parsed.records
    );
}

#[test]
fn header_fields_out_of_the_format() {
    let files = files();
    let with = |at: usize, value: u64, wide: bool| {
        let mut bytes = files.live.clone();
        if wide {
            put_u64(&mut bytes, at, value);
        } else {
            put_u32(&mut bytes, at, value as u32);
        }
        bytes
    };
    refused(
        &with(offset::HEADER_SIZE, 4097, false),
        "header field header_size",
    );
    refused(
        &with(offset::TABLE_OFFSET, 0, true),
        "header field table_offset",
    );
    refused(
        &with(offset::SLOT_SIZE, 64, false),
        "header field slot_size",
    );
    refused(
        &with(offset::FLAGS, 4, false),
        "header field flags (offset 52): expected no bits but 0",
    );
    refused(
        &with(offset::TABLE_CAPACITY, 4097, true),
        "header field table_capacity",
    );
    refused(
        &with(offset::TABLE_CAPACITY, 8, true),
        "header field ring_offset",
    );
    refused(
        &with(offset::TABLE_CAPACITY, u64::MAX - 7, true),
        "header field ring_offset",
    );
    refused(
        &with(offset::RING_OFFSET, u64::MAX, true),
        "header field ring_offset",
    );
    refused(
        &with(offset::SLOT_COUNT, 3, true),
        "a power of two in a ring file",
    );
    refused(
        &with(offset::SLOT_COUNT, 0, true),
        "a power of two in a ring file",
    );
    refused(
        &with(offset::SLOT_COUNT, u64::MAX, true),
        "a power of two in a ring file, found 18446744073709551615",
    );
    refused(&with(offset::SLOT_COUNT, 1 << 58, true), "truncated");
    // A ring file's slots start on a page; a trace file's need not.
    let mut unaligned = files.live.clone();
    put_u64(&mut unaligned, offset::TABLE_CAPACITY, 4104);
    put_u64(&mut unaligned, offset::RING_OFFSET, 4096 + 4104);
    refused(&unaligned, "a multiple of 4096 in a ring file");
    // In a trace file, no power of two either: 15 slots of the 16 read.
    let mut fifteen = files.trace.clone();
    put_u64(&mut fifteen, offset::SLOT_COUNT, 15);
    let trace = measured_parse(&fifteen);
    assert!(trace.is_ok() || trace.unwrap_err().message().contains("stamp of slot"));
}

#[test]
fn counters_and_table_entries_out_of_the_format() {
    let files = files();
    let with = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut bytes = files.trace.clone();
        edit(&mut bytes);
        bytes
    };
    refused(
        &with(&|b| put_u32(b, offset::TABLE_USED, 4097)),
        "header field table_used",
    );
    refused(
        &with(&|b| put_u32(b, offset::TABLE_USED, 12)),
        "a multiple of 8 at most table_capacity",
    );
    refused(
        &with(&|b| put_u32(b, offset::TABLE_USED, u32::MAX)),
        "header field table_used",
    );
    refused(
        &with(&|b| put_u32(b, offset::TABLE_USED, 8)),
        "probe table entry 0 entry (offset 4096): expected a 16-byte entry header before table_used (8)",
    );
    // Entry 0 is 24 bytes ("app" "int"), entry 1 from 4120.
    refused(
        &with(&|b| put(b, 4096, &[0, 0])),
        "probe table entry 0 entry_size",
    );
    refused(
        &with(&|b| put(b, 4096, &[12, 0])),
        "entry_size (offset 4096): expected a multiple of 8",
    );
    refused(
        &with(&|b| put(b, 4120, &[0xf8, 0xff])),
        "at most the 24 bytes left before table_used (48)",
    );
    refused(
        &with(&|b| put(b, 4098, &[7])),
        "probe table entry 0 arg_count (offset 4098)",
    );
    refused(&with(&|b| put(b, 4104, &[9])), "types[0] (offset 4104)");
    refused(
        &with(&|b| put(b, 4105, &[1])),
        "types[1] (offset 4105): expected 0 (past arg_count 1)",
    );
    refused(&with(&|b| put(b, 4101, &[3])), "latency_arg (offset 4101)");
    refused(
        &with(&|b| put(b, 4126, &[0])),
        "probe table entry 1 stack_arg",
    );
    refused(
        &with(&|b| put(b, 4099, &[0])),
        "provider_len (offset 4099): expected 1 to 128",
    );
    refused(
        &with(&|b| put(b, 4112, b"9")),
        "provider name (offset 4112)",
    );
    refused(&with(&|b| put(b, 4115, b"i-t")), "probe name (offset 4115)");
    refused(
        &with(&|b| put_u64(b, offset::RECORDS, 4)),
        "header field records (offset 192): expected at least the 8 records",
    );
}

#[test]
fn stamps_and_records_out_of_the_format() {
    let files = files();
    let (one, one_seq) = first_of(&files, 1);
    let (three, three_seq) = first_of(&files, 3);
    let with = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut bytes = files.trace.clone();
        edit(&mut bytes);
        bytes
    };
    let head = 18;
    refused(
        &with(&|b| put_u64(b, slot(one), first_stamp(one_seq + 16, 1))),
        "expected a sequence number below head (18), found",
    );
    refused(
        &with(&|b| put_u64(b, slot(one), first_stamp(one_seq + 1, 1))),
        "a sequence number congruent to its position",
    );
    refused(
        &with(&|b| put_u64(b, slot(one), first_stamp(one_seq, 0))),
        "a first slot's count of slots from 1",
    );
    refused(
        &with(&|b| put_u64(b, slot(one), first_stamp(one_seq, 17))),
        "a record of at most slot_count (16) slots",
    );
    refused(
        &with(&|b| put_u64(b, offset::HEAD, one_seq + 1)),
        "a sequence number below head",
    );
    refused(
        &with(&|b| put_u64(b, slot(three), first_stamp(three_seq, 13))),
        &format!("a record that ends by head ({head})"),
    );
    refused(
        &with(&|b| put_u64(b, slot(one), 5 << 16)),
        "index 0 with bit 15 clear",
    );
    refused(
        &with(&|b| put_u64(b, slot(three + 1), later_stamp(three_seq + 16, 1))),
        "stamp of slot",
    );
    refused(
        &with(&|b| put_u32(b, slot(one) + 16, 2)),
        "probe id (offset",
    );
    // The largest probe id short of a context record's.
    refused(
        &with(&|b| put(b, slot(one) + 16, &[0xfe, 0xff, 0x0f, 0])),
        "expected below 2 (the probe table's entries), found 1048574",
    );
    // The Float and String record: 8 + 2 + 40 bytes in 3 slots (56 bytes).
    refused(
        &with(&|b| b[slot(three + 2) + 31] = 1),
        "padding for probe app:pair(Float, String)",
    );
    refused(
        &with(&|b| put(b, slot(three + 1) + 8, &[47])),
        "to end within the 56 payload bytes of its 3 slots",
    );
    refused(
        &with(&|b| put(b, slot(three + 1) + 8, &[2])),
        "slot count for probe app:pair(Float, String)",
    );
    refused(
        &with(&|b| put_u32(b, offset::MAX_STRING, 39)),
        "argument 1 (String) length (offset",
    );
    // A record whose later slot is being written is not whole: passed over.
    let mut torn = files.trace.clone();
    put_u64(&mut torn, slot(three + 2), 0);
    let trace = measured_parse(&torn).unwrap();
    assert_eq!(trace.records.len(), 7);
    assert_eq!(trace.lost(), files.parsed.lost() + 1);
}

#[test]
fn absurd_sizes_allocate_nothing_to_match() {
    let files = files();
    // A trace file's header alone, claiming the largest table and ring
    // that fit the fields, and counters to match.
    let mut bytes = files.trace[..4096].to_vec();
    let capacity = (u64::MAX - 4096) & !7;
    put_u64(&mut bytes, offset::TABLE_CAPACITY, capacity);
    put_u64(&mut bytes, offset::RING_OFFSET, 4096 + capacity);
    put_u64(&mut bytes, offset::SLOT_COUNT, u64::MAX / 32);
    put_u32(&mut bytes, offset::TABLE_USED, u32::MAX - 7);
    put_u64(&mut bytes, offset::HEAD, u64::MAX);
    put_u64(&mut bytes, offset::RECORDS, u64::MAX);
    refused(
        &bytes,
        "truncated: its 576460752303423487 slots end at byte",
    );
    put_u64(&mut bytes, offset::SLOT_COUNT, u64::MAX);
    refused(&bytes, "truncated");
    // Sizes that agree with the file: the table's 4 KiB of zeros is an
    // entry of size 0, its names of length 0, which is what is reported.
    let mut zeros = files.trace.clone();
    put_u32(&mut zeros, offset::TABLE_USED, 4096);
    zeros[4096..8192].fill(0);
    refused(
        &zeros,
        "probe table entry 0 provider_len (offset 4099): expected 1 to 128, found 0",
    );
}

/// One case of the hostile corpus: the base file, the edits that break it,
/// and the message it is refused with.
struct Case {
    name: String,
    complete: bool,
    edits: Vec<Edit>,
    refused: String,
}

enum Edit {
    Put(usize, Vec<u8>),
    Cut(usize),
}

/// The corpus, read at build time: under Miri too, which opens no files.
const CORPUS: &str = include_str!("hostile/corpus.txt");

fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    for paragraph in CORPUS.split("\n\n") {
        let lines: Vec<&str> = paragraph
            .lines()
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .collect();
        if lines.is_empty() {
            continue;
        }
        let mut case = Case {
            name: String::new(),
            complete: false,
            edits: Vec::new(),
            refused: String::new(),
        };
        for line in lines {
            let (key, value) = line
                .split_once(": ")
                .unwrap_or_else(|| panic!("corpus line without \"key: \": {line:?}"));
            match key {
                "case" => case.name = value.to_owned(),
                "base" => case.complete = base_is_complete(value),
                "edit" => case.edits.push(edit(value)),
                "refused" => case.refused = value.to_owned(),
                _ => panic!("corpus line of an unknown key: {line:?}"),
            }
        }
        assert!(
            !case.name.is_empty() && !case.refused.is_empty(),
            "a corpus case needs a name and a message: {paragraph:?}"
        );
        cases.push(case);
    }
    cases
}

fn base_is_complete(base: &str) -> bool {
    match base {
        "ring" => false,
        "trace" => true,
        _ => panic!("unknown corpus base {base:?}"),
    }
}

fn edit(edit: &str) -> Edit {
    let words: Vec<&str> = edit.split_whitespace().collect();
    let number = |word: &str| {
        match word.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => word.parse(),
        }
        .unwrap_or_else(|_| panic!("not a number in {edit:?}"))
    };
    match words[..] {
        ["cut", len] => Edit::Cut(number(len) as usize),
        ["bytes", at, hex] => {
            assert!(hex.len() % 2 == 0, "odd hex digits in {edit:?}");
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|at| u8::from_str_radix(&hex[at..at + 2], 16).unwrap())
                .collect();
            Edit::Put(number(at) as usize, bytes)
        }
        [width, at, value] => {
            let len = match width {
                "u8" => 1,
                "u16" => 2,
                "u32" => 4,
                "u64" => 8,
                _ => panic!("unknown width in corpus edit {edit:?}"),
            };
            let value = number(value);
            assert!(
                len == 8 || value >> (8 * len) == 0,
                "{value} does not fit in {edit:?}"
            );
            Edit::Put(number(at) as usize, value.to_le_bytes()[..len].to_vec())
        }
        _ => panic!("unknown corpus edit {edit:?}"),
    }
}

/// The corpus's base file, made by the ring's writer: a ring of 8 slots
/// holding app:number(Integer) records 1 and 3 and app:text(String)
/// "hello"; with `complete`, the same bytes flagged a trace file.
fn corpus_base(complete: bool) -> Vec<u8> {
    let ring = HeapRing::new(&config(8, false));
    let number = ring
        .add_probe("app", "number", &[ArgType::Int64], Some(0), None)
        .unwrap();
    let text = ring
        .add_probe("app", "text", &[ArgType::String], None, Some(0))
        .unwrap();
    assert!(ring.record_integer(number, 1_000, 7, 1));
    assert!(ring.record(text, 1_000, 7, &[Arg::Str(b"hello")]));
    assert!(ring.record_integer(number, 1_000, 7, 3));
    let mut bytes = ring.bytes();
    if complete {
        put_u32(&mut bytes, offset::FLAGS, COMPLETE);
    }
    bytes
}

/// What reading `bytes` came to, as a failed case shows it.
fn outcome<E: std::fmt::Display>(result: Result<Trace, E>) -> String {
    match result {
        Ok(trace) => format!("read {} records", trace.records.len()),
        Err(err) => format!("refused with {:?}", err.to_string()),
    }
}

#[test]
fn the_hostile_corpus_is_refused_with_its_messages() {
    let bases = [corpus_base(false), corpus_base(true)];
    for (base, complete) in bases.iter().zip([false, true]) {
        let trace = measured_parse(base).unwrap();
        let args: Vec<_> = trace.records.iter().map(|record| &record.args).collect();
        let hello = Value::Str(b"hello".to_vec());
        assert_eq!(args, [&[Value::Int(1)][..], &[hello], &[Value::Int(3)]]);
        assert_eq!(trace.header.complete(), complete);
        assert_eq!((trace.counters.head, trace.counters.table_used), (3, 56));
    }
    let cases = corpus();
    assert!(cases.len() > 50, "only {} cases read", cases.len());
    let mut wrong = Vec::new();
    for case in cases.iter().step_by(CORPUS_STRIDE) {
        let mut bytes = bases[usize::from(case.complete)].clone();
        for edit in &case.edits {
            match edit {
                Edit::Put(at, value) => put(&mut bytes, *at, value),
                Edit::Cut(len) => bytes.truncate(*len),
            }
        }
        let expected = outcome::<&str>(Err(&case.refused));
        // As the command reads it: a ring at a cut, a trace file once.
        let live = outcome(measured(&bytes, |bytes| scan::read(bytes, Pass::Live)));
        // Read once, as a snapshot is read, a file that nothing writes is
        // refused alike: no case hides in the slots past a live ring's
        // head on its first lap, which a read at a cut leaves unread.
        let once = outcome(measured_parse(&bytes));
        if live != expected || once != expected {
            wrong.push(format!(
                "{}:\n  expected: {expected}\n  at a cut: {live}\n  once: {once}",
                case.name
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A change to a valid file.
#[derive(Clone, Debug)]
enum Mutation {
    Byte(Index, u8),
    /// A u64 at an 8-aligned offset, from values that make sizes absurd or
    /// stamps plausible.
    Word(Index, u64),
    Truncate(Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let word = prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(1 << 48),
        Just(first_stamp(3, 1)),
        Just(later_stamp(1, 1)),
        (0u64..40, 0u64..6).prop_map(|(seq, slots)| first_stamp(seq, slots)),
        any::<u64>(),
    ];
    prop_oneof![
        6 => (any::<Index>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Byte(at, byte)),
        3 => (any::<Index>(), word).prop_map(|(at, word)| Mutation::Word(at, word)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
    ]
}

/// Where mutations land: anywhere, or where the interesting bytes are.
fn at(bytes: &[u8], index: &Index) -> usize {
    // The header's first 512 bytes, the table's first 64, the slots.
    let regions = [
        (0, 512),
        (4096, 64),
        (RING_OFFSET, bytes.len().saturating_sub(RING_OFFSET)),
    ];
    let (start, len) = regions[index.index(regions.len())];
    let len = len.min(bytes.len().saturating_sub(start));
    if len == 0 {
        return index.index(bytes.len().max(1));
    }
    start + index.index(len)
}

proptest! {
    #![proptest_config(proptest_config(MUTATION_CASES))]

    #[test]
    fn mutated_files_read_or_are_refused_never_panic(
        trace in any::<bool>(),
        mutations in prop::collection::vec(mutation(), 1..8),
    ) {
        let files = files();
        let mut bytes = if trace { files.trace } else { files.live };
        for mutation in &mutations {
            match mutation {
                Mutation::Byte(index, byte) => {
                    if !bytes.is_empty() {
                        let at = at(&bytes, index);
                        bytes[at] = *byte;
                    }
                }
                Mutation::Word(index, word) => {
                    let at = at(&bytes, index) & !7;
                    if at + 8 <= bytes.len() {
                        put_u64(&mut bytes, at, *word);
                    }
                }
                Mutation::Truncate(index) => bytes.truncate(index.index(bytes.len() + 1)),
            }
        }
        match measured_parse(&bytes) {
            Ok(trace) => {
                prop_assert!(trace.records.len() as u64 <= trace.counters.records);
                prop_assert!(trace.records.windows(2).all(|pair| pair[0].seq < pair[1].seq));
            }
            Err(err) => prop_assert!(!err.message().is_empty()),
        }
    }
}
