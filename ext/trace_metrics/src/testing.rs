//! A live ring for the tests: written by the recorder's writer into a
//! file mapped shared, and read through the file as another process reads
//! it while it is written.

use crate::tally::Tally;
use stapsdt::ring::format::{offset, SLOT_SIZE};
use stapsdt::ring::scan::{FileId, ReadAt};
use stapsdt::ring::{Ring, RingConfig};
use stapsdt::ArgType;
use std::fs::{File, OpenOptions};
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed};

/// A ring in a file mapped shared, as the recorder makes it, read
/// through the file as another process reads it while it is written.
pub struct LiveRing {
    pub ring: ManuallyDrop<Ring>,
    file: File,
    path: PathBuf,
    mapping: *mut libc::c_void,
    config: RingConfig,
}

impl LiveRing {
    pub fn new(slot_count: u64, overwrite: bool) -> LiveRing {
        LiveRing::made_at(slot_count, overwrite, 0)
    }

    pub fn made_at(slot_count: u64, overwrite: bool, anchor_monotonic_ns: u64) -> LiveRing {
        static RINGS: AtomicU64 = AtomicU64::new(0);
        let config = RingConfig {
            slot_count,
            table_capacity: 4096,
            overwrite,
            pid: 42,
            pid_namespace: 7,
            anchor_monotonic_ns,
            anchor_realtime_ns: 1_700_000_000_000_000_000,
        };
        let path = std::env::temp_dir().join(format!(
            "trace_metrics-tally-{}-{}",
            std::process::id(),
            RINGS.fetch_add(1, Relaxed)
        ));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        file.set_len(config.file_len()).unwrap();
        // SAFETY: a new shared mapping of the whole file, which is
        // open; the result is checked before it is used.
        let mapping = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                config.file_len() as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(mapping, libc::MAP_FAILED);
        // SAFETY: the mapping is `file_len` bytes of a new file, zeroed
        // and page-aligned; it outlives the ring (Drop drops the ring
        // first) and is touched here only through atomics.
        let ring = unsafe { Ring::create(mapping.cast(), &config) }.unwrap();
        LiveRing {
            ring: ManuallyDrop::new(ring),
            file,
            path,
            mapping,
            config,
        }
    }

    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is 8-aligned, `file_len` bytes, and lives
        // as long as self; the ring writes it only through atomics.
        unsafe {
            std::slice::from_raw_parts(
                self.mapping.cast::<AtomicU64>(),
                self.config.file_len() as usize / 8,
            )
        }
    }

    pub fn latency_probe(&self, name: &str) -> u32 {
        self.ring
            .add_probe("app", name, &[ArgType::Int64], Some(0), None)
            .unwrap()
    }

    pub fn text_probe(&self, name: &str) -> u32 {
        self.ring
            .add_probe("app", name, &[ArgType::String], None, None)
            .unwrap()
    }

    pub fn latencies(&self, probe: u32, durations: &[i64]) {
        for &duration in durations {
            assert!(self.ring.record_integer(probe, 1, 7, duration));
        }
    }

    /// Word `word` (0: the stamp) of the slot of sequence number `seq`.
    pub fn slot_word(&self, seq: u64, word: u64) -> &AtomicU64 {
        let position = seq % self.config.slot_count;
        let at = self.config.ring_offset() + position * SLOT_SIZE + 8 * word;
        &self.words()[(at / 8) as usize]
    }

    pub fn stamp(&self, seq: u64) -> &AtomicU64 {
        self.slot_word(seq, 0)
    }

    /// The header's word at `offset` (8-aligned).
    pub fn header_word(&self, offset: usize) -> &AtomicU64 {
        &self.words()[offset / 8]
    }

    pub fn head(&self) -> u64 {
        self.words()[offset::HEAD / 8].load(Acquire)
    }
}

impl Drop for LiveRing {
    fn drop(&mut self) {
        // SAFETY: dropped once, before the memory it writes is unmapped.
        unsafe { ManuallyDrop::drop(&mut self.ring) };
        // SAFETY: the mapping made in made_at, of that length; nothing
        // refers to it any more.
        unsafe { libc::munmap(self.mapping, self.config.file_len() as usize) };
        let _ = std::fs::remove_file(&self.path);
    }
}

impl ReadAt for LiveRing {
    fn file_len(&self) -> io::Result<u64> {
        self.file.file_len()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        ReadAt::read_at(&self.file, buf, offset)
    }

    fn file_id(&self) -> io::Result<Option<FileId>> {
        self.file.file_id()
    }
}

/// A process's ring and the one it replaced it with, each read once by a
/// tally: 10 calls of `app:index` in the first, 5 in the second.
pub fn rings_read_in_turn() -> (LiveRing, LiveRing, Tally) {
    let first = LiveRing::made_at(64, true, 1);
    let index = first.latency_probe("index");
    first.latencies(index, &[1000; 10]);
    let second = LiveRing::made_at(64, true, 2);
    let again = second.latency_probe("index");
    second.latencies(again, &[1000; 5]);
    let mut tally = Tally::new("ring");
    assert_eq!(tally.scrape(&first).unwrap(), 10);
    assert_eq!(tally.scrape(&second).unwrap(), 5);
    (first, second, tally)
}

pub fn calls(tally: &Tally) -> Vec<(String, u64)> {
    tally
        .probes()
        .iter()
        .map(|probe| (format!("{}:{}", probe.provider, probe.name), probe.calls))
        .collect()
}

pub fn owned(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    pairs
        .iter()
        .map(|&(label, calls)| (label.to_owned(), calls))
        .collect()
}
