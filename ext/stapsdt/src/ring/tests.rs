//! The ring over heap memory: what it writes, word by word, and what the
//! reader and the snapshot make of it, tampered with or not. These run
//! under Miri too (`rake cargo:miri`), which checks the region's accesses.

use super::format::{self, first_stamp, later_stamp, offset, COMPLETE, OVERWRITE};
use super::*;
use crate::ArgType;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// A ring's memory, as a mapping would give it: zeroed, 8-aligned. Words
/// are atomics so that the test can read them while the ring lives.
struct Memory {
    words: Box<[AtomicU64]>,
}

impl Memory {
    fn new(config: &RingConfig) -> Memory {
        let words = (0..config.file_len() / 8)
            .map(|_| AtomicU64::new(0))
            .collect();
        Memory { words }
    }

    fn ring(&self, config: &RingConfig) -> Ring {
        // SAFETY: the words are zeroed, 8-aligned, outlive the ring (every
        // test drops it first) and are otherwise only read, through atomics.
        unsafe { Ring::create(self.words.as_ptr().cast_mut().cast(), config) }.unwrap()
    }

    fn word(&self, at: usize) -> u64 {
        self.words[at / 8].load(Relaxed)
    }

    fn set_word(&self, at: usize, value: u64) {
        self.words[at / 8].store(value, Relaxed);
    }

    /// The slot word `word` of position `position`.
    fn slot_word(&self, config: &RingConfig, position: u64, word: usize) -> u64 {
        self.word(slot_at(config, position) + 8 * word)
    }

    fn bytes(&self) -> Vec<u8> {
        self.words
            .iter()
            .flat_map(|word| word.load(Relaxed).to_le_bytes())
            .collect()
    }
}

fn slot_at(config: &RingConfig, position: u64) -> usize {
    (config.ring_offset() + position * 32) as usize
}

fn config(slot_count: u64, overwrite: bool) -> RingConfig {
    RingConfig {
        slot_count,
        table_capacity: 4096,
        overwrite,
        pid: 4242,
        pid_namespace: 4026531836,
        anchor_monotonic_ns: 1_000_000,
        anchor_realtime_ns: 1_700_000_000_000_000_000,
    }
}

fn snapshot(ring: &Ring) -> Trace {
    parse(&ring.snapshot()).unwrap()
}

fn seqs(trace: &Trace) -> Vec<u64> {
    trace.records.iter().map(|record| record.seq).collect()
}

