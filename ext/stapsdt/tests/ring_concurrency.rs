//! The ring under real threads: writers whose records check themselves (an
//! Integer saying who wrote it and when, a String made from it), and a
//! reader taking copies meanwhile, as the `static-tracing` command does
//! from another process. In flight mode, with a ring small enough that the
//! writers lap the reader (and each other) all the time, no copy ever holds
//! a torn or mismatched record; without overwrite, a consumer advancing
//! tail reads every record exactly once.

mod ring_support;

use ring_support::{config, HeapRing};
use stapsdt::ring::{format, parse, Arg, Record, Trace, Value, Window};
use stapsdt::ArgType;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::thread;

/// A few seconds in a debug build.
#[cfg(not(miri))]
mod limits {
    pub const WRITERS: u32 = 4;
    pub const RECORDS_PER_WRITER: u64 = 20_000;
    /// The stress test's writers stop this many times, for a strict read.
    pub const ROUNDS: u64 = 1000;
    pub const SLOT_COUNT: u64 = 64;
    /// The lengths of long Strings: cut at 1024, records of 30 to 44 slots.
    pub const LONG: std::ops::Range<u64> = 700..1100;
}

/// Miri interleaves threads at random, but slowly: a few records, a ring
/// of 8 slots that they still lap.
#[cfg(miri)]
mod limits {
    pub const WRITERS: u32 = 2;
    pub const RECORDS_PER_WRITER: u64 = 6;
    pub const ROUNDS: u64 = 2;
    pub const SLOT_COUNT: u64 = 8;
    /// Records of 4 to 6 slots.
    pub const LONG: std::ops::Range<u64> = 60..118;
}

use limits::{LONG, RECORDS_PER_WRITER, ROUNDS, SLOT_COUNT, WRITERS};

const TIME_KEY: u64 = 0x9e37_79b9_7f4a_7c15;

/// The probes every record is of: one Integer (the hot path), or an
/// Integer and a String.
struct Probes {
    int: u32,
    pair: u32,
}

impl Probes {
    fn add_to(ring: &HeapRing) -> Probes {
        Probes {
            int: ring
                .add_probe("stress", "int", &[ArgType::Int64], Some(0), None)
                .unwrap(),
            pair: ring
                .add_probe(
                    "stress",
                    "pair",
                    &[ArgType::Int64, ArgType::String],
                    None,
                    Some(1),
                )
                .unwrap(),
        }
    }
}

/// Record `index` of `writer` tells both.
fn value(writer: u32, index: u64) -> i64 {
    ((u64::from(writer) << 32) | index) as i64
}

/// Mostly 0 to 63 bytes (records of 2 to 4 slots), one in four `LONG`
/// (records of most of a lap of the ring, so that writers of the same
/// slots overlap even without being preempted); every byte derived from
/// `value`.
fn string_of(value: i64) -> Vec<u8> {
    let value = value as u64;
    let random = value.wrapping_mul(0x2545_f491_4f6c_dd1d);
    let len = if random >> 62 == 0 {
        LONG.start + (random >> 20) % (LONG.end - LONG.start)
    } else {
        random >> 58
    };
    (0..len)
        .map(|index| (value >> (8 * (index % 8))) as u8 ^ index as u8)
        .collect()
}

/// Writes record `index` of `writer`: every third one through the hot path.
/// Returns whether it was written, and the slots it takes.
fn write(ring: &HeapRing, probes: &Probes, writer: u32, index: u64) -> (bool, u64) {
    let value = value(writer, index);
    let time = value as u64 ^ TIME_KEY;
    if index % 3 == 0 {
        (ring.record_integer(probes.int, time, writer, value), 1)
    } else {
        let string = string_of(value);
        let slots = format::slots_for(8 + 2 + string.len().min(1024));
        let args = [Arg::Int(value), Arg::Str(&string)];
        (ring.record(probes.pair, time, writer, &args), slots)
    }
}

