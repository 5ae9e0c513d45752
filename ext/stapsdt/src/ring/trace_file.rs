//! Trace files (docs/recording.md), the one writer of them: what a
//! process writes of its own ring ([`Ring::snapshot`]) and what the
//! `static-tracing` command writes of what it read from one (`record`,
//! `dump`: [`write`]). A trace file is the ring's header with flag
//! `complete`, its probe table, and slots sized to the records held; the
//! command's numbers its records from sequence number 0, one after
//! another, and adds the names of their threads after the slots (the
//! trailer, which a reader of the format's version 1 finds nothing in).
//!
//! [`Ring::snapshot`]: super::Ring::snapshot

use super::format::{
    self, first_stamp, later_stamp, Counters, Header, ProbeEntry, Slot, COMPLETE, HEADER_SIZE,
    SLOT_SIZE,
};
use super::scan::ReadAt;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// What a trace file says of where its records came from.
#[derive(Clone, Copy, Debug)]
pub struct Origin<'a> {
    /// The ring's header: its process, its clock, flight mode or not.
    pub header: &'a Header,
    /// The probe table's entries, encoded (see [`encode_table`]).
    pub table: &'a [u8],
    /// Records the process reserved for the records held and those lost
    /// before and between them (dropped ones not included).
    pub records_total: u64,
    pub dropped: u64,
}

/// The probe table of `probes`, encoded as the writer encodes it.
pub fn encode_table(probes: &[ProbeEntry]) -> io::Result<Vec<u8>> {
    // The reader checked every entry it returns as the writer would.
    format::encode_table(probes).map_err(io::Error::other)
}

/// A trace file's header, counters and probe table, for `slot_count`
/// slots whose records were reserved below `head`: what comes before its
/// slots.
pub fn prefix(origin: &Origin<'_>, slot_count: u64, head: u64, records_held: u64) -> Vec<u8> {
    let table_len = origin.table.len() as u64;
    let header = Header {
        table_capacity: table_len,
        ring_offset: HEADER_SIZE + table_len,
        slot_count,
        flags: origin.header.flags | COMPLETE,
        ..*origin.header
    };
    let mut out = Vec::with_capacity(HEADER_SIZE as usize + origin.table.len());
    out.resize(HEADER_SIZE as usize, 0);
    header.encode(&mut out);
    Counters {
        head,
        // At least the records held: one being written at a live read's
        // cut may be whole when its slots are read.
        records: origin.records_total.max(records_held),
        dropped: origin.dropped,
        tail: 0,
        // A table's capacity bounds it: the cast cannot truncate.
        table_used: table_len as u32,
    }
    .encode(&mut out);
    out.extend_from_slice(origin.table);
    out
}

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

    /// Lets go of what was pushed after `len` bytes and `records` records
    /// were held: a read that failed holds nothing of what it had found.
    pub fn truncate(&mut self, len: usize, records: u64) {
        self.bytes.truncate(len);
        self.records = records;
    }

    /// Each record held after the first `bytes` bytes (a `len` taken
    /// before it was pushed): its slots, its first slot first.
    pub fn records_after(&self, bytes: usize) -> impl Iterator<Item = &[u8]> {
        let mut rest = &self.bytes[bytes.min(self.bytes.len())..];
        std::iter::from_fn(move || {
            if rest.len() < SLOT_SIZE as usize {
                return None;
            }
            // The reader held whole records: a first slot's stamp says
            // how many slots follow it.
            let len = (Slot::at(rest).slots().max(1) * SLOT_SIZE) as usize;
            let (record, after) = rest.split_at(len.min(rest.len()));
            rest = after;
            Some(record)
        })
    }

    /// The threads of the records held after the first `bytes` bytes, each once.
    pub fn threads_after(&self, bytes: usize) -> Vec<u32> {
        let mut threads = Vec::new();
        for record in self.records_after(bytes) {
            let tid = Slot::at(record).tid();
            if !threads.contains(&tid) {
                threads.push(tid);
            }
        }
        threads
    }
}

/// Writes `held` as a trace file into `out`: header, probe table, the
/// slots renumbered from sequence number 0, and the names of the threads.
pub fn write(
    out: &mut impl Write,
    origin: &Origin<'_>,
    held: &Held,
    thread_names: &BTreeMap<u32, String>,
) -> io::Result<()> {
    let slot_count = held.slots();
    out.write_all(&prefix(origin, slot_count, slot_count, held.records()))?;
    let mut seq = 0;
    let mut buffer = Vec::with_capacity(1 << 16);
    for record in held.records_after(0) {
        let count = Slot::at(record).slots();
        if record.len() as u64 != count * SLOT_SIZE {
            return Err(io::Error::other("a record held cut short"));
        }
        for (index, slot) in record.chunks_exact(SLOT_SIZE as usize).enumerate() {
            let index = index as u64;
            let stamp = if index == 0 {
                first_stamp(seq, count)
            } else {
                later_stamp(seq, index)
            };
            buffer.extend_from_slice(&stamp.to_le_bytes());
            buffer.extend_from_slice(Slot::at(slot).after_stamp());
        }
        seq += count;
        if buffer.len() >= 1 << 16 {
            out.write_all(&buffer)?;
            buffer.clear();
        }
    }
    out.write_all(&buffer)?;
    out.write_all(&encode_thread_names(thread_names))
}