#[test]
fn a_new_ring_has_its_header_and_nothing_else() {
    let config = config(16, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let live = parse(&memory.bytes()).unwrap();
    assert_eq!(live.header, config.header());
    assert_eq!(live.header.flags, OVERWRITE);
    assert_eq!(live.header.ring_offset, 8192);
    assert_eq!(live.counters, Counters::default());
    assert!(live.probes.is_empty() && live.records.is_empty());
    let bytes = memory.bytes();
    assert!(bytes[format::FIELDS_END..].iter().all(|&byte| byte == 0));

    let trace = snapshot(&ring);
    assert_eq!(trace.header.flags, OVERWRITE | COMPLETE);
    // Sized to what it holds: nothing but its header.
    assert_eq!(trace.header.slot_count, 0);
    assert_eq!(ring.snapshot().len() as u64, format::HEADER_SIZE);
    drop(ring);
}

#[test]
fn probes_get_ids_in_order_and_their_entries() {
    let config = config(16, false);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let types = [ArgType::Int64, ArgType::String];
    assert_eq!(
        ring.add_probe("app", "done", &types, Some(0), Some(1)),
        Ok(0)
    );
    assert_eq!(ring.add_probe("app", "start", &[], None, None), Ok(1));
    assert_eq!(ring.counters().table_used, 24 + 24);
    assert_eq!(memory.word(4096) & 0xffff, 24, "entry_size of entry 0");

    let trace = parse(&memory.bytes()).unwrap();
    let done = &trace.probes[0];
    assert_eq!(
        (done.provider.as_str(), done.name.as_str()),
        ("app", "done")
    );
    assert_eq!(
        (done.types.as_slice(), done.latency_arg, done.stack_arg),
        (&types[..], Some(0), Some(1))
    );
    assert_eq!(trace.probes[1].id, 1);
    assert_eq!(snapshot(&ring).probes, trace.probes);

    let refused = ring
        .add_probe("app", "bad-name", &[], None, None)
        .unwrap_err();
    assert!(
        matches!(refused, TableError::Entry(format::EntryError::Name(_))),
        "{refused:?}"
    );
    let refused = ring.add_probe("app", "lat", &[ArgType::Float64], Some(0), None);
    assert_eq!(
        refused,
        Err(TableError::Entry(format::EntryError::LatencyArg(0)))
    );
    assert_eq!(ring.counters().table_used, 48, "nothing appended");
    drop(ring);
}

#[test]
fn a_full_table_refuses_the_probe_that_does_not_fit() {
    let config = config(16, false);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let long = "p".repeat(128);
    // 272 bytes an entry: 15 fit in 4096.
    for id in 0..15 {
        assert_eq!(
            ring.add_probe(
                &long,
                &format!("{id:0>128}").replacen('0', "q", 1),
                &[],
                None,
                None
            ),
            Ok(id)
        );
    }
    let refused = ring.add_probe(&long, &"r".repeat(128), &[], None, None);
    assert_eq!(refused, Err(TableError::Full { capacity: 4096 }));
    assert!(refused.unwrap_err().to_string().contains("full"));
    // 16 bytes left: not even the smallest entry (24) fits.
    assert_eq!(
        ring.add_probe("a", "b", &[], None, None),
        Err(TableError::Full { capacity: 4096 })
    );
    assert_eq!(ring.counters().table_used, 15 * 272);
    assert_eq!(snapshot(&ring).probes.len(), 15);
    drop(ring);
}

#[test]
fn record_integer_fills_one_slot_as_the_format_says() {
    let config = config(8, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let probe = ring
        .add_probe("app", "done", &[ArgType::Int64], Some(0), None)
        .unwrap();
    let other = ring
        .add_probe("app", "other", &[ArgType::Int64], None, None)
        .unwrap();
    assert!(ring.record_integer(probe, 5_000, 77, -3));
    let largest_tid = (1 << format::TID_BITS) - 1;
    assert!(ring.record_integer(other, 6_000, largest_tid, i64::MAX));
    assert_eq!(memory.slot_word(&config, 0, 0), first_stamp(0, 1));
    assert_eq!(memory.slot_word(&config, 0, 1), 5_000);
    assert_eq!(memory.slot_word(&config, 0, 2), 77 << 32);
    assert_eq!(memory.slot_word(&config, 0, 3), -3i64 as u64);
    assert_eq!(memory.slot_word(&config, 1, 0), first_stamp(1, 1));
    assert_eq!(
        memory.slot_word(&config, 1, 2),
        1 | (u64::from(largest_tid) << 32)
    );
    let counters = ring.counters();
    assert_eq!(
        (counters.head, counters.records, counters.dropped),
        (2, 2, 0)
    );

    let trace = parse(&memory.bytes()).unwrap();
    assert_eq!(
        trace.records[0],
        Record {
            seq: 0,
            slots: 1,
            time_ns: 5_000,
            probe,
            tid: 77,
            tag: format::NO_CONTEXT,
            args: vec![Value::Int(-3)],
            context: Context::None,
        }
    );
    assert_eq!(trace.records[1].args, [Value::Int(i64::MAX)]);
    assert_eq!(snapshot(&ring).records, trace.records);
    drop(ring);
}

#[test]
fn records_take_the_slots_their_payload_needs_and_wrap() {
    let config = config(8, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let types = [ArgType::String, ArgType::Float64, ArgType::Int64];
    let probe = ring
        .add_probe("app", "query", &types, Some(2), Some(0))
        .unwrap();
    // 2 + 11 + 8 + 8 = 29 bytes: 2 slots.
    let args = [Arg::Str(b"SELECT 1 -- "), Arg::Float(-0.5), Arg::Int(42)];
    assert!(ring.record(probe, 1, 2, &args));
    assert_eq!(memory.slot_word(&config, 0, 0), first_stamp(0, 2));
    assert_eq!(memory.slot_word(&config, 1, 0), later_stamp(0, 1));
    // The payload's first 8 bytes: the length, then "SELECT".
    assert_eq!(
        memory.slot_word(&config, 0, 3).to_le_bytes(),
        *b"\x0c\x00SELECT"
    );
    // 30 bytes: 8 + 22 in the second slot, then zeros.
    let last = memory.slot_word(&config, 1, 3).to_le_bytes();
    assert_eq!(&last[..6], &42i64.to_le_bytes()[2..]);
    assert_eq!(&last[6..], &[0, 0]);

    // 2 + 40 + 8 + 8 = 58 bytes: 4 slots, from seq 2 (positions 2 to 5)
    // then from seq 6 (positions 6, 7, 0, 1: over seq 0's record).
    let long = [Arg::Str(&[b'x'; 40]), Arg::Float(f64::NAN), Arg::Int(-1)];
    for time in 0..2 {
        assert!(ring.record(probe, time, 3, &long));
    }
    assert_eq!(ring.counters().head, 10);
    assert_eq!(memory.slot_word(&config, 0, 0), later_stamp(6, 2));
    let trace = parse(&memory.bytes()).unwrap();
    assert_eq!(seqs(&trace), [2, 6]);
    let expected: Vec<Value> = long.iter().map(Value::of).collect();
    assert_eq!(trace.records[1].args, expected);
    assert_eq!(trace.records[1].time_ns, 1);
    // Seq 10 over the first slot of seq 2's record: its later slots are
    // passed over.
    assert!(ring.record(probe, 9, 3, &args));
    let trace = parse(&memory.bytes()).unwrap();
    assert_eq!(seqs(&trace), [6, 10]);
    assert_eq!(
        trace.records[1].args,
        args.iter().map(Value::of).collect::<Vec<_>>()
    );
    assert_eq!(trace.lost(), 2);
    assert_eq!(snapshot(&ring).records, trace.records);
    drop(ring);
}

#[test]
fn strings_are_cut_at_max_string_and_may_be_empty() {
    let config = config(64, false);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let probe = ring
        .add_probe("app", "s", &[ArgType::String, ArgType::String], None, None)
        .unwrap();
    let long: Vec<u8> = (0..2000).map(|i| i as u8).collect();
    assert!(ring.record(probe, 0, 0, &[Arg::Str(&long), Arg::Str(b"")]));
    let trace = snapshot(&ring);
    assert_eq!(
        trace.records[0].args,
        [Value::Str(long[..1024].to_vec()), Value::Str(Vec::new())]
    );
    assert_eq!(trace.records[0].slots, format::slots_for(2 + 1024 + 2));
    drop(ring);
}

#[test]
fn records_that_do_not_match_their_probe_are_dropped_and_counted() {
    let config = config(8, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let probe = ring
        .add_probe("app", "p", &[ArgType::Int64], None, None)
        .unwrap();
    let strings = ring
        .add_probe("app", "s", &[ArgType::String], None, None)
        .unwrap();
    assert!(!ring.record_integer(strings, 0, 0, 1));
    assert!(!ring.record_integer(7, 0, 0, 1), "not in the table");
    assert!(!ring.record(probe, 0, 0, &[Arg::Float(1.0)]));
    assert!(!ring.record(probe, 0, 0, &[]));
    assert!(!ring.record(probe, 0, 0, &[Arg::Int(1), Arg::Int(2)]));
    assert!(!ring.record(9, 0, 0, &[Arg::Int(1); 7]));
    assert!(!ring.record(strings, 0, 0, &[Arg::Int(1)]));
    ring.count_dropped();
    let counters = ring.counters();
    assert_eq!(
        (counters.head, counters.records, counters.dropped),
        (0, 0, 8)
    );
    assert!(
        ring.record(probe, 0, 0, &[Arg::Int(1)]),
        "the general path takes one Integer too"
    );
    assert_eq!(snapshot(&ring).lost(), 8);
    drop(ring);
}

#[test]
fn without_overwrite_a_full_ring_drops_until_the_reader_consumes() {
    let config = config(8, false);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let probe = ring
        .add_probe("app", "p", &[ArgType::Int64], None, None)
        .unwrap();
    let strings = ring
        .add_probe("app", "s", &[ArgType::String], None, None)
        .unwrap();
    for value in 0..8 {
        assert!(ring.record_integer(probe, 0, 0, value));
    }
    assert!(!ring.record_integer(probe, 0, 0, 8));
    assert!(!ring.record(strings, 0, 0, &[Arg::Str(b"0123456789")]));
    assert_eq!(ring.counters().dropped, 2);
    ring.store_tail(3);
    // Two slots: fits; then one more; then full again.
    assert!(ring.record(strings, 0, 0, &[Arg::Str(b"0123456789")]));
    assert!(ring.record_integer(probe, 0, 0, 9));
    assert!(!ring.record_integer(probe, 0, 0, 10));
    let trace = snapshot(&ring);
    assert_eq!(seqs(&trace), [3, 4, 5, 6, 7, 8, 10]);
    assert_eq!(
        (
            trace.counters.head,
            trace.counters.records,
            trace.counters.dropped
        ),
        (11, 10, 3)
    );
    assert_eq!(trace.counters.tail, 0, "a trace file has no reader");
    // Records 0 to 2 were consumed: the ring lost none of them, but this
    // copy, taken after, does not hold them.
    assert_eq!(trace.lost(), 3 + 3);
    drop(ring);
}

#[test]
fn a_record_larger_than_the_ring_is_dropped() {
    let config = config(2, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let probe = ring
        .add_probe("app", "s", &[ArgType::String], None, None)
        .unwrap();
    assert!(
        ring.record(probe, 0, 0, &[Arg::Str(&[b'a'; 30])]),
        "2 slots: fits"
    );
    assert!(
        !ring.record(probe, 0, 0, &[Arg::Str(&[b'a'; 31])]),
        "3 slots"
    );
    let counters = ring.counters();
    assert_eq!(
        (counters.head, counters.records, counters.dropped),
        (2, 1, 1)
    );
    drop(ring);
}

#[test]
fn a_writer_gives_up_a_slot_held_by_another_or_holding_a_newer_record() {
    let config = config(4, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let probe = ring
        .add_probe("app", "p", &[ArgType::Int64], None, None)
        .unwrap();
    for value in 0..4 {
        assert!(ring.record_integer(probe, 0, 0, value));
    }
    // Another writer took position 0 (for seq 4, 8, ...) and is writing it:
    // the writer of seq 4 finds it held.
    memory.set_word(slot_at(&config, 0), 0);
    assert!(!ring.record_integer(probe, 0, 0, 4));
    // Position 1 holds a newer record than seq 5's: its writer was lapped.
    memory.set_word(slot_at(&config, 1), first_stamp(9, 1));
    assert!(!ring.record_integer(probe, 0, 0, 5));
    assert_eq!(
        memory.slot_word(&config, 1, 0),
        first_stamp(9, 1),
        "untouched"
    );
    assert_eq!(memory.slot_word(&config, 1, 3), 1, "untouched");
    let counters = ring.counters();
    // Given up, not dropped: they count as lost, as overwritten records do.
    assert_eq!(
        (counters.head, counters.records, counters.dropped),
        (6, 6, 0)
    );
    let trace = snapshot(&ring);
    assert_eq!(seqs(&trace), [2, 3]);
    assert_eq!(trace.lost(), 4);
    drop(ring);
}

#[test]
fn a_writer_that_gives_up_puts_back_the_slots_it_took() {
    let config = config(8, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let probe = ring
        .add_probe("app", "p", &[ArgType::Int64], None, None)
        .unwrap();
    let strings = ring
        .add_probe("app", "s", &[ArgType::String], None, None)
        .unwrap();
    for value in 0..8 {
        assert!(ring.record_integer(probe, 0, 0, value));
    }
    memory.set_word(slot_at(&config, 2), 0);
    // 42 bytes: 3 slots, seq 8 to 10 at positions 0 to 2. It takes 0 and 1,
    // finds 2 held, and puts 0 and 1 back as they were.
    assert!(!ring.record(strings, 0, 0, &[Arg::Str(&[b's'; 40])]));
    assert_eq!(memory.slot_word(&config, 0, 0), first_stamp(0, 1));
    assert_eq!(memory.slot_word(&config, 1, 0), first_stamp(1, 1));
    let trace = snapshot(&ring);
    assert_eq!(seqs(&trace), [0, 1, 3, 4, 5, 6, 7]);
    assert_eq!(trace.lost(), 2);
    // The next writer takes them as usual.
    assert!(ring.record_integer(probe, 0, 0, 11));
    assert_eq!(memory.slot_word(&config, 3, 0), first_stamp(11, 1));
    drop(ring);
}

#[test]
fn a_large_record_that_gives_up_puts_back_every_slot_it_took() {
    let config = config(64, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let probe = ring
        .add_probe("app", "p", &[ArgType::Int64], None, None)
        .unwrap();
    let strings = ring
        .add_probe("app", "s", &[ArgType::String], None, None)
        .unwrap();
    for value in 0..64 {
        assert!(ring.record_integer(probe, 0, 0, value));
    }
    memory.set_word(slot_at(&config, 20), 0);
    // 602 bytes: 26 slots, more than records keep their taken stamps for
    // on the stack's small buffer; it takes 20 of them, then finds one held.
    assert!(!ring.record(strings, 0, 0, &[Arg::Str(&[b's'; 600])]));
    for position in 0..20 {
        assert_eq!(
            memory.slot_word(&config, position, 0),
            first_stamp(position, 1)
        );
    }
    assert_eq!(snapshot(&ring).records.len(), 63);
    drop(ring);
}

#[test]
fn a_slot_given_up_on_its_first_lap_can_be_taken_later() {
    let config = config(4, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let probe = ring
        .add_probe("app", "p", &[ArgType::Int64], None, None)
        .unwrap();
    let strings = ring
        .add_probe("app", "s", &[ArgType::String], None, None)
        .unwrap();
    for value in 0..3 {
        assert!(ring.record_integer(probe, 0, 0, value));
    }
    memory.set_word(slot_at(&config, 0), 0);
    // Seq 3 (position 3, never written) then seq 4 (position 0, held).
    assert!(!ring.record(strings, 0, 0, &[Arg::Str(b"0123456789")]));
    // Not 0, which later writers would take for a slot being written: a
    // later slot's stamp of its own sequence number, which readers pass over.
    assert_eq!(memory.slot_word(&config, 3, 0), (3 << 16) | 1);
    assert_eq!(seqs(&parse(&memory.bytes()).unwrap()), [1, 2]);
    assert_eq!(seqs(&snapshot(&ring)), [1, 2]);
    memory.set_word(slot_at(&config, 0), first_stamp(0, 1));
    for value in 5..8 {
        assert!(ring.record_integer(probe, 0, 0, value));
    }
    assert_eq!(memory.slot_word(&config, 3, 0), first_stamp(7, 1));
    // Seq 0's record is whole again: its holder gave it up too.
    assert_eq!(seqs(&snapshot(&ring)), [0, 5, 6, 7]);
    drop(ring);
}

#[test]
fn a_snapshot_keeps_only_whole_valid_records() {
    let config = config(16, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let probe = ring
        .add_probe("app", "p", &[ArgType::Int64], None, None)
        .unwrap();
    let strings = ring
        .add_probe("app", "s", &[ArgType::String], None, None)
        .unwrap();
    for value in 0..4 {
        assert!(ring.record_integer(probe, 0, 0, value));
        assert!(ring.record(strings, 0, 0, &[Arg::Str(b"0123456789")]));
    }
    // seq 0..12 in records of 1 and 2 slots: 0, 1-2, 3, 4-5, 6, 7-8, 9, 10-11.
    // Being written: the first slot of 4-5 is 0.
    memory.set_word(slot_at(&config, 4), 0);
    // Overwritten: the later slot of 7-8 holds another record's stamp.
    memory.set_word(slot_at(&config, 8), first_stamp(24, 1));
    // Written by another process: a stamp congruent to nothing, and
    // padding that is not zero.
    memory.set_word(slot_at(&config, 9), first_stamp(1, 1));
    memory.set_word(slot_at(&config, 11) + 24, u64::MAX);
    assert!(
        parse(&memory.bytes()).is_err(),
        "the live ring, read as it is"
    );

    let bytes = ring.snapshot();
    let trace = parse(&bytes).unwrap();
    assert_eq!(seqs(&trace), [0, 1, 3, 6]);
    assert_eq!(trace.lost(), 4);
    // The 12 slots written, at their positions in the ring.
    assert_eq!(trace.header.slot_count, 12);
    let in_snapshot = |position: usize| trace.header.ring_offset as usize + 32 * position;
    for position in [4, 5, 7, 8, 9, 10, 11] {
        let at = in_snapshot(position);
        assert_eq!(&bytes[at..at + 32], &[0; 32], "position {position} zeroed");
    }
    // As long as the bytes of what it keeps are.
    let (at, live) = (in_snapshot(1), slot_at(&config, 1));
    assert_eq!(&bytes[at..at + 64], &memory.bytes()[live..live + 64]);
    drop(ring);
}

#[test]
fn a_snapshot_counts_at_least_the_records_it_holds() {
    let config = config(8, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let probe = ring
        .add_probe("app", "p", &[ArgType::Int64], None, None)
        .unwrap();
    for value in 0..3 {
        assert!(ring.record_integer(probe, 0, 0, value));
    }
    memory.set_word(offset::RECORDS, 1);
    memory.set_word(offset::TAIL, 77);
    let trace = snapshot(&ring);
    assert_eq!(trace.records.len(), 3);
    assert_eq!((trace.counters.records, trace.counters.tail), (3, 0));
    drop(ring);
}

#[test]
fn the_writer_does_not_trust_the_shared_table() {
    let config = config(8, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let probe = ring
        .add_probe("app", "p", &[ArgType::Int64], None, None)
        .unwrap();
    // Another process scribbles over the table and table_used.
    memory.set_word(4096, u64::MAX);
    // (table_used is a u32: written as one, as everything is at its size.)
    ring.region
        .header_u32(offset::TABLE_USED)
        .store(4000, Relaxed);
    assert!(ring.record_integer(probe, 0, 0, 1));
    assert_eq!(ring.add_probe("app", "q", &[], None, None), Ok(1));
    // The snapshot's table is this process's.
    let trace = snapshot(&ring);
    assert_eq!(trace.probes.len(), 2);
    assert_eq!(trace.counters.table_used, 24 + 24);
    assert_eq!(trace.records.len(), 1);
    drop(ring);
}

#[test]
fn a_head_moved_by_another_process_stops_the_writers_safely() {
    let config = config(8, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let probe = ring
        .add_probe("app", "p", &[ArgType::Int64], None, None)
        .unwrap();
    assert!(ring.record_integer(probe, 0, 0, 1));
    // Past the first lap, a never-written slot looks held: writers give up.
    memory.set_word(offset::HEAD, (1 << 40) + 1);
    assert!(!ring.record_integer(probe, 0, 0, 2));
    assert_eq!(memory.slot_word(&config, 0, 3), 1);
    memory.set_word(offset::HEAD, u64::MAX);
    assert!(
        !ring.record_integer(probe, 0, 0, 3),
        "at u64::MAX: wraps, no overflow"
    );
    let trace = snapshot(&ring);
    assert_eq!(trace.counters.head, 0);
    assert!(trace.records.is_empty(), "seq 0 is not below head 0");
    drop(ring);
}

#[test]
fn a_ring_is_shared_between_threads() {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Ring>();
}

#[test]
fn create_refuses_an_impossible_geometry() {
    let good = config(8, true);
    let memory = Memory::new(&good);
    let bad = RingConfig {
        slot_count: 6,
        ..good
    };
    // SAFETY: as in Memory::ring (and nothing is written: the config is refused).
    let refused = unsafe { Ring::create(memory.words.as_ptr().cast_mut().cast(), &bad) };
    assert_eq!(refused.err(), Some(ConfigError::SlotCount(6)));
    assert_eq!(memory.word(0), 0, "nothing written");
}

#[test]
#[should_panic(expected = "8-aligned")]
fn create_refuses_memory_that_is_not_8_aligned() {
    let config = config(8, true);
    let memory = Memory::new(&config);
    let base: *mut u8 = memory.words.as_ptr().cast_mut().cast();
    // SAFETY: as in Memory::ring, but for the alignment, which create
    // checks before it writes anything.
    let _ = unsafe { Ring::create(base.wrapping_add(4), &config) };
}

#[test]
fn a_ring_larger_than_a_window_reads_whole_records_across_windows() {
    // Four windows, records of 1 to 3 slots crossing their bounds, the
    // ring wrapped more than once.
    let slots = 4 * super::scan::WINDOW_SLOTS;
    let config = config(slots, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let int = ring
        .add_probe("app", "int", &[ArgType::Int64], None, None)
        .unwrap();
    let text = ring
        .add_probe("app", "text", &[ArgType::String], None, None)
        .unwrap();
    let mut written = Vec::new();
    for value in 0..(slots * 3 / 2) as i64 {
        let string = vec![b'a' + (value % 26) as u8; (value % 50) as usize];
        if value % 3 == 0 {
            assert!(ring.record_integer(int, value as u64, 1, value));
            written.push(vec![Value::Int(value)]);
        } else {
            assert!(ring.record(text, value as u64, 1, &[Arg::Str(&string)]));
            written.push(vec![Value::Str(string)]);
        }
    }
    let live = parse(&memory.bytes()).unwrap();
    let snapshot = snapshot(&ring);
    for trace in [&live, &snapshot] {
        let read: Vec<_> = trace
            .records
            .iter()
            .map(|record| record.args.clone())
            .collect();
        // The newest records, one after another, to the last written.
        assert!(read.len() as u64 > slots / 2, "{} records", read.len());
        assert_eq!(read[..], written[written.len() - read.len()..]);
        let held: u64 = trace.records.iter().map(|record| record.slots).sum();
        assert!(held > slots - 3, "{held} slots held");
    }
    drop(ring);
}

#[test]
fn a_live_ring_read_at_a_cut_leaves_later_records_out_and_counts_none_lost() {
    let config = config(1 << 10, false);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let int = ring
        .add_probe("app", "int", &[ArgType::Int64], None, None)
        .unwrap();
    for value in 0..10 {
        assert!(ring.record_integer(int, 0, 1, value));
    }
    let mut bytes = memory.bytes();
    // Read at a cut of 6 slots: what was written after it is not the
    // reader's, and not lost either.
    let head = offset::HEAD;
    bytes[head..head + 8].copy_from_slice(&6u64.to_le_bytes());
    let records = offset::RECORDS;
    bytes[records..records + 8].copy_from_slice(&6u64.to_le_bytes());
    let trace = scan::read(&bytes[..], scan::Pass::Live).unwrap();
    assert_eq!(seqs(&trace), [0, 1, 2, 3, 4, 5]);
    assert_eq!(trace.lost(), 0);
    // Read once, as a consistent copy, the same bytes break the format.
    assert!(parse(&bytes).is_err());
    drop(ring);
}

/// A live ring read through `scan::ReadAt` while a writer faster than the
/// reader records: before each read of the slots, it writes `burst` more.
struct RacedRing<'a> {
    memory: &'a Memory,
    ring: &'a Ring,
    probe: u32,
    burst: u64,
    next: std::cell::Cell<i64>,
}

impl scan::ReadAt for RacedRing<'_> {
    fn file_len(&self) -> std::io::Result<u64> {
        Ok(self.memory.words.len() as u64 * 8)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        if offset >= self.ring.config().ring_offset() {
            for _ in 0..self.burst {
                let value = self.next.get();
                self.ring.record_integer(self.probe, 0, 1, value);
                self.next.set(value + 1);
            }
        }
        let start = offset as usize;
        for (at, byte) in buf.iter_mut().enumerate() {
            let word = self.memory.word((start + at) / 8 * 8);
            *byte = word.to_le_bytes()[(start + at) % 8];
        }
        Ok(buf.len())
    }
}

#[test]
fn a_flight_ring_written_faster_than_it_is_read_keeps_its_newest_records() {
    // Eight windows; the writer records half a window before each of the
    // reader's reads of the slots, three reads a window: it laps the ring
    // well before a reader going from the oldest slot on would finish.
    let slots = 8 * scan::WINDOW_SLOTS;
    let config = config(slots, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let probe = ring
        .add_probe("app", "p", &[ArgType::Int64], None, None)
        .unwrap();
    for value in 0..(2 * slots) as i64 {
        assert!(ring.record_integer(probe, 0, 1, value));
    }
    let raced = RacedRing {
        memory: &memory,
        ring: &ring,
        probe,
        burst: scan::WINDOW_SLOTS / 2,
        next: std::cell::Cell::new(2 * slots as i64),
    };
    let trace = scan::read(&raced, scan::Pass::Live).unwrap();
    let values: Vec<i64> = trace
        .records
        .iter()
        .map(|record| match record.args[..] {
            [Value::Int(value)] => value,
            ref other => panic!("{other:?}"),
        })
        .collect();
    // The newest windows were read before the writer got to them.
    assert!(
        values.len() as u64 >= slots / 4,
        "{} records read",
        values.len()
    );
    assert_eq!(
        values.last(),
        Some(&(2 * slots as i64 - 1)),
        "the newest of the cut"
    );
    assert!(values.windows(2).all(|pair| pair[0] < pair[1]));
    // Of the cut's 2 * slots records, the others were overwritten: lost.
    assert_eq!(trace.lost(), 2 * slots - values.len() as u64);
    drop(ring);
}

// Trace contexts.

fn context(trace: u8, span: u8) -> crate::trace_context::TraceContext {
    crate::trace_context::TraceContext::new([trace; 16], [span; 8]).unwrap()
}

fn contexts_of(trace: &Trace) -> Vec<(bool, Context)> {
    trace
        .records
        .iter()
        .map(|record| (record.is_context(), record.context))
        .collect()
}

#[test]
fn a_context_record_fills_two_slots_as_the_format_says() {
    let config = config(8, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    // A tag whose bits fall on both sides of the thread id.
    let tag = (5 << 12) | 3;
    let maker = Maker::new(77, tag);
    assert_eq!((maker.tid(), maker.tag()), (77, tag));
    let ids = crate::trace_context::TraceContext::from_hex(
        b"4bf92f3577b34da6a3ce929d0e0e4736",
        b"00f067aa0ba902b7",
    )
    .unwrap();
    assert!(ring.record_context(5_000, maker, &ids));
    assert_eq!(memory.slot_word(&config, 0, 0), first_stamp(0, 2));
    assert_eq!(memory.slot_word(&config, 0, 1), 5_000);
    assert_eq!(
        memory.slot_word(&config, 0, 2),
        0xfffff | (3 << 20) | (77 << 32) | (5 << 54)
    );
    assert_eq!(
        memory.slot_word(&config, 0, 3).to_le_bytes(),
        [0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6]
    );
    assert_eq!(memory.slot_word(&config, 1, 0), later_stamp(0, 1));
    assert_eq!(
        memory.slot_word(&config, 1, 1).to_le_bytes(),
        [0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36]
    );
    assert_eq!(
        memory.slot_word(&config, 1, 2).to_le_bytes(),
        [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
    );
    assert_eq!(memory.slot_word(&config, 1, 3), 0);

    let trace = parse(&memory.bytes()).unwrap();
    let record = &trace.records[0];
    assert!(record.is_context());
    assert_eq!((record.tid, record.tag, record.slots), (77, tag, 2));
    assert_eq!(record.context, Context::Known(ids));
    assert!(record.args.is_empty());
    drop(ring);
}

#[test]
fn a_record_gets_the_context_its_tag_names_or_none_or_unknown() {
    let config = config(64, false);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let int = ring
        .add_probe("app", "int", &[ArgType::Int64], Some(0), None)
        .unwrap();
    let text = ring
        .add_probe("app", "text", &[ArgType::String], None, None)
        .unwrap();
    let (a, b) = (context(1, 2), context(3, 4));
    assert!(ring.record_integer_by(int, 1, Maker::new(7, 0), 10));
    assert!(ring.record_context(2, Maker::new(7, 1), &a));
    assert!(ring.record_integer_by(int, 3, Maker::new(7, 1), 11));
    assert!(ring.record_by(text, 4, Maker::new(7, 1), &[Arg::Str(b"x")]));
    // Another thread, with a tag of its own; and a tag no context record of
    // its thread has.
    assert!(ring.record_context(5, Maker::new(8, 2), &b));
    assert!(ring.record_integer_by(int, 6, Maker::new(8, 2), 12));
    assert!(ring.record_integer_by(int, 7, Maker::new(7, 2), 13));
    assert!(ring.record_integer_by(int, 8, Maker::new(7, format::UNKNOWN_CONTEXT), 14));
    assert!(ring.record_integer_by(int, 9, Maker::new(7, 0), 15));
    assert!(ring.record_integer_by(int, 10, Maker::new(7, 1), 16));
    let expected = [
        (false, Context::None),
        (true, Context::Known(a)),
        (false, Context::Known(a)),
        (false, Context::Known(a)),
        (true, Context::Known(b)),
        (false, Context::Known(b)),
        (false, Context::Unknown),
        (false, Context::Unknown),
        (false, Context::None),
        (false, Context::Known(a)),
    ];
    let trace = parse(&memory.bytes()).unwrap();
    assert_eq!(contexts_of(&trace), expected);
    assert_eq!(contexts_of(&snapshot(&ring)), expected);
    assert_eq!(trace.lost(), 0);
    drop(ring);
}

/// A windowed snapshot of `ring`, read back.
fn snapshot_of(ring: &Ring, window: Window) -> Trace {
    parse(&ring.snapshot_within(window).unwrap().to_vec()).unwrap()
}

/// The context each call of `trace` reads with, by thread.
fn calls_by_thread(trace: &Trace) -> Vec<(u32, Context)> {
    let calls = trace.records.iter().filter(|record| !record.is_context());
    calls.map(|record| (record.tid, record.context)).collect()
}

#[test]
fn a_window_that_starts_after_a_context_record_carries_the_context_in_force() {
    let config = config(256, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let int = ring
        .add_probe("app", "int", &[ArgType::Int64], Some(0), None)
        .unwrap();
    let (a, b, b_later, c) = (context(1, 2), context(3, 4), context(5, 6), context(7, 8));
    // Thread 7 in context a; thread 8 in b, then in b_later (its context
    // in force at the window's start, never b); thread 9 outside any;
    // thread 10 in c, whose records all come before the window.
    assert!(ring.record_context(1, Maker::new(7, 1), &a));
    assert!(ring.record_context(2, Maker::new(8, 2), &b));
    assert!(ring.record_integer_by(int, 3, Maker::new(8, 2), 1));
    assert!(ring.record_context(4, Maker::new(8, 3), &b_later));
    assert!(ring.record_context(5, Maker::new(10, 4), &c));
    assert!(ring.record_integer_by(int, 6, Maker::new(10, 4), 1));
    for time in 10..100 {
        let maker = match time % 3 {
            0 => Maker::new(7, 1),
            1 => Maker::new(8, 3),
            _ => Maker::new(9, format::NO_CONTEXT),
        };
        assert!(ring.record_integer_by(int, time, maker, 1));
    }
    let context_of = |tid: u32| match tid {
        7 => Context::Known(a),
        8 => Context::Known(b_later),
        _ => Context::None,
    };
    let whole = snapshot(&ring);
    let windows = [
        Window {
            since_ns: Some(50),
            max_records: None,
        },
        Window {
            since_ns: None,
            max_records: Some(10),
        },
    ];
    for window in windows {
        let trace = snapshot_of(&ring, window);
        let calls = calls_by_thread(&trace);
        assert!(calls.len() >= 9, "{window:?}: {calls:?}");
        for (tid, context) in &calls {
            assert_eq!(*context, context_of(*tid), "{window:?}: thread {tid}");
        }
        // The calls are the whole ring's newest, each read as there.
        let newest = calls_by_thread(&whole).split_off(90 + 2 - calls.len());
        assert_eq!(calls, newest, "{window:?}");
        // Carried: one context record for each of threads 7 and 8, before
        // the window's calls; none of thread 10, whose calls it left out.
        let carried: Vec<_> = trace
            .records
            .iter()
            .take_while(|record| record.is_context())
            .map(|record| (record.tid, record.context))
            .collect();
        assert_eq!(
            carried,
            [(7, Context::Known(a)), (8, Context::Known(b_later))],
            "{window:?}"
        );
        assert_eq!(trace.records.iter().filter(|r| r.is_context()).count(), 2);
        assert_eq!(trace.lost(), 0, "{window:?}");
    }
    drop(ring);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "30,000 records and a copy reaching back over more than a round of it: hours under \
              Miri; the copy's memory accesses run under Miri in the other window tests"
)]
fn a_window_carries_a_context_record_older_than_a_round_of_its_copy() {
    // More slots than one round of the copy (2^14) between the context
    // record and the window: the copy reaches back for it.
    let config = config(1 << 15, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let int = ring
        .add_probe("app", "int", &[ArgType::Int64], Some(0), None)
        .unwrap();
    let a = context(1, 2);
    assert!(ring.record_context(1, Maker::new(7, 1), &a));
    for time in 2..30_000 {
        assert!(ring.record_integer_by(int, time, Maker::new(7, 1), 1));
    }
    let window = Window {
        since_ns: None,
        max_records: Some(5),
    };
    let trace = snapshot_of(&ring, window);
    assert_eq!(calls_by_thread(&trace), [(7, Context::Known(a)); 5]);
    assert_eq!(trace.records.first().map(|r| r.is_context()), Some(true));
    drop(ring);
}

#[test]
fn a_window_whose_threads_context_record_was_overwritten_reads_unknown_as_the_ring_does() {
    let config = config(64, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let int = ring
        .add_probe("app", "int", &[ArgType::Int64], None, None)
        .unwrap();
    assert!(ring.record_context(1, Maker::new(7, 5), &context(1, 2)));
    for time in 2..200 {
        assert!(ring.record_integer_by(int, time, Maker::new(7, 5), 1));
    }
    let window = Window {
        since_ns: Some(190),
        max_records: None,
    };
    let trace = snapshot_of(&ring, window);
    assert_eq!(calls_by_thread(&trace), [(7, Context::Unknown); 10]);
    assert!(trace.records.iter().all(|record| !record.is_context()));
    drop(ring);
}

#[test]
fn a_record_whose_context_record_is_gone_is_unknown_never_an_older_context() {
    let config = config(16, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let int = ring
        .add_probe("app", "int", &[ArgType::Int64], None, None)
        .unwrap();
    let (a, b) = (context(1, 1), context(2, 2));
    assert!(ring.record_context(1, Maker::new(7, 1), &a));
    assert!(ring.record_integer_by(int, 2, Maker::new(7, 1), 1));
    assert!(ring.record_context(3, Maker::new(7, 2), &b)); // seq 3, 4
    assert!(ring.record_integer_by(int, 4, Maker::new(7, 2), 2));
    // Context b being written as the ring is read: its first slot's stamp is 0.
    let mut bytes = memory.bytes();
    bytes[slot_at(&config, 3)..slot_at(&config, 3) + 8].fill(0);
    let trace = scan::read(&bytes[..], scan::Pass::Live).unwrap();
    assert_eq!(
        contexts_of(&trace),
        [
            (true, Context::Known(a)),
            (false, Context::Known(a)),
            (false, Context::Unknown)
        ]
    );
    // Overwritten in flight mode: a's context record (seq 0, 1) goes first,
    // its record after it keeps its place and loses its context.
    for value in 0..11 {
        assert!(ring.record_integer_by(int, 5, Maker::new(8, 0), value));
    }
    let trace = snapshot(&ring);
    assert_eq!(trace.records[0].seq, 2);
    assert_eq!(trace.records[0].context, Context::Unknown);
    assert_eq!(trace.records[1].context, Context::Known(b));
    drop(ring);
}

#[test]
fn a_version_1_file_has_no_contexts_and_no_tag_bits() {
    let config = config(8, false);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let int = ring
        .add_probe("app", "int", &[ArgType::Int64], None, None)
        .unwrap();
    assert!(ring.record_integer(int, 1, 7, 5));
    memory.set_word(offset::VERSION, 1 | (4096 << 32));
    let trace = parse(&memory.bytes()).unwrap();
    assert_eq!(trace.header.version, 1);
    assert_eq!(contexts_of(&trace), [(false, Context::None)]);
    // What a version-2 writer puts above the thread id is no version-1
    // thread's.
    memory.set_word(slot_at(&config, 0) + 16, Maker::new(7, 1 << 12).word(int));
    let err = parse(&memory.bytes()).unwrap_err();
    assert_eq!(
        err.message(),
        "record 0 in slot 0: thread id (offset 8192): expected below 4194304 (a Linux thread id), found 4194311"
    );
    drop(ring);
}

#[test]
fn a_cursor_keeps_each_threads_context_across_reads() {
    let config = config(64, false);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let int = ring
        .add_probe("app", "int", &[ArgType::Int64], None, None)
        .unwrap();
    let a = context(5, 6);
    assert!(ring.record_context(1, Maker::new(7, 9), &a));
    assert!(ring.record_integer_by(int, 2, Maker::new(7, 9), 1));
    let mut cursor = Cursor::default();
    let mut seen = Vec::new();
    let bytes = memory.bytes();
    let opened = scan::open(&bytes[..], scan::Pass::Live).unwrap();
    cursor
        .follow(&opened, &bytes[..], |record, _| seen.push(record.context))
        .unwrap();
    assert!(ring.record_integer_by(int, 3, Maker::new(7, 9), 2));
    let bytes = memory.bytes();
    let opened = scan::open(&bytes[..], scan::Pass::Live).unwrap();
    cursor
        .follow(&opened, &bytes[..], |record, _| seen.push(record.context))
        .unwrap();
    assert_eq!(seen, [Context::Known(a); 3]);
    drop(ring);
}

#[test]
fn context_records_the_reader_refuses_say_why() {
    let config = config(8, false);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    assert!(ring.record_context(1, Maker::new(7, 3), &context(1, 2)));
    // Edits: (slot, word, value).
    let refused = |edits: &[(u64, usize, u64)]| {
        let mut bytes = memory.bytes();
        for &(slot, word, value) in edits {
            let at = slot_at(&config, slot) + 8 * word;
            bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        parse(&bytes).unwrap_err().message().to_owned()
    };
    assert_eq!(
        refused(&[(0, 2, Maker::new(7, 0).word(format::CONTEXT_PROBE))]),
        "record 0 in slot 0: context record's tag (offset 8192): expected 1 to 4194302, found 0"
    );
    assert_eq!(
        refused(&[(0, 2, Maker::new(7, format::UNKNOWN_CONTEXT).word(format::CONTEXT_PROBE))]),
        "record 0 in slot 0: context record's tag (offset 8192): expected 1 to 4194302, found 4194303"
    );
    assert_eq!(
        refused(&[(0, 3, 0), (1, 1, 0)]),
        "record 0 in slot 0: context record's trace id (offset 8192): expected not all zero, \
         found 00000000000000000000000000000000"
    );
    assert_eq!(
        refused(&[(1, 2, 0)]),
        "record 0 in slot 0: context record's span id (offset 8192): expected not all zero, \
         found 0000000000000000"
    );
    assert_eq!(
        refused(&[(1, 3, 1)]),
        "record 0 in slot 0: padding for a context record (offset 8192): expected zero bytes \
         after its 24 bytes of ids, found 0100000000000000"
    );
    assert_eq!(
        refused(&[(0, 0, first_stamp(0, 1))]),
        "record 0 in slot 0: slot count for a context record (offset 8192): expected 2 (its \
         trace id and span id take 24 bytes), found 1"
    );
    drop(ring);
}

fn put_bytes(bytes: &mut [u8], at: usize, value: &[u8]) {
    bytes[at..at + value.len()].copy_from_slice(value);
}

#[test]
fn a_ring_read_again_as_its_writer_leaves_it_agrees_with_the_reads_before() {
    use super::continuity::{Continuity, Next};
    let config = config(16, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let first = ring
        .add_probe("app", "first", &[ArgType::Int64], None, None)
        .unwrap();
    let opened = |bytes: &[u8]| scan::open(bytes, scan::Pass::Live).unwrap();
    let mut seen = Continuity::of(&opened(&memory.bytes()), None);
    assert!(ring.record_integer(first, 1, 7, 5));
    ring.add_probe("app", "later", &[ArgType::Int64], None, None)
        .unwrap();
    let later = opened(&memory.bytes());
    assert_eq!(seen.next(&later, None).unwrap(), Next::Same);
    seen.advance(&later);
    assert_eq!(seen.probes().len(), 2);
    drop(ring);
}

#[test]
fn a_ring_rewritten_under_its_reader_is_refused_saying_what_changed() {
    use super::continuity::{Continuity, Next};
    use super::scan::FileId;
    let config = config(16, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let first = ring
        .add_probe("app", "first", &[ArgType::Int64], None, None)
        .unwrap();
    ring.add_probe("app", "later", &[ArgType::Int64], None, None)
        .unwrap();
    assert!(ring.record_integer(first, 1, 7, 5));
    let base = memory.bytes();
    drop(ring);
    let opened = |bytes: &[u8]| scan::open(bytes, scan::Pass::Live).unwrap();
    let seen = Continuity::of(&opened(&base), None);
    let refused = |edit: &dyn Fn(&mut Vec<u8>), message: &str| {
        let mut bytes = base.clone();
        edit(&mut bytes);
        let err = seen.next(&opened(&bytes), None).unwrap_err();
        assert!(
            err.message().contains(message),
            "{message:?} not in {:?}",
            err.message()
        );
        assert!(err.message().starts_with("the ring was rewritten"));
    };
    refused(
        &|bytes| put_bytes(bytes, offset::TABLE_USED, &24u32.to_le_bytes()),
        "its probe table shrank from 2 entries to 1 (a table only grows)",
    );
    refused(
        &|bytes| put_bytes(bytes, offset::MAX_STRING, &16u32.to_le_bytes()),
        "its header field max_string changed from 1024 to 16",
    );
    refused(
        &|bytes| put_bytes(bytes, offset::HEAD, &0u64.to_le_bytes()),
        "its counter head went back from 1 to 0",
    );
    refused(
        &|bytes| put_bytes(bytes, offset::RECORDS, &0u64.to_le_bytes()),
        "its counter records went back from 1 to 0",
    );
    // A stamp keeps 48 bits of a sequence number: a head moved on by 2^48
    // would have the record read before read again.
    refused(
        &|bytes| put_bytes(bytes, offset::HEAD, &(1u64 + (1 << 48)).to_le_bytes()),
        "its counter head leapt from 1 to 281474976710657",
    );
    // Entry 0's names, from 4112: "app", then "first", made "firsu".
    refused(
        &|bytes| bytes[4112 + 3 + 4] += 1,
        "its probe table entry 0 changed from probe app:first(Integer) to probe app:firsu(Integer)",
    );
    // Where files cannot be told apart, a ring made at another time is
    // another ring; in the same file, a header rewritten.
    let mut moved = base.clone();
    put_bytes(
        &mut moved,
        offset::ANCHOR_MONOTONIC_NS,
        &99u64.to_le_bytes(),
    );
    assert_eq!(seen.next(&opened(&moved), None).unwrap(), Next::Other);
    let file = Some(FileId { dev: 1, ino: 2 });
    let in_file = Continuity::of(&opened(&base), file);
    let err = in_file.next(&opened(&moved), file).unwrap_err();
    assert!(
        err.message()
            .contains("its header field anchor_monotonic_ns changed from 1000000 to 99"),
        "{}",
        err.message()
    );
    let other = Some(FileId { dev: 1, ino: 3 });
    assert_eq!(in_file.next(&opened(&moved), other).unwrap(), Next::Other);
}

#[test]
fn a_continuity_keeps_its_rings_format_version_and_refuses_a_version_rewritten() {
    use super::continuity::{Continuity, Next};
    let config = config(16, true);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let int = ring
        .add_probe("app", "int", &[ArgType::Int64], None, None)
        .unwrap();
    assert!(ring.record_context(1, Maker::new(7, 1), &context(1, 2)));
    assert!(ring.record_integer_by(int, 2, Maker::new(7, 1), 5));
    let version_2 = memory.bytes();
    drop(ring);
    // A version-1 writer's header (its records are not read here).
    let mut version_1 = version_2.clone();
    put_bytes(&mut version_1, offset::VERSION, &1u32.to_le_bytes());
    let opened = |bytes: &[u8]| scan::open(bytes, scan::Pass::Live).unwrap();
    for (bytes, version) in [(&version_2, 2), (&version_1, 1)] {
        let seen = Continuity::of(&opened(bytes), None);
        let again = Continuity::decode(&seen.encode().unwrap(), None).unwrap();
        assert_eq!(again.encode().unwrap(), seen.encode().unwrap());
        assert_eq!(again.next(&opened(bytes), None).unwrap(), Next::Same);
        let header = checks::header(&again.encode().unwrap(), u64::MAX).unwrap();
        assert_eq!(header.version, version);
    }
    let seen = Continuity::of(&opened(&version_2), None);
    let err = seen.next(&opened(&version_1), None).unwrap_err();
    assert!(
        err.message()
            .contains("its header field version changed from 2 to 1"),
        "{}",
        err.message()
    );
}

/// A file read through, counting the bytes read.
struct Counted {
    file: std::fs::File,
    read: std::cell::Cell<u64>,
}

impl scan::ReadAt for Counted {
    fn file_len(&self) -> std::io::Result<u64> {
        self.file.file_len()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let read = scan::ReadAt::read_at(&self.file, buf, offset)?;
        self.read.set(self.read.get() + read as u64);
        Ok(read)
    }

    fn data_from(&self, offset: u64) -> std::io::Result<Option<u64>> {
        self.file.data_from(offset)
    }
}

#[test]
#[cfg_attr(miri, ignore)] // files and lseek
fn a_sparse_file_is_read_for_what_it_holds_not_for_the_length_it_claims() {
    // A valid header claiming 2^25 slots (1 GiB), all of them a hole.
    let config = config(16, false);
    let memory = Memory::new(&config);
    let ring = memory.ring(&config);
    let mut bytes = memory.bytes();
    drop(ring);
    let slots: u64 = 1 << 25;
    put_bytes(&mut bytes, offset::SLOT_COUNT, &slots.to_le_bytes());
    let ring_offset = config.ring_offset() as usize;
    let path = std::env::temp_dir().join(format!("stapsdt-sparse-{}", std::process::id()));
    std::fs::write(&path, &bytes[..ring_offset]).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    file.set_len(ring_offset as u64 + slots * format::SLOT_SIZE)
        .unwrap();
    let counted = Counted {
        file,
        read: std::cell::Cell::new(0),
    };
    let trace = scan::read(&counted, scan::Pass::Once).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(trace.records.is_empty());
    assert_eq!(trace.header.slot_count, slots);
    // The header and table, and no window of the hole.
    assert!(
        counted.read.get() < 1 << 20,
        "{} bytes read",
        counted.read.get()
    );
}
