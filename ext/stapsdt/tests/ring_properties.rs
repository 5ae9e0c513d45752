//! The ring over random probes and records, against a model of what it
//! must hold: every record written reads back equal (Strings cut at 1024
//! bytes), a lapped flight-mode ring holds exactly the newest records that
//! fit and counts the rest as lost, and a ring without overwrite drops
//! exactly what does not fit before its reader consumes, and counts it;
//! a snapshot of a window holds exactly the newest records it names.
//!
//! `PROPTEST_CASES=n` runs more cases (under Miri, pass it through with
//! `MIRIFLAGS=-Zmiri-env-forward=PROPTEST_CASES`). A failing case's seed is
//! saved to `ring_properties.proptest-regressions` next to this file, and
//! replayed first on every later run: commit it with the fix.

mod proptest_setup;
mod ring_support;

use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::string::{string_regex, RegexGeneratorStrategy};
use proptest_setup::config as proptest_config;
use ring_support::{config, HeapRing};
use stapsdt::ring::{format, parse, Arg, Context, Record, Trace, Value, Window, MAX_STRING};
use stapsdt::{ArgType, MAX_ARGS};

/// Sizes for a debug build: a few seconds in all.
#[cfg(not(miri))]
mod limits {
    pub const CASES: u32 = 64;
    pub const RECORDS: usize = 40;
    pub const LAPPING_RECORDS: usize = 300;
    pub const OPERATIONS: usize = 300;
}

/// Miri runs two orders of magnitude slower: a few small cases.
#[cfg(miri)]
mod limits {
    pub const CASES: u32 = 2;
    pub const RECORDS: usize = 4;
    pub const LAPPING_RECORDS: usize = 16;
    pub const OPERATIONS: usize = 16;
}

/// Past u16::MAX: the length a String is cut from can be any.
const LONGEST_STRING: usize = 70_000;

fn regex(pattern: &str) -> RegexGeneratorStrategy<String> {
    string_regex(pattern).unwrap()
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => regex("[A-Za-z_][A-Za-z0-9_]{0,15}"),
        1 => regex("[A-Za-z_][A-Za-z0-9_]{127}"),
    ]
}

#[derive(Clone, Debug)]
struct ProbeDecl {
    provider: String,
    name: String,
    types: Vec<ArgType>,
    /// Which Integer argument holds a latency, which String a stack, if any.
    latency: Option<Index>,
    stack: Option<Index>,
}

impl ProbeDecl {
    fn arg_of(&self, pick: Option<Index>, wanted: ArgType) -> Option<u8> {
        let candidates: Vec<u8> = (0..)
            .zip(&self.types)
            .filter(|&(_, &arg)| arg == wanted)
            .map(|(index, _)| index)
            .collect();
        pick.filter(|_| !candidates.is_empty())
            .map(|pick| *pick.get(&candidates))
    }

    fn add_to(&self, ring: &HeapRing) -> u32 {
        let latency = self.arg_of(self.latency, ArgType::Int64);
        let stack = self.arg_of(self.stack, ArgType::String);
        ring.add_probe(&self.provider, &self.name, &self.types, latency, stack)
            .expect("a valid probe fits")
    }
}

fn probe_decl() -> impl Strategy<Value = ProbeDecl> {
    let types = prop::collection::vec(
        select(vec![ArgType::Int64, ArgType::Float64, ArgType::String]),
        0..=MAX_ARGS,
    );
    // One Integer alone, the hot path's shape, often.
    let types = prop_oneof![3 => types, 1 => Just(vec![ArgType::Int64])];
    (
        name(),
        name(),
        types,
        any::<Option<Index>>(),
        any::<Option<Index>>(),
    )
        .prop_map(|(provider, name, types, latency, stack)| ProbeDecl {
            provider,
            name,
            types,
            latency,
            stack,
        })
}