/// The record is one a writer wrote, whole: returns its value.
fn check(record: &Record, probes: &Probes) -> i64 {
    let Some(&Value::Int(value)) = record.args.first() else {
        panic!("no Integer first: {record:?}");
    };
    let (writer, index) = ((value as u64 >> 32) as u32, value as u64 & 0xffff_ffff);
    assert!(writer < WRITERS && index < RECORDS_PER_WRITER, "{record:?}");
    assert_eq!(record.tid, writer, "{record:?}");
    assert_eq!(record.time_ns, value as u64 ^ TIME_KEY, "{record:?}");
    if index % 3 == 0 {
        assert_eq!(record.probe, probes.int, "{record:?}");
        assert_eq!(record.args.len(), 1, "{record:?}");
    } else {
        assert_eq!(record.probe, probes.pair, "{record:?}");
        let string = Value::of(&Arg::Str(&string_of(value)));
        assert!(record.args == [Value::Int(value), string], "{record:?}");
    }
    value
}

fn read(ring: &HeapRing) -> Trace {
    parse(&ring.snapshot())
        .unwrap_or_else(|err| panic!("a snapshot that does not read back: {err}"))
}

/// A snapshot of the newest `most` records at most.
fn read_newest(ring: &HeapRing, most: u64) -> Trace {
    let window = Window {
        since_ns: None,
        max_records: Some(most),
    };
    let snapshot = ring.snapshot_within(window).unwrap();
    let trace = parse(&snapshot.to_vec())
        .unwrap_or_else(|err| panic!("a window that does not read back: {err}"));
    assert!(trace.records.len() as u64 <= most);
    trace
}

/// What the reader saw over all its copies: each sequence number always
/// holding the same record, each record always at the same sequence number.
#[derive(Default)]
struct Seen {
    values: HashMap<u64, i64>,
    seqs: HashMap<i64, u64>,
    copies: u64,
}

impl Seen {
    fn take(&mut self, trace: &Trace, probes: &Probes) {
        for pair in trace.records.windows(2) {
            assert!(pair[0].seq + pair[0].slots <= pair[1].seq, "{pair:?}");
        }
        for record in &trace.records {
            let value = check(record, probes);
            assert_eq!(
                *self.values.entry(record.seq).or_insert(value),
                value,
                "seq {}",
                record.seq
            );
            assert_eq!(
                *self.seqs.entry(value).or_insert(record.seq),
                record.seq,
                "value {value:#x}"
            );
        }
        self.copies += 1;
    }
}

/// Clears its flag when dropped.
struct Stop<'a>(&'a AtomicBool);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Release);
    }
}

