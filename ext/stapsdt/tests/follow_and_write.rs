//! A ring followed through its file, as `record` follows one, and dumped,
//! as `dump` does; what they write read back.

mod proptest_setup;

use stapsdt::ring::follow::{dump, Follower};
use stapsdt::ring::Trace;
use stapsdt::ring::{parse, Arg, Ring, RingConfig, Value};
use stapsdt::ArgType;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// A ring in zeroed, 8-aligned memory, and a file its bytes are copied to.
struct Fixture {
    // Before `words`: fields drop in order, and the ring points into them.
    ring: Ring,
    words: Box<[AtomicU64]>,
    path: PathBuf,
    file: File,
}

impl Fixture {
    fn new(name: &str, slots: u64, overwrite: bool) -> Fixture {
        let config = RingConfig {
            slot_count: slots,
            table_capacity: 4096,
            overwrite,
            pid: 42,
            pid_namespace: 7,
            anchor_monotonic_ns: 0,
            anchor_realtime_ns: 1_700_000_000_000_000_000,
        };
        let words: Box<[AtomicU64]> = (0..config.file_len() / 8)
            .map(|_| AtomicU64::new(0))
            .collect();
        // SAFETY: `words` is zeroed, 8-aligned and `file_len` bytes; it
        // outlives `ring` (see the fields' order; a box's memory does not
        // move) and is accessed only through atomics.
        let ring = unsafe { Ring::create(words.as_ptr().cast_mut().cast(), &config) }.unwrap();
        let path =
            std::env::temp_dir().join(format!("stapsdt-follow-{name}-{}", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        Fixture {
            ring,
            words,
            path,
            file,
        }
    }

    /// The file as the ring is now, but its tail, which the reader keeps.
    fn sync(&mut self) {
        let mut tail = [0; 8];
        let _ = self.file.read_exact_at(&mut tail, 320);
        let bytes: Vec<u8> = self
            .words
            .iter()
            .flat_map(|word| word.load(Relaxed).to_le_bytes())
            .collect();
        self.file.write_all_at(&bytes, 0).unwrap();
        self.file.write_all_at(&tail, 320).unwrap();
        // The writer sees the tail the reader stored.
        self.words[40].store(u64::from_le_bytes(tail), Relaxed);
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn values(trace: &Trace) -> Vec<Vec<Value>> {
    trace
        .records
        .iter()
        .map(|record| record.args.clone())
        .collect()
}

#[test]
fn a_follower_takes_each_record_once_and_frees_the_slots_it_read() {
    let mut fixture = Fixture::new("follow", 16, false);
    let probe = fixture
        .ring
        .add_probe("app", "p", &[ArgType::Int64], Some(0), None)
        .unwrap();
    let text = fixture
        .ring
        .add_probe("app", "s", &[ArgType::String], None, None)
        .unwrap();
    for value in 0..10 {
        assert!(fixture.ring.record_integer(probe, value as u64, 1, value));
    }
    fixture.sync();
    let mut follower = Follower::new(&fixture.file, "ring").unwrap();
    assert_eq!(follower.poll(&fixture.file).unwrap(), 10);
    assert_eq!(follower.position(), 10);
    // The writer may now reuse the 10 slots read.
    fixture.sync();
    // 10 records of 2 slots into the 16 slots now free: 8 fit, 2 are dropped.
    let written = (10..20)
        .filter(|&value| {
            fixture
                .ring
                .record(text, value as u64, 2, &[Arg::Str(b"twelve bytes")])
        })
        .count();
    assert_eq!(written, 8);
    fixture.sync();
    assert_eq!(follower.poll(&fixture.file).unwrap(), 8);
    assert_eq!(follower.finish(&fixture.file).unwrap(), 0);
    let counts = follower.counts();
    assert_eq!((counts.records, counts.dropped, counts.lost), (18, 2, 2));

    let mut written = Vec::new();
    follower.write(&mut written).unwrap();
    let trace = parse(&written).unwrap();
    assert_eq!(trace.records.len(), 18);
    assert_eq!(trace.lost(), 2);
    assert_eq!(
        trace.header.slot_count, 26,
        "sized to the records: 10 of 1 slot, 8 of 2"
    );
    assert_eq!(trace.records[0].args, [Value::Int(0)]);
    assert_eq!(
        trace.records[17].args,
        [Value::Str(b"twelve bytes".to_vec())]
    );
    assert_eq!(trace.records[17].time_ns, 17);
}

#[test]
fn a_dump_holds_the_records_of_the_cut_sized_to_them() {
    let mut fixture = Fixture::new("dump", 1 << 12, true);
    let probe = fixture
        .ring
        .add_probe("app", "p", &[ArgType::Int64], None, None)
        .unwrap();
    for value in 0..5 {
        assert!(fixture.ring.record_integer(probe, 0, 1, value));
    }
    fixture.sync();
    let mut out = Vec::new();
    let counts = dump(&fixture.file, "ring", &mut out).unwrap();
    assert_eq!((counts.records, counts.lost), (5, 0));
    assert!(out.len() < 8192, "{} bytes for 5 records", out.len());
    let trace = parse(&out).unwrap();
    assert_eq!(
        values(&trace),
        (0..5)
            .map(|value| vec![Value::Int(value)])
            .collect::<Vec<_>>()
    );

    // Wrapped twice over: the newest records, the others overwritten.
    for value in 5..10_000 {
        assert!(fixture.ring.record_integer(probe, 0, 1, value));
    }
    fixture.sync();
    let mut out = Vec::new();
    let counts = dump(&fixture.file, "ring", &mut out).unwrap();
    assert_eq!((counts.records, counts.lost), (1 << 12, 10_000 - (1 << 12)));
    let trace = parse(&out).unwrap();
    let last = trace.records.last().unwrap();
    assert_eq!(last.args, [Value::Int(9_999)]);
    assert_eq!(trace.lost(), 10_000 - (1 << 12));
    let _ = std::io::sink().write_all(&out);
}

#[test]
fn a_file_that_breaks_the_format_is_named_in_the_error() {
    let fixture = Fixture::new("broken", 16, true);
    fixture.file.write_all_at(b"NOTATRACE", 0).unwrap();
    let err = Follower::new(&fixture.file, "broken.trace")
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.starts_with("broken.trace: not a static_tracing ring or trace file"),
        "{err}"
    );
}

#[test]
fn a_follower_from_now_reads_and_counts_only_the_records_made_after_it_began() {
    let mut fixture = Fixture::new("from-now", 16, true);
    let probe = fixture
        .ring
        .add_probe("app", "p", &[ArgType::Int64], Some(0), None)
        .unwrap();
    // A flight ring another recording has lapped: 40 records, 24 overwritten.
    for value in 0..40 {
        fixture.ring.record_integer(probe, value as u64, 1, value);
    }
    fixture.sync();
    let mut follower = Follower::from_now(&fixture.file, "ring").unwrap();
    assert_eq!(follower.poll(&fixture.file).unwrap(), 0);
    for value in 40..45 {
        fixture.ring.record_integer(probe, value as u64, 1, value);
    }
    fixture.sync();
    assert_eq!(follower.poll(&fixture.file).unwrap(), 5);
    let counts = follower.counts();
    assert_eq!((counts.records, counts.lost, counts.dropped), (5, 0, 0));
    // Then 20 more before the next read: 4 of them overwritten.
    for value in 45..65 {
        fixture.ring.record_integer(probe, value as u64, 1, value);
    }
    fixture.sync();
    assert_eq!(follower.poll(&fixture.file).unwrap(), 16);
    assert_eq!(follower.finish(&fixture.file).unwrap(), 0);
    let counts = follower.counts();
    assert_eq!((counts.records, counts.lost, counts.dropped), (21, 4, 0));

    let mut written = Vec::new();
    follower.write(&mut written).unwrap();
    let trace = parse(&written).unwrap();
    let firsts: Vec<Value> = trace.records.iter().map(|r| r.args[0].clone()).collect();
    let expected: Vec<Value> = (40..45).chain(49..65).map(Value::Int).collect();
    assert_eq!(firsts, expected);
    assert_eq!(trace.lost(), 4);
}

#[test]
fn a_follower_from_now_refuses_a_ring_rewritten_after_it_began() {
    let mut fixture = Fixture::new("from-now-rewritten", 16, true);
    let probe = fixture
        .ring
        .add_probe("app", "p", &[ArgType::Int64], Some(0), None)
        .unwrap();
    for value in 0..3 {
        assert!(fixture.ring.record_integer(probe, value as u64, 1, value));
    }
    fixture.sync();
    let mut follower = Follower::from_now(&fixture.file, "ring").unwrap();
    assert!(fixture.ring.record_integer(probe, 3, 1, 3));
    fixture.sync();
    assert_eq!(follower.poll(&fixture.file).unwrap(), 1);
    // records (offset 192) sent back under what the follower read.
    fixture.file.write_all_at(&1u64.to_le_bytes(), 192).unwrap();
    let err = follower.poll(&fixture.file).unwrap_err().to_string();
    assert!(
        err.starts_with("ring: the ring was rewritten since it was last read: "),
        "{err}"
    );
    assert_eq!(follower.refused(), Some(err.as_str()));
    assert_eq!(follower.counts().records, 1);
}

#[test]
fn a_ring_rewritten_under_its_follower_is_read_no_more_and_what_was_read_is_written_readable() {
    // max_string (offset 88) lowered under the Strings read, or table_used
    // (offset 384) down to the first entry: the trace file written holds
    // what was read before, with the header and table it was read with.
    for (at, value) in [(88, 4u32), (384, 24)] {
        let mut fixture = Fixture::new(&format!("rewritten-{at}"), 64, true);
        let number = fixture
            .ring
            .add_probe("app", "p", &[ArgType::Int64], Some(0), None)
            .unwrap();
        let text = fixture
            .ring
            .add_probe("app", "s", &[ArgType::String], None, None)
            .unwrap();
        assert!(fixture.ring.record_integer(number, 1, 1, 5));
        assert!(fixture
            .ring
            .record(text, 2, 1, &[Arg::Str(b"a long string")]));
        fixture.sync();
        let mut follower = Follower::new(&fixture.file, "ring").unwrap();
        assert_eq!(follower.poll(&fixture.file).unwrap(), 2);

        assert!(fixture.ring.record_integer(number, 3, 1, 6));
        fixture.sync();
        fixture.file.write_all_at(&value.to_le_bytes(), at).unwrap();
        let err = follower.poll(&fixture.file).unwrap_err().to_string();
        assert!(
            err.starts_with("ring: the ring was rewritten since it was last read: "),
            "{err}"
        );
        // Put back: still read no more.
        fixture.sync();
        assert_eq!(follower.finish(&fixture.file).unwrap_err().to_string(), err);
        assert_eq!(follower.refused(), Some(err.as_str()));

        let mut written = Vec::new();
        follower.write(&mut written).unwrap();
        let trace = parse(&written).unwrap();
        assert_eq!(
            values(&trace),
            [
                vec![Value::Int(5)],
                vec![Value::Str(b"a long string".to_vec())]
            ]
        );
        assert_eq!(trace.probes.len(), 2);
        assert_eq!(trace.header.max_string, 1024);
    }
}

/// A state machine over the follower, the reader `record` keeps reading one
/// ring with: its process records, adds probes, and rewrites words of its
/// ring's header in the file (a table that shrinks, a string limit lowered,
/// an anchor moved, counters sent back) and puts them back, between reads.
/// Whatever it does, a read never panics, nothing is taken that was not
/// recorded, and what the follower writes is a trace file the reader reads;
/// a ring that was never rewritten is taken whole.
mod rewritten_under_the_follower {
    use super::*;
    use crate::proptest_setup::config;
    use proptest::prelude::*;
    use proptest::sample::Index;

    /// table_used, max_string, the anchors, slot_count, head, records,
    /// dropped: what the reader relies on.
    const WORDS: [u64; 8] = [384, 88, 72, 80, 40, 128, 192, 256];

    #[derive(Clone, Debug)]
    enum Step {
        Call {
            probe: Index,
            count: u16,
        },
        Text {
            length: u8,
        },
        AddProbe,
        Poll,
        Rewrite {
            word: Index,
            value: u64,
            relative: bool,
        },
        PutBack,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (any::<Index>(), 1u16..24).prop_map(|(probe, count)| Step::Call { probe, count }),
            2 => (0u8..80).prop_map(|length| Step::Text { length }),
            1 => Just(Step::AddProbe),
            4 => Just(Step::Poll),
            2 => (any::<Index>(), prop_oneof![0u64..64, any::<u64>()], any::<bool>())
                .prop_map(|(word, value, relative)| Step::Rewrite { word, value, relative }),
            2 => Just(Step::PutBack),
        ]
    }

    /// Writes the rewrites over what was just synced; true when one of
    /// them changed a word. Whether a rewrite changes anything is only
    /// known here: the process may have moved the word since it was chosen.
    fn rewrite(file: &File, rewritten: &[(u64, u64)]) -> bool {
        let mut changed = false;
        for &(at, value) in rewritten {
            let mut was = [0; 8];
            file.read_exact_at(&mut was, at).unwrap();
            changed |= u64::from_le_bytes(was) != value;
            file.write_all_at(&value.to_le_bytes(), at).unwrap();
        }
        changed
    }

    fn run(steps: &[Step]) -> Result<(), TestCaseError> {
        let mut fixture = Fixture::new("machine", 64, false);
        let mut probes = vec![fixture
            .ring
            .add_probe("app", "p0", &[ArgType::Int64], Some(0), None)
            .unwrap()];
        let text_probe = fixture
            .ring
            .add_probe("app", "text", &[ArgType::String], None, None)
            .unwrap();
        fixture.sync();
        let mut follower = Follower::new(&fixture.file, "ring").unwrap();
        let mut recorded = 0u64;
        let mut rewritten: Vec<(u64, u64)> = Vec::new();
        let mut ever_rewritten = false;
        for step in steps {
            match step {
                Step::Call { probe, count } => {
                    let id = *probe.get(&probes);
                    for value in 0..*count {
                        if fixture.ring.record_integer(id, 1, 1, i64::from(value)) {
                            recorded += 1;
                        }
                    }
                }
                Step::Text { length } => {
                    let text = vec![b'x'; usize::from(*length)];
                    if fixture.ring.record(text_probe, 1, 1, &[Arg::Str(&text)]) {
                        recorded += 1;
                    }
                }
                Step::AddProbe => {
                    let name = format!("p{}", probes.len());
                    if let Ok(id) =
                        fixture
                            .ring
                            .add_probe("app", &name, &[ArgType::Int64], Some(0), None)
                    {
                        probes.push(id);
                    }
                }
                Step::Rewrite {
                    word,
                    value,
                    relative,
                } => {
                    let at = *word.get(&WORDS);
                    // The process's own word, not the file: the file is
                    // only as new as the last sync.
                    let was = fixture.words[at as usize / 8].load(Relaxed);
                    let now = if *relative {
                        was.wrapping_sub(*value)
                    } else {
                        *value
                    };
                    rewritten.push((at, now));
                }
                Step::PutBack => rewritten.clear(),
                Step::Poll => {
                    fixture.sync();
                    ever_rewritten |= rewrite(&fixture.file, &rewritten);
                    let read = follower.poll(&fixture.file);
                    if !ever_rewritten {
                        prop_assert!(read.is_ok(), "{:?}", read.err());
                    }
                    fixture.sync();
                }
            }
            prop_assert!(follower.counts().records <= recorded);
        }
        // `record` ends as the process left its ring: rewritten, maybe.
        fixture.sync();
        ever_rewritten |= rewrite(&fixture.file, &rewritten);
        let rest = follower.finish(&fixture.file);
        let mut written = Vec::new();
        follower.write(&mut written).unwrap();
        let trace = parse(&written);
        prop_assert!(trace.is_ok(), "{:?} after {:?}", trace.err(), rest);
        let trace = trace.unwrap();
        prop_assert!(trace.records.len() as u64 <= recorded);
        if !ever_rewritten {
            prop_assert!(rest.is_ok());
            prop_assert_eq!(trace.records.len() as u64, recorded);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(config(96))]

        #[test]
        fn a_follower_of_a_ring_its_process_rewrites_never_panics_and_writes_a_readable_file(
            steps in proptest::collection::vec(step(), 1..40)
        ) {
            run(&steps)?;
        }
    }
}