/// String lengths around slot boundaries (2 bytes of length, then 6 in the
/// first slot and 24 a later one), around the cut at 1024, and any. Under
/// Miri, the small ones' (the unit tests cut Strings there too).
fn string_len(small: bool) -> BoxedStrategy<usize> {
    let boundaries = select(vec![
        0, 5, 6, 7, 29, 30, 31, 53, 54, 55, 78, 1022, 1023, 1024, 1025,
    ]);
    if small || cfg!(miri) {
        return prop_oneof![3 => 0usize..=80, 1 => boundaries].boxed();
    }
    prop_oneof![
        3 => 0usize..=80,
        2 => boundaries,
        1 => 1000usize..=1050,
        1 => 0..=LONGEST_STRING,
    ]
    .boxed()
}

/// What the arguments of a record are made of, whatever its probe's types.
#[derive(Clone, Debug)]
struct Seed {
    int: i64,
    float: u64,
    len: usize,
    byte: u8,
}

#[derive(Clone, Debug)]
struct RecordDecl {
    probe: Index,
    time_ns: u64,
    tid: u32,
    seeds: Vec<Seed>,
    /// Through `record_integer` when the probe takes one Integer.
    fast: bool,
}

fn record_decl(small: bool) -> impl Strategy<Value = RecordDecl> {
    let seed = (any::<i64>(), any::<u64>(), string_len(small), any::<u8>()).prop_map(
        |(int, float, len, byte)| Seed {
            int,
            float,
            len,
            byte,
        },
    );
    (
        any::<Index>(),
        any::<u64>(),
        // A Linux thread id: below 2^22.
        0..1u32 << format::TID_BITS,
        prop::collection::vec(seed, MAX_ARGS),
        any::<bool>(),
    )
        .prop_map(|(probe, time_ns, tid, seeds, fast)| RecordDecl {
            probe,
            time_ns,
            tid,
            seeds,
            fast,
        })
}

/// The bytes of a String argument: its seed's, repeatable.
fn string(seed: &Seed) -> Vec<u8> {
    (0..seed.len)
        .map(|index| seed.byte.wrapping_add((index as u8).wrapping_mul(7)))
        .collect()
}

/// What the ring must hold, as the format describes it.
struct Model {
    slot_count: u64,
    overwrite: bool,
    head: u64,
    tail: u64,
    records: u64,
    dropped: u64,
    /// Every record written, with its sequence number.
    written: Vec<Record>,
}

impl Model {
    fn new(slot_count: u64, overwrite: bool) -> Model {
        Model {
            slot_count,
            overwrite,
            head: 0,
            tail: 0,
            records: 0,
            dropped: 0,
            written: Vec::new(),
        }
    }

    /// Records `decl` in both the ring and the model; whether they agree
    /// that it was written.
    fn record(
        &mut self,
        ring: &HeapRing,
        probes: &[(u32, ProbeDecl)],
        decl: &RecordDecl,
    ) -> Result<(), TestCaseError> {
        let (id, probe) = decl.probe.get(probes);
        let strings: Vec<Vec<u8>> = decl.seeds.iter().map(string).collect();
        let args: Vec<Arg<'_>> = probe
            .types
            .iter()
            .zip(decl.seeds.iter().zip(&strings))
            .map(|(arg, (seed, string))| match arg {
                ArgType::Int64 => Arg::Int(seed.int),
                ArgType::Float64 => Arg::Float(f64::from_bits(seed.float)),
                ArgType::String => Arg::Str(string),
            })
            .collect();
        let written = match args[..] {
            [Arg::Int(value)] if decl.fast => {
                ring.record_integer(*id, decl.time_ns, decl.tid, value)
            }
            _ => ring.record(*id, decl.time_ns, decl.tid, &args),
        };

        let payload: usize = args
            .iter()
            .map(|arg| match arg {
                Arg::Str(bytes) => 2 + bytes.len().min(MAX_STRING as usize),
                Arg::Int(_) | Arg::Float(_) => 8,
            })
            .sum();
        let slots = format::slots_for(payload);
        let fits = slots <= self.slot_count
            && (self.overwrite || self.head + slots <= self.tail + self.slot_count);
        prop_assert_eq!(written, fits, "record of {} slots", slots);
        if !fits {
            self.dropped += 1;
            return Ok(());
        }
        self.written.push(Record {
            seq: self.head,
            slots,
            time_ns: decl.time_ns,
            probe: *id,
            tid: decl.tid,
            tag: format::NO_CONTEXT,
            args: args.iter().map(Value::of).collect(),
            context: Context::None,
        });
        self.head += slots;
        self.records += 1;
        Ok(())
    }