#[test]
fn writers_lapping_the_reader_never_show_it_a_torn_record() {
    let ring = HeapRing::new(&config(SLOT_COUNT, true));
    let probes = Probes::add_to(&ring);
    let writing = AtomicBool::new(true);
    let per_round = RECORDS_PER_WRITER / ROUNDS;
    let (mut given_up, mut slots, mut checked) = (HashSet::new(), 0, 0);
    let seen = thread::scope(|scope| {
        // Stops the reader however this closure ends: a failed check would
        // otherwise leave the scope waiting for it.
        let _stop = Stop(&writing);
        let reader = scope.spawn(|| {
            let mut seen = Seen::default();
            loop {
                // Once more after the writers are done.
                let last = !writing.load(Acquire);
                // Whole copies and windows of the newest records, in turn.
                let trace = match seen.copies % 2 {
                    0 => read(&ring),
                    _ => read_newest(&ring, 1 + seen.copies % 40),
                };
                seen.take(&trace, &probes);
                if last {
                    return seen;
                }
            }
        });
        for round in 0..ROUNDS {
            let writers: Vec<_> = (0..WRITERS)
                .map(|writer| {
                    let (ring, probes) = (&ring, &probes);
                    scope.spawn(move || {
                        let (mut given_up, mut slots) = (Vec::new(), 0);
                        for index in round * per_round..(round + 1) * per_round {
                            let (written, taken) = write(ring, probes, writer, index);
                            slots += taken;
                            if !written {
                                given_up.push(value(writer, index));
                            }
                        }
                        (given_up, slots)
                    })
                })
                .collect();
            for writer in writers {
                let (values, taken) = writer.join().unwrap();
                given_up.extend(values);
                slots += taken;
            }
            // No writer now (the reader still copies): the live file reads
            // strictly, in one pass. A record torn in this lap would be
            // refused with the file, or fail its check; a snapshot would
            // have dropped it, unseen, if its payload did not hold together.
            let live = parse(&ring.bytes()).unwrap_or_else(|err| panic!("round {round}: {err}"));
            for record in &live.records {
                assert!(!given_up.contains(&check(record, &probes)), "{record:?}");
            }
            checked += live.records.len();
        }
        writing.store(false, Release);
        reader.join().unwrap()
    });

    let total = u64::from(WRITERS) * per_round * ROUNDS;
    let counters = ring.counters();
    // Flight mode reserves every record; one whose slot another writer
    // held was given up, not dropped.
    assert_eq!(
        (counters.head, counters.records, counters.dropped),
        (slots, total, 0)
    );
    let never_written: Vec<&i64> = seen
        .seqs
        .keys()
        .filter(|value| given_up.contains(value))
        .collect();
    assert!(
        never_written.is_empty(),
        "records given up were read: {never_written:x?}"
    );
    let last = read(&ring);
    assert_eq!(last.records, parse(&ring.bytes()).unwrap().records);
    assert_eq!(last.lost(), total - last.records.len() as u64);
    eprintln!(
        "{total} records in {ROUNDS} rounds: {checked} checked between rounds, {} seen in {} copies meanwhile, \
         {} given up by lapped writers",
        seen.seqs.len(),
        seen.copies,
        given_up.len()
    );
}

#[test]
fn a_consumer_reads_every_record_exactly_once() {
    let ring = HeapRing::new(&config(SLOT_COUNT, false));
    let probes = Probes::add_to(&ring);
    let total = u64::from(WRITERS) * RECORDS_PER_WRITER;
    let (position, outcomes) = thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let (mut position, mut read_values) = (0, HashSet::new());
            while (read_values.len() as u64) < total {
                let trace = read(&ring);
                let before = position;
                // The records from the position on, one after another, up
                // to one not yet written.
                for record in trace.records.iter().filter(|record| record.seq >= before) {
                    if record.seq != position {
                        break;
                    }
                    let value = check(record, &probes);
                    assert!(read_values.insert(value), "read twice: {record:?}");
                    position += record.slots;
                }
                if position == before {
                    thread::yield_now();
                }
                ring.store_tail(position);
            }
            position
        });
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let (ring, probes) = (&ring, &probes);
                scope.spawn(move || {
                    let (mut dropped, mut slots) = (0, 0);
                    for index in 0..RECORDS_PER_WRITER {
                        // Full: wait for the consumer, and try again.
                        loop {
                            let (written, taken) = write(ring, probes, writer, index);
                            if written {
                                slots += taken;
                                break;
                            }
                            dropped += 1;
                            thread::yield_now();
                        }
                    }
                    (dropped, slots)
                })
            })
            .collect();
        let outcomes: Vec<(u64, u64)> = writers
            .into_iter()
            .map(|writer| writer.join().unwrap())
            .collect();
        (reader.join().unwrap(), outcomes)
    });

    let counters = ring.counters();
    assert_eq!(
        counters.head,
        outcomes.iter().map(|(_, slots)| slots).sum::<u64>()
    );
    assert_eq!((counters.head, counters.tail), (position, position));
    assert_eq!(counters.records, total);
    let dropped: u64 = outcomes.iter().map(|(dropped, _)| dropped).sum();
    assert_eq!(
        counters.dropped, dropped,
        "a drop for each refusal, none other"
    );
    eprintln!("{total} records read once each; {dropped} attempts found the ring full");
}
