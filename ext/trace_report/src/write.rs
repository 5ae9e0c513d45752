//! Writing trace files (docs/recording.md): what `record` read from a ring
//! as it followed it, or what `dump` read of one at a cut. A trace file is
//! sized to the records it holds: they are laid one after another from
//! sequence number 0, each with the bytes it had in the ring (so its
//! probe id, thread, time and payload are as written), its stamps renumbered.
//! After the slots come the names of the records' threads, when the
//! command could read them (see [`crate::report::threads`]).

use crate::report::threads::encode_trailer;
use stapsdt::ring::format::{
    first_stamp, later_stamp, Counters, Entry, Header, COMPLETE, HEADER_SIZE, SLOT_SIZE,
};
use stapsdt::ring::ProbeEntry;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// Records held for writing, as the reader found them: the bytes of each
/// one's slots, one record after another, in sequence order.
#[derive(Clone, Debug, Default)]
pub struct Held {
    bytes: Vec<u8>,
    records: u64,
}

impl Held {
    /// Holds a record whose slots are `slots` (whole slots, its stamps first).
    pub fn push(&mut self, slots: &[u8]) {
        self.bytes.extend_from_slice(slots);
        self.records += 1;
    }

    /// Records held.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Slots held.
    pub fn slots(&self) -> u64 {
        self.bytes.len() as u64 / SLOT_SIZE
    }

    /// Bytes held: what the trace file's slots take.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The threads of the records held after the first `bytes` bytes (a
    /// `len` taken before they were added), each once.
    pub fn threads_after(&self, bytes: usize) -> Vec<u32> {
        let slot_size = SLOT_SIZE as usize;
        let mut threads = Vec::new();
        let mut at = bytes.min(self.bytes.len());
        while let Some(first) = self.bytes.get(at..at + slot_size) {
            let stamp = u64::from_le_bytes(first[..8].try_into().unwrap());
            let tid = u32::from_le_bytes(first[20..24].try_into().unwrap());
            if !threads.contains(&tid) {
                threads.push(tid);
            }
            at += slot_size * (stamp & stapsdt::ring::format::INDEX_MASK).max(1) as usize;
        }
        threads
    }

    /// The records held after the first `bytes` bytes (a `len` taken
    /// before they were added).
    pub fn after(&self, bytes: usize) -> Held {
        let mut after = Held::default();
        let slot_size = SLOT_SIZE as usize;
        let mut slots = self.bytes[bytes.min(self.bytes.len())..].chunks_exact(slot_size);
        while let Some(first) = slots.next() {
            let stamp = u64::from_le_bytes(first[..8].try_into().unwrap());
            after.bytes.extend_from_slice(first);
            for _ in 1..(stamp & stapsdt::ring::format::INDEX_MASK) {
                if let Some(slot) = slots.next() {
                    after.bytes.extend_from_slice(slot);
                }
            }
            after.records += 1;
        }
        after
    }
}

/// What a trace file says of where its records came from.
#[derive(Clone, Copy, Debug)]
pub struct Origin<'a> {
    /// The ring's header: its process, its clock, flight mode or not.
    pub header: &'a Header,
    pub probes: &'a [ProbeEntry],
    /// Records the process reserved for the records held and those lost
    /// before and between them (dropped ones not included).
    pub records_total: u64,
    pub dropped: u64,
    /// The names of the records' threads, by id, as far as they are known.
    pub thread_names: &'a BTreeMap<u32, String>,
}

/// Writes `held` as a trace file into `out`: header, probe table, slots.
pub fn write_trace(out: &mut impl Write, origin: Origin<'_>, held: &Held) -> io::Result<()> {
    let mut table = Vec::new();
    for probe in origin.probes {
        let entry = Entry {
            provider: &probe.provider,
            probe: &probe.name,
            types: &probe.types,
            latency_arg: probe.latency_arg,
            stack_arg: probe.stack_arg,
        };
        // The reader checked every entry it returns as the writer would.
        let encoded = entry.encode().map_err(io::Error::other)?;
        table.extend_from_slice(encoded.as_bytes());
    }
    let slot_count = held.slots();
    let header = Header {
        table_capacity: table.len() as u64,
        ring_offset: HEADER_SIZE + table.len() as u64,
        slot_count,
        flags: origin.header.flags | COMPLETE,
        ..*origin.header
    };
    let mut first = vec![0; HEADER_SIZE as usize];
    header.encode(&mut first);
    Counters {
        head: slot_count,
        records: origin.records_total.max(held.records()),
        dropped: origin.dropped,
        tail: 0,
        // Entries of at most 272 bytes, for at most a table's capacity.
        table_used: table.len() as u32,
    }
    .encode(&mut first);
    out.write_all(&first)?;
    out.write_all(&table)?;
    write_slots(out, held)?;
    out.write_all(&encode_trailer(origin.thread_names))
}

/// The held records' slots, renumbered from sequence number 0.
fn write_slots(out: &mut impl Write, held: &Held) -> io::Result<()> {
    let slot_size = SLOT_SIZE as usize;
    let mut slots = held.bytes.chunks_exact(slot_size);
    let mut seq = 0;
    let mut buffer = Vec::with_capacity(1 << 16);
    while let Some(first_slot) = slots.next() {
        // The reader held whole records: a first slot's stamp says how many
        // slots follow it.
        let stamp = u64::from_le_bytes(first_slot[..8].try_into().unwrap());
        let count = stamp & stapsdt::ring::format::INDEX_MASK;
        buffer.extend_from_slice(&first_stamp(seq, count).to_le_bytes());
        buffer.extend_from_slice(&first_slot[8..]);
        for index in 1..count {
            let slot = slots
                .next()
                .ok_or_else(|| io::Error::other("a record held cut short"))?;
            buffer.extend_from_slice(&later_stamp(seq, index).to_le_bytes());
            buffer.extend_from_slice(&slot[8..]);
        }
        seq += count;
        if buffer.len() >= 1 << 16 {
            out.write_all(&buffer)?;
            buffer.clear();
        }
    }
    out.write_all(&buffer)
}