    /// The records still in the ring: those of the last `slot_count` slots
    /// reserved (any older one lost at least its first slot to a newer).
    fn held(&self) -> Vec<Record> {
        let oldest = self.head.saturating_sub(self.slot_count);
        self.written
            .iter()
            .filter(|record| record.seq >= oldest)
            .cloned()
            .collect()
    }

    /// The ring's copy agrees with the model, records and counters.
    fn check(&self, trace: &Trace) -> Result<(), TestCaseError> {
        let held = self.held();
        prop_assert_eq!(&trace.records, &held);
        let counters = trace.counters;
        prop_assert_eq!(
            (counters.head, counters.records, counters.dropped),
            (self.head, self.records, self.dropped)
        );
        prop_assert_eq!(
            trace.lost(),
            self.dropped + self.records - held.len() as u64
        );
        Ok(())
    }
}

fn add_probes(ring: &HeapRing, decls: Vec<ProbeDecl>) -> Vec<(u32, ProbeDecl)> {
    decls
        .into_iter()
        .map(|decl| (decl.add_to(ring), decl))
        .collect()
}

/// The ring read back, as a snapshot and as the live file.
fn traces(ring: &HeapRing) -> Result<(Trace, Trace), TestCaseError> {
    let snapshot = parse(&ring.snapshot()).map_err(|err| TestCaseError::fail(err.to_string()))?;
    let live = parse(&ring.bytes()).map_err(|err| TestCaseError::fail(err.to_string()))?;
    prop_assert!(snapshot.header.complete() && !live.header.complete());
    prop_assert_eq!(&snapshot.probes, &live.probes);
    prop_assert_eq!(&snapshot.records, &live.records);
    Ok((snapshot, live))
}

#[derive(Clone, Debug)]
enum Operation {
    Record(RecordDecl),
    /// The reader takes this many of the records it finds from tail (an
    /// index into them), and stores the tail after them.
    Consume(Index),
}

