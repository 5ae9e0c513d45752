//! Reading a ring or trace file from where its bytes are (a descriptor,
//! bytes in memory) a window of slots at a time: what is held at once is
//! one window and the records found, never the file's slots, so that
//! memory follows the records a file holds and not the sizes it claims.
//! Every reader of the format goes through here: `parse`, and the
//! `static-tracing` command's reading of files and live rings.
//!
//! A live ring (a process may be writing it) is read at a cut: its
//! counters first, `records` and `dropped` before `head`; then each window
//! in passes A (stamps), B (slots) and C (stamps), as docs/recording.md
//! says. A record written after the cut is neither read nor counted lost.

use super::format::{offset, Counters, Header, HEADER_SIZE, INDEX_MASK, SLOT_SIZE, TABLE_OFFSET};
use super::reader::{self, FormatError, ProbeEntry, Record, Slots, Trace};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Where a file's bytes are.
pub trait ReadAt {
    /// The file's length in bytes now.
    fn file_len(&self) -> io::Result<u64>;
    /// Fills `buf` from `offset`; an error if the file ends first.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl ReadAt for [u8] {
    fn file_len(&self) -> io::Result<u64> {
        Ok(<[u8]>::len(self) as u64)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let bytes = start
            .checked_add(buf.len())
            .and_then(|end| self.get(start..end))
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(bytes);
        Ok(())
    }
}

