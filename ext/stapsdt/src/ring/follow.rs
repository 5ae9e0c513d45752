//! Following a live ring as its process writes it (`static-tracing
//! record`), and reading one at a cut (`dump`): what is read is held as
//! the bytes of its records' slots, for the trace file written of them
//! ([`trace_file::write`]).
//!
//! A follower moves a [`Cursor`] from the ring's `tail`; without
//! overwrite it then stores the cursor's position in `tail`, which lets
//! the writer reuse the slots before it. In flight mode (overwrite) the
//! writer does not wait: what it overwrote before a read is lost.

use super::continuity::Continuity;
use super::cursor::{Cursor, Lost};
use super::format::{offset, ProbeEntry, Slot, SLOT_SIZE};
use super::live_threads::live_names;
use super::scan::{self, Opened, Pass, ReadAt, TraceError};
use super::trace_file::{self, Held, Origin};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;

/// Where a ring followed is: read, and written to for its `tail`.
pub trait RingSource: ReadAt {
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()>;
}

impl RingSource for File {
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        FileExt::write_all_at(self, bytes, offset)
    }
}

/// A live ring followed.
pub struct Follower {
    name: String,
    /// The last read that agreed with the ones before: what is written.
    opened: Opened,
    /// What the reads found, which each read must agree with: a ring its
    /// process rewrote is read no more, and what was read of it is kept.
    continuity: Continuity,
    /// Why it is read no more, once it contradicted the reads before.
    refused: Option<String>,
    cursor: Cursor,
    held: Held,
    /// The names of the threads of the records held, read while the
    /// process runs: its threads' ids alone say little once it is gone.
    thread_names: BTreeMap<u32, String>,
    /// Where the process is in this `/proc`, once looked for.
    process: Option<Option<u64>>,
    /// What the ring had reserved and dropped before the follower began,
    /// when it began at the ring's head ([`Follower::from_now`]): not its
    /// records, and none of them lost.
    before: Lost,
}

/// What a follower or a dump read, as the command reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Records read (and held).
    pub records: u64,
    /// Records reserved and not read: dropped, overwritten, or being
    /// written when the ring was last read.
    pub lost: u64,
    /// Of those, dropped by the writer (the ring or its table was full).
    pub dropped: u64,
}

impl Follower {
    /// Starts following the ring `file` (opened for reading and writing),
    /// named `name` in messages, from its `tail`.
    pub fn new(file: &(impl RingSource + ?Sized), name: &str) -> Result<Follower, TraceError> {
        let opened = open(file, name)?;
        Ok(Follower {
            name: name.to_owned(),
            cursor: Cursor::at(opened.counters.tail),
            continuity: Continuity::of(&opened, None),
            refused: None,
            opened,
            held: Held::default(),
            thread_names: BTreeMap::new(),
            process: None,
            before: Lost::default(),
        })
    }

    /// Starts following the ring `file` from its head: only records made
    /// from now on are read, and only they are counted, read or lost (a
    /// flight ring another recording fills, read for a while). Only reads.
    ///
    /// Where it starts is taken where two reads of the ring's counters in a
    /// row agree (a few tries at most), so that a record being reserved as
    /// it starts (its slots counted in `head` before it is counted in
    /// `records`) is not taken for one of its own, lost.
    ///
    /// Each of those reads is held to the ones before (see
    /// [`super::continuity`]), as every later read is: a ring rewritten
    /// while it starts is refused.
    pub fn from_now(file: &(impl RingSource + ?Sized), name: &str) -> Result<Follower, TraceError> {
        let mut opened = open(file, name)?;
        let mut continuity = Continuity::of(&opened, None);
        for _ in 0..100 {
            let again = open(file, name)?;
            continuity
                .agrees(&again)
                .map_err(|err| TraceError::of(name, err.into()))?;
            continuity.advance(&again);
            let settled = again.counters.head == opened.counters.head
                && again.counters.records == opened.counters.records;
            opened = again;
            if settled {
                break;
            }
        }
        let counters = &opened.counters;
        let before = Lost {
            dropped: counters.dropped,
            overwritten: counters.records,
        };
        let cursor = Cursor {
            position: counters.head,
            lost: before,
            ..Cursor::default()
        };
        Ok(Follower {
            name: name.to_owned(),
            cursor,
            opened,
            continuity,
            refused: None,
            held: Held::default(),
            thread_names: BTreeMap::new(),
            process: None,
            before,
        })
    }

    /// Reads the records committed since the last poll; returns how many.
    pub fn poll(&mut self, file: &(impl RingSource + ?Sized)) -> Result<u64, TraceError> {
        self.read(file, |cursor, opened, held| {
            cursor.follow(opened, file, |_, slots| held.push(slots))
        })
    }

    /// Reads every record still whole from the position on, whether or not
    /// the ones before it were committed: the last read (the process
    /// exited, or the recording stopped). What could not be read is lost.
    pub fn finish(&mut self, file: &(impl RingSource + ?Sized)) -> Result<u64, TraceError> {
        self.read(file, |cursor, opened, held| {
            cursor.read_rest(opened, file, |_, slots| held.push(slots))
        })
    }