proptest! {
    #![proptest_config(proptest_config(limits::CASES))]

    #[test]
    fn every_record_reads_back_as_written(
        probes in prop::collection::vec(probe_decl(), 1..=5),
        records in prop::collection::vec(record_decl(false), 0..=limits::RECORDS),
        overwrite in any::<bool>(),
    ) {
        // Room for all: the slots their payloads take.
        let slot_count = records
            .iter()
            .map(|decl| {
                let probe = &decl.probe.get(&probes);
                let payload: usize = probe.types.iter().zip(&decl.seeds).map(|(arg, seed)| match arg {
                    ArgType::String => 2 + seed.len.min(MAX_STRING as usize),
                    ArgType::Int64 | ArgType::Float64 => 8,
                }).sum();
                format::slots_for(payload)
            })
            .sum::<u64>()
            .next_power_of_two();
        let ring = HeapRing::new(&config(slot_count, overwrite));
        let probes = add_probes(&ring, probes);
        let mut model = Model::new(slot_count, overwrite);
        for decl in &records {
            model.record(&ring, &probes, decl)?;
        }
        let (snapshot, live) = traces(&ring)?;
        model.check(&snapshot)?;
        prop_assert_eq!(model.written.len(), records.len());
        prop_assert_eq!(live.lost(), 0);
        for ((id, decl), entry) in probes.iter().zip(&snapshot.probes) {
            prop_assert_eq!(entry.id, *id);
            prop_assert_eq!((&entry.provider, &entry.name, &entry.types), (&decl.provider, &decl.name, &decl.types));
        }
    }

    #[test]
    fn a_lapped_flight_ring_holds_exactly_the_newest_records(
        probes in prop::collection::vec(probe_decl(), 1..=5),
        records in prop::collection::vec(record_decl(true), 0..=limits::LAPPING_RECORDS),
        slot_count in select(vec![1u64, 2, 4, 8, 16, 32, 64]),
    ) {
        let ring = HeapRing::new(&config(slot_count, true));
        let probes = add_probes(&ring, probes);
        let mut model = Model::new(slot_count, true);
        for decl in &records {
            model.record(&ring, &probes, decl)?;
        }
        model.check(&traces(&ring)?.0)?;
    }

    #[test]
    fn a_window_holds_the_newest_records_back_to_the_first_it_leaves_out(
        probes in prop::collection::vec(probe_decl(), 1..=5),
        records in prop::collection::vec(record_decl(true), 0..=limits::LAPPING_RECORDS),
        slot_count in select(vec![1u64, 2, 4, 8, 16, 32, 64]),
        since in prop::option::of(any::<Index>()),
        most in prop::option::of(0..=70u64),
    ) {
        let ring = HeapRing::new(&config(slot_count, true));
        let probes = add_probes(&ring, probes);
        let mut model = Model::new(slot_count, true);
        for decl in &records {
            model.record(&ring, &probes, decl)?;
        }
        let held = model.held();
        // A time some record was made at, or none.
        let since_ns = since.filter(|_| !model.written.is_empty())
            .map(|index| model.written[index.index(model.written.len())].time_ns);
        let window = Window { since_ns, max_records: most };
        let mut kept: Vec<Record> = held
            .iter()
            .rev()
            .enumerate()
            .take_while(|(taken, record)| {
                since_ns.is_none_or(|since| record.time_ns >= since) && most.is_none_or(|most| (*taken as u64) < most)
            })
            .map(|(_, record)| record.clone())
            .collect();
        kept.reverse();

        let snapshot = ring.snapshot_within(window).map_err(|err| TestCaseError::fail(err.to_string()))?;
        let bytes = snapshot.to_vec();
        prop_assert_eq!(bytes.len() as u64, snapshot.len());
        let trace = parse(&bytes).map_err(|err| TestCaseError::fail(err.to_string()))?;
        prop_assert_eq!(&trace.records, &kept);
        prop_assert_eq!(snapshot.records(), kept.len() as u64);
        let left_out = kept.len() < held.len();
        prop_assert_eq!(snapshot.is_whole(), !left_out);
        if left_out {
            // Sized to the window; what is left out is not lost, and what
            // the ring dropped (a record larger than it) is the ring's count.
            let slots: u64 = kept.iter().map(|record| record.slots).sum();
            prop_assert_eq!(trace.header.slot_count, slots);
            prop_assert_eq!(trace.lost(), model.dropped);
        } else {
            model.check(&trace)?;
        }
    }

    #[test]
    fn without_overwrite_what_does_not_fit_is_dropped_until_consumed(
        probes in prop::collection::vec(probe_decl(), 1..=5),
        operations in prop::collection::vec(
            prop_oneof![4 => record_decl(true).prop_map(Operation::Record), 1 => any::<Index>().prop_map(Operation::Consume)],
            0..=limits::OPERATIONS,
        ),
        slot_count in select(vec![1u64, 2, 4, 8, 16, 32, 64]),
    ) {
        let ring = HeapRing::new(&config(slot_count, false));
        let probes = add_probes(&ring, probes);
        let mut model = Model::new(slot_count, false);
        for operation in &operations {
            match operation {
                Operation::Record(decl) => model.record(&ring, &probes, decl)?,
                Operation::Consume(count) => {
                    let trace = parse(&ring.snapshot()).map_err(|err| TestCaseError::fail(err.to_string()))?;
                    let pending: Vec<&Record> = trace.records.iter().filter(|record| record.seq >= model.tail).collect();
                    let expected: Vec<&Record> = model.written.iter().filter(|record| record.seq >= model.tail).collect();
                    prop_assert_eq!(&pending, &expected, "every record after tail is there");
                    let taken = count.index(pending.len() + 1);
                    if let Some(last) = taken.checked_sub(1).map(|index| pending[index]) {
                        model.tail = last.seq + last.slots;
                        ring.store_tail(model.tail);
                    }
                }
            }
        }
        model.check(&traces(&ring)?.0)?;
        prop_assert_eq!(ring.counters().tail, model.tail);
    }
}
