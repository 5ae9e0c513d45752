//! A ring over heap memory for the ring's integration tests, and what they
//! share: the test memory stands in for the mapping of a ring file.

#![allow(dead_code)] // Each test crate uses its part.

use stapsdt::ring::{Ring, RingConfig};
use std::ops::Deref;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// A ring and the memory it writes: zeroed and 8-aligned, as a fresh
/// mapping is. The words are atomics, so that the test may read them while
/// writers write.
pub struct HeapRing {
    // Dropped before the memory it points into.
    ring: Ring,
    /// A Vec, not a Box: moving a Box asserts it is the only pointer to
    /// its memory (Miri's Stacked Borrows holds it to that), which the
    /// ring's is not.
    words: Vec<AtomicU64>,
}

impl HeapRing {
    pub fn new(config: &RingConfig) -> HeapRing {
        let words: Vec<AtomicU64> = (0..config.file_len() / 8)
            .map(|_| AtomicU64::new(0))
            .collect();
        // SAFETY: the words are zeroed and 8-aligned; the heap block does not
        // move with the Vec and outlives the ring (field order); nothing else
        // touches it but `bytes`, through atomic loads (see there).
        let ring = unsafe { Ring::create(words.as_ptr().cast_mut().cast(), config) }.unwrap();
        HeapRing { ring, words }
    }

    /// The file as it is now, read once. Only while no writer writes (for
    /// a copy meanwhile, `snapshot`): its u64 loads cover `table_used`, a
    /// u32 the ring writes at its size, and mixed sizes must not race.
    pub fn bytes(&self) -> Vec<u8> {
        self.words
            .iter()
            .flat_map(|word| word.load(Relaxed).to_le_bytes())
            .collect()
    }
}

impl Deref for HeapRing {
    type Target = Ring;

    fn deref(&self) -> &Ring {
        &self.ring
    }
}

pub fn config(slot_count: u64, overwrite: bool) -> RingConfig {
    RingConfig {
        slot_count,
        table_capacity: 4096,
        overwrite,
        pid: 31337,
        pid_namespace: 4026531836,
        anchor_monotonic_ns: 123_456_789,
        anchor_realtime_ns: 1_700_000_000_000_000_000,
    }
}