// The thread names after the slots.

/// What begins the thread names after a trace file's slots.
pub const THREADS_MAGIC: &[u8; 8] = b"STTHREAD";
/// A name longer than this is cut: the kernel's are at most 15 bytes.
pub const MAX_THREAD_NAME: usize = 64;
/// At most this many names are read from a file: a hostile file's count
/// allocates nothing.
const MAX_THREAD_NAMES: usize = 65_536;
const THREAD_ENTRY_HEADER: usize = 5;

/// The names as a trace file holds them after its slots: the magic, a
/// `u32` count, then per thread its id (`u32`), the length of its name
/// (`u8`) and the name's bytes.
pub fn encode_thread_names(names: &BTreeMap<u32, String>) -> Vec<u8> {
    if names.is_empty() {
        return Vec::new();
    }
    let mut bytes = THREADS_MAGIC.to_vec();
    bytes.extend_from_slice(&(names.len() as u32).to_le_bytes());
    for (tid, name) in names {
        let name = &name.as_bytes()[..name.len().min(MAX_THREAD_NAME)];
        bytes.extend_from_slice(&tid.to_le_bytes());
        bytes.push(name.len() as u8);
        bytes.extend_from_slice(name);
    }
    bytes
}

/// The names after the slots of the file in `source` whose header is
/// `header`; none if there are none, or if what follows the slots is not
/// names: they only label what the records say.
pub fn read_thread_names(source: &(impl ReadAt + ?Sized), header: &Header) -> Vec<(u32, String)> {
    let Some(start) = header
        .slot_count
        .checked_mul(SLOT_SIZE)
        .and_then(|slots| slots.checked_add(header.ring_offset))
    else {
        return Vec::new();
    };
    let Ok(len) = source.file_len() else {
        return Vec::new();
    };
    let longest = (THREADS_MAGIC.len()
        + 4
        + MAX_THREAD_NAMES * (THREAD_ENTRY_HEADER + MAX_THREAD_NAME)) as u64;
    let Some(size) = len
        .checked_sub(start)
        .filter(|&size| size > 0 && size <= longest)
    else {
        return Vec::new();
    };
    let mut bytes = vec![0; size as usize];
    match source.read_at(&mut bytes, start) {
        Ok(read) if read == bytes.len() => decode_thread_names(&bytes),
        _ => Vec::new(),
    }
}

fn decode_thread_names(bytes: &[u8]) -> Vec<(u32, String)> {
    let Some(rest) = bytes.strip_prefix(THREADS_MAGIC) else {
        return Vec::new();
    };
    let Some(count) = rest.get(..4) else {
        return Vec::new();
    };
    let count = u32::from_le_bytes(count.try_into().expect("4 bytes")) as usize;
    let mut rest = &rest[4..];
    let mut names = Vec::with_capacity(count.min(MAX_THREAD_NAMES));
    for _ in 0..count.min(MAX_THREAD_NAMES) {
        let Some(entry) = rest.get(..THREAD_ENTRY_HEADER) else {
            break;
        };
        let tid = u32::from_le_bytes(entry[..4].try_into().expect("4 bytes"));
        let len = usize::from(entry[4]);
        let Some(name) = rest.get(THREAD_ENTRY_HEADER..THREAD_ENTRY_HEADER + len) else {
            break;
        };
        names.push((tid, String::from_utf8_lossy(name).into_owned()));
        rest = &rest[THREAD_ENTRY_HEADER + len..];
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_the_names_it_writes_and_nothing_of_other_bytes() {
        let names = BTreeMap::from([
            (7, "ruby".to_owned()),
            (9, "puma srv tp 001".to_owned()),
            (11, "x".repeat(100)),
        ]);
        let bytes = encode_thread_names(&names);
        let read = decode_thread_names(&bytes);
        assert_eq!(
            read,
            [
                (7, "ruby".to_owned()),
                (9, "puma srv tp 001".to_owned()),
                (11, "x".repeat(MAX_THREAD_NAME))
            ]
        );
        // Cut short: the whole names before the cut.
        assert_eq!(decode_thread_names(&bytes[..bytes.len() - 1]).len(), 2);
        assert!(decode_thread_names(b"garbage that is not names").is_empty());
        assert!(decode_thread_names(&[]).is_empty());
        assert!(encode_thread_names(&BTreeMap::new()).is_empty());
    }
}
