//! A ring followed through its file, as `record` follows one, and dumped,
//! as `dump` does; what they write read back.

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
