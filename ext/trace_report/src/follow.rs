//! Following a live ring as its process writes it (`static-tracing
//! record`), and reading one at a cut (`dump`): what is read is held as
//! the bytes of its records' slots, for the trace file written of them.
//!
//! A follower keeps a position, the sequence number of the next slot to
//! read, from the ring's `tail`. A poll advances it only through records
//! committed one after another, so that a record being written is taken by
//! a later poll, whole; without overwrite it then stores the position in
//! `tail`, which lets the writer reuse the slots before it. In flight mode
//! (overwrite) the writer does not wait: what it overwrote before a poll
//! is lost.

use crate::records::Records;
use crate::report::threads::live_names;
use crate::trace::TraceError;
use crate::write::{write_trace, Held, Origin};
use stapsdt::ring::format::{offset, Counters, Header};
use stapsdt::ring::scan::{self, Opened, Pass, ReadAt};
use stapsdt::ring::ProbeEntry;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;

/// Where a ring followed is: read, and written to for its `tail`.
pub trait Ring: ReadAt {
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()>;
}

impl Ring for File {
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        FileExt::write_all_at(self, bytes, offset)
    }
}

/// A live ring followed.
pub struct Follower {
    name: String,
    opened: Opened,
    position: u64,
    held: Held,
    /// The names of the threads of the records held, read while the
    /// process runs: its threads' ids alone say little once it is gone.
    thread_names: BTreeMap<u32, String>,
    /// Where the process is in this `/proc`, once looked for.
    process: Option<Option<u64>>,
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
    pub fn new(file: &(impl Ring + ?Sized), name: &str) -> Result<Follower, TraceError> {
        let opened = open(file, name)?;
        Ok(Follower {
            name: name.to_owned(),
            position: opened.counters.tail,
            opened,
            held: Held::default(),
            thread_names: BTreeMap::new(),
            process: None,
        })
    }

    /// Reads the records committed since the last poll; returns how many.
    pub fn poll(&mut self, file: &(impl Ring + ?Sized)) -> Result<u64, TraceError> {
        self.opened = open(file, &self.name)?;
        let before = self.held.records();
        let before_bytes = self.held.len();
        let held = &mut self.held;
        self.position = self
            .opened
            .follow(file, self.position, |_, slots| held.push(slots))
            .map_err(|err| TraceError::of(&self.name, err))?;
        self.store_tail(file)?;
        self.name_threads(before_bytes);
        Ok(self.held.records() - before)
    }

    /// Reads every record still whole from the position on, whether or not
    /// the ones before it were committed: the last read (the process
    /// exited, or the recording stopped). What could not be read is lost.
    pub fn finish(&mut self, file: &(impl Ring + ?Sized)) -> Result<u64, TraceError> {
        self.opened = open(file, &self.name)?;
        let (slot_count, head) = (self.opened.header.slot_count, self.opened.counters.head);
        let from = self.position.max(head.saturating_sub(slot_count));
        let before = self.held.records();
        let before_bytes = self.held.len();
        let (held, position) = (&mut self.held, self.position);
        self.opened
            .scan(file, from + slot_count - head, |record, slots| {
                if record.seq >= position {
                    held.push(slots);
                }
            })
            .map_err(|err| TraceError::of(&self.name, err))?;
        self.position = self.position.max(head);
        self.store_tail(file)?;
        self.name_threads(before_bytes);
        Ok(self.held.records() - before)
    }

    pub fn counts(&self) -> Counts {
        counts(&self.opened.counters, self.held.records())
    }

    /// The sequence number of the next slot to read.
    pub fn position(&self) -> u64 {
        self.position
    }

    pub fn header(&self) -> &Header {
        &self.opened.header
    }

    pub fn probes(&self) -> &[ProbeEntry] {
        &self.opened.probes
    }

    /// Writes what was read as a trace file.
    pub fn write(&self, out: &mut impl Write) -> io::Result<()> {
        let origin = origin(&self.opened, &self.held, &self.thread_names);
        write_trace(out, origin, &self.held)
    }

    /// The names of the threads known so far, by id.
    pub fn thread_names(&self) -> &BTreeMap<u32, String> {
        &self.thread_names
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
    /// [`Held::len`]), read back.
    pub fn records_after(&self, bytes: usize) -> Result<Records, TraceError> {
        let after = self.held.after(bytes);
        let mut file = Vec::new();
        let no_names = BTreeMap::new();
        write_trace(&mut file, origin(&self.opened, &after, &no_names), &after).map_err(|err| {
            TraceError::Io {
                name: self.name.clone(),
                err,
            }
        })?;
        crate::Trace::read(&file[..], &self.name).map(|trace| trace.records)
    }

    /// Nothing is stored in a trace file or a flight ring: no writer waits.
    fn store_tail(&self, file: &(impl Ring + ?Sized)) -> Result<(), TraceError> {
        let header = &self.opened.header;
        if header.overwrite() || header.complete() || self.position == self.opened.counters.tail {
            return Ok(());
        }
        file.write_all_at(&self.position.to_le_bytes(), offset::TAIL as u64)
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
    let mut held = Held::default();
    opened
        .scan(ring, 0, |_, slots| held.push(slots))
        .map_err(|err| TraceError::of(name, err))?;
    let thread_names = live_names(&opened.header, &held.threads_after(0), &mut None)
        .into_iter()
        .collect();
    write_trace(out, origin(&opened, &held, &thread_names), &held).map_err(DumpError::Write)?;
    Ok(counts(&opened.counters, held.records()))
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

fn counts(counters: &Counters, records: u64) -> Counts {
    // A record may be whole by the time its slots are read and counted in
    // `records` only after the cut: read, not lost.
    let unread = counters.records.saturating_sub(records);
    Counts {
        records,
        lost: counters.dropped + unread,
        dropped: counters.dropped,
    }
}

fn origin<'a>(
    opened: &'a Opened,
    held: &Held,
    thread_names: &'a BTreeMap<u32, String>,
) -> Origin<'a> {
    Origin {
        header: &opened.header,
        probes: &opened.probes,
        records_total: opened.counters.records.max(held.records()),
        dropped: opened.counters.dropped,
        thread_names,
    }
}