    /// A read: what it found held, the cursor moved, the position stored,
    /// the threads named; a read that fails holds nothing it found. A
    /// ring that contradicts the reads before (see
    /// [`super::continuity`]) is refused, then and at every later read.
    fn read(
        &mut self,
        file: &(impl RingSource + ?Sized),
        read: impl FnOnce(&mut Cursor, &Opened, &mut Held) -> Result<u64, scan::ReadError>,
    ) -> Result<u64, TraceError> {
        if let Some(refused) = &self.refused {
            return Err(TraceError::Format(refused.clone()));
        }
        let opened = open(file, &self.name)?;
        if let Err(err) = self.continuity.agrees(&opened) {
            let err = TraceError::of(&self.name, err.into());
            self.refused = Some(err.to_string());
            return Err(err);
        }
        self.opened = opened;
        let (bytes, records) = (self.held.len(), self.held.records());
        let found = read(&mut self.cursor, &self.opened, &mut self.held).map_err(|err| {
            self.held.truncate(bytes, records);
            TraceError::of(&self.name, err)
        })?;
        self.continuity.advance(&self.opened);
        self.store_tail(file)?;
        self.name_threads(bytes);
        Ok(found)
    }

    /// Why the ring is read no more, if it is not.
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    pub fn counts(&self) -> Counts {
        let mut lost = self.cursor.lost;
        lost.dropped = lost.dropped.saturating_sub(self.before.dropped);
        lost.overwritten = lost.overwritten.saturating_sub(self.before.overwritten);
        Counts {
            records: self.cursor.read,
            lost: lost.total(),
            dropped: lost.dropped,
        }
    }

    /// The sequence number of the next slot to read.
    pub fn position(&self) -> u64 {
        self.cursor.position
    }

    pub fn probes(&self) -> &[ProbeEntry] {
        &self.opened.probes
    }

    /// Writes what was read as a trace file.
    pub fn write(&self, out: &mut impl Write) -> io::Result<()> {
        write(
            out,
            &self.opened,
            self.before,
            &self.held,
            &self.thread_names,
        )
    }

    /// Reads the names of the threads of the records held after the first
    /// `bytes` bytes that have none yet, if the process can be seen: once
    /// per thread, not per poll.
    fn name_threads(&mut self, bytes: usize) {
        let unnamed: Vec<u32> = self
            .held
            .threads_after(bytes)
            .into_iter()
            .filter(|tid| !self.thread_names.contains_key(tid))
            .collect();
        if unnamed.is_empty() {
            return;
        }
        let found = live_names(&self.opened.header, &unnamed, &mut self.process);
        self.thread_names.extend(found);
    }

    /// What was read so far, held as the bytes of its records' slots.
    pub fn held(&self) -> &Held {
        &self.held
    }

    /// The records held after the first `bytes` bytes of them (see
    /// [`Held::len`]): each one's first slot, and its payload (its
    /// arguments as the ring encodes them, then the padding).
    pub fn records_after(&self, bytes: usize) -> impl Iterator<Item = (Slot<'_>, Vec<u8>)> {
        self.held.records_after(bytes).map(|slots| {
            let first = Slot::at(slots);
            let mut payload = first.first_payload().to_vec();
            for later in slots.chunks_exact(SLOT_SIZE as usize).skip(1) {
                payload.extend_from_slice(Slot::at(later).later_payload());
            }
            (first, payload)
        })
    }

    /// Nothing is stored in a trace file or a flight ring: no writer waits.
    fn store_tail(&self, file: &(impl RingSource + ?Sized)) -> Result<(), TraceError> {
        let header = &self.opened.header;
        let position = self.cursor.position;
        if header.overwrite() || header.complete() || position == self.opened.counters.tail {
            return Ok(());
        }
        file.write_all_at(&position.to_le_bytes(), offset::TAIL as u64)
            .map_err(|err| TraceError::Io {
                name: self.name.clone(),
                err: io::Error::new(err.kind(), format!("cannot store the read position: {err}")),
            })
    }
}

/// What `dump` writes: the records a ring holds at a cut, as a trace file
/// into `out`; what it read, by the counts.
pub fn dump(
    ring: &(impl ReadAt + ?Sized),
    name: &str,
    out: &mut impl Write,
) -> Result<Counts, DumpError> {
    let opened = open(ring, name)?;
    let mut cursor = Cursor::default();
    let mut held = Held::default();
    cursor
        .read_rest(&opened, ring, |_, slots| held.push(slots))
        .map_err(|err| TraceError::of(name, err))?;
    let thread_names = live_names(&opened.header, &held.threads_after(0), &mut None)
        .into_iter()
        .collect();
    write(out, &opened, Lost::default(), &held, &thread_names).map_err(DumpError::Write)?;
    Ok(counts(&cursor))
}

/// Why a dump failed: reading the ring, or writing the trace file.
#[derive(Debug)]
pub enum DumpError {
    Read(TraceError),
    Write(io::Error),
}

impl From<TraceError> for DumpError {
    fn from(err: TraceError) -> DumpError {
        DumpError::Read(err)
    }
}

fn open(file: &(impl ReadAt + ?Sized), name: &str) -> Result<Opened, TraceError> {
    scan::open(file, Pass::Live).map_err(|err| TraceError::of(name, err))
}

fn counts(cursor: &Cursor) -> Counts {
    Counts {
        records: cursor.read,
        lost: cursor.lost.total(),
        dropped: cursor.lost.dropped,
    }
}

/// `before`: what the ring had reserved and dropped before the records
/// read, none of which the trace file counts.
fn write(
    out: &mut impl Write,
    opened: &Opened,
    before: Lost,
    held: &Held,
    thread_names: &BTreeMap<u32, String>,
) -> io::Result<()> {
    let table = trace_file::encode_table(&opened.probes)?;
    let origin = Origin {
        header: &opened.header,
        table: &table,
        records_total: opened.counters.records.saturating_sub(before.overwritten),
        dropped: opened.counters.dropped.saturating_sub(before.dropped),
    };
    trace_file::write(out, &origin, held, thread_names)
}