impl ReadAt for File {
    fn file_len(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
}

/// Why a file could not be read: it breaks the format, or reading it failed.
#[derive(Debug)]
pub enum ReadError {
    Format(FormatError),
    Io(io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Format(err) => err.fmt(f),
            ReadError::Io(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for ReadError {}

impl From<FormatError> for ReadError {
    fn from(err: FormatError) -> ReadError {
        ReadError::Format(err)
    }
}

impl From<io::Error> for ReadError {
    fn from(err: io::Error) -> ReadError {
        // A file that ends before what its header promised was cut as it
        // was read (the header was checked against its length before).
        ReadError::Io(err)
    }
}

/// How the slots are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// Once: a trace file, or a consistent copy of a ring.
    Once,
    /// At a cut, in passes A, B and C: a ring a process may be writing.
    Live,
}

/// Slots read at once: 512 KiB.
const WINDOW_SLOTS: u64 = 1 << 14;

/// A ring or trace file's header, counters and probe table, read and
/// checked; its slots are read by [`Opened::scan`].
#[derive(Clone, Debug)]
pub struct Opened {
    pub header: Header,
    /// For a live ring, as of the cut.
    pub counters: Counters,
    pub probes: Vec<ProbeEntry>,
    pub pass: Pass,
}

/// Reads and checks the header, counters and table of the file in
/// `source`; `pass` is how its slots will be read (a complete file is
/// always read once).
pub fn open(source: &(impl ReadAt + ?Sized), pass: Pass) -> Result<Opened, ReadError> {
    let file_len = source.file_len()?;
    let mut bytes = vec![0; file_len.min(HEADER_SIZE) as usize];
    source.read_exact_at(&mut bytes, 0)?;
    let header = reader::header(&bytes, file_len)?;
    let pass = if header.complete() { Pass::Once } else { pass };
    if pass == Pass::Live {
        // The cut: head (and table_used) read again after records and
        // dropped, so that every record counted was reserved below head.
        for at in [offset::HEAD, offset::TABLE_USED] {
            source.read_exact_at(&mut bytes[at..at + 8], at as u64)?;
        }
    }
    let counters = reader::counters(&bytes, &header)?;
    let mut table = vec![0; counters.table_used as usize];
    source.read_exact_at(&mut table, TABLE_OFFSET)?;
    let probes = reader::table(&table)?;
    Ok(Opened {
        header,
        counters,
        probes,
        pass,
    })
}

impl Opened {
    /// Visits the valid records whose first slot's index is `from` or
    /// later (0 is the oldest slot, the one after head's), in index order,
    /// each with the bytes of its slots; returns the index after the last
    /// slot looked at. The first record that breaks the format is an error.
    pub fn scan(
        &self,
        source: &(impl ReadAt + ?Sized),
        from: u64,
        mut visit: impl FnMut(Record, &[u8]),
    ) -> Result<u64, ReadError> {
        let slot_count = self.header.slot_count;
        // A record takes at most INDEX_MASK slots, and at most slot_count:
        // a window that reaches that far past its part holds every record
        // that starts in it.
        let reach = INDEX_MASK.min(slot_count);
        let (mut window, mut wrapped) = (Vec::new(), Vec::new());
        let mut index = from;
        while index < slot_count {
            let part_end = slot_count.min(index + WINDOW_SLOTS);
            let len = slot_count.min(part_end - index + reach);
            let position = self.position(index);
            self.read_window(source, position, len, &mut window)?;
            let slots = Slots {
                area: &window,
                window: position,
                slot_count,
                head: self.counters.head,
                cut: self.pass == Pass::Live,
                ring_offset: self.header.ring_offset,
                probes: &self.probes,
                max_string: self.header.max_string,
            };
            let (records, next) = slots.records_between(index, part_end)?;
            for record in records {
                // The record's slots are in the window, one after another,
                // but for a window of the whole ring that they wrap around.
                let start = (record.seq % slot_count + slot_count - position) % slot_count;
                let (start, len) = (
                    (start * SLOT_SIZE) as usize,
                    (record.slots * SLOT_SIZE) as usize,
                );
                if let Some(bytes) = window.get(start..start + len) {
                    visit(record, bytes);
                } else {
                    wrapped.clear();
                    wrapped.extend_from_slice(&window[start..]);
                    wrapped.extend_from_slice(&window[..start + len - window.len()]);
                    visit(record, &wrapped);
                }
            }
            index = next;
        }
        Ok(index)
    }

    /// The position of the slot `index` slots after the oldest.
    fn position(&self, index: u64) -> u64 {
        let slot_count = self.header.slot_count;
        (self.counters.head % slot_count + index % slot_count) % slot_count
    }

    /// Reads `len` slots (at most slot_count) from `position`, wrapping,
    /// into `window`: once, or in passes A, B and C, where a slot whose
    /// stamp changed between A and C gets stamp 0.
    fn read_window(
        &self,
        source: &(impl ReadAt + ?Sized),
        position: u64,
        len: u64,
        window: &mut Vec<u8>,
    ) -> Result<(), ReadError> {
        let slot_size = SLOT_SIZE as usize;
        let read = |into: &mut Vec<u8>| -> io::Result<()> {
            into.resize(len as usize * slot_size, 0);
            let first = len.min(self.header.slot_count - position);
            let (head, tail) = into.split_at_mut(first as usize * slot_size);
            source.read_exact_at(head, self.header.ring_offset + position * SLOT_SIZE)?;
            source.read_exact_at(tail, self.header.ring_offset)
        };
        if self.pass == Pass::Once {
            return Ok(read(window)?);
        }
        let mut before = Vec::new();
        read(&mut before)?;
        read(window)?;
        let mut after = Vec::new();
        read(&mut after)?;
        let stamps = |bytes: &[u8]| -> Vec<[u8; 8]> {
            bytes
                .chunks_exact(slot_size)
                .map(|slot| slot[..8].try_into().unwrap())
                .collect()
        };
        for ((slot, a), c) in window
            .chunks_exact_mut(slot_size)
            .zip(stamps(&before))
            .zip(stamps(&after))
        {
            if a != c || slot[..8] != a {
                slot[..8].fill(0);
            }
        }
        Ok(())
    }
}

/// Reads the whole file in `source` (its records in sequence order), as
/// [`open`] and [`Opened::scan`] do.
pub fn read(source: &(impl ReadAt + ?Sized), pass: Pass) -> Result<Trace, ReadError> {
    let opened = open(source, pass)?;
    let mut records = Vec::new();
    opened.scan(source, 0, |record, _| records.push(record))?;
    // Out of order only if a record was written a lap late, over a newer
    // one's slot.
    records.sort_by_key(|record| record.seq);
    let counters = opened.counters;
    if records.len() as u64 > counters.records && opened.pass == Pass::Once {
        return Err(FormatError::invalid(
            "header field records",
            offset::RECORDS as u64,
            format!("at least the {} records the file holds", records.len()),
            counters.records,
        )
        .into());
    }
    Ok(Trace {
        header: opened.header,
        counters,
        probes: opened.probes,
        records,
    })
}
