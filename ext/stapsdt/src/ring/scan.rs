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

use super::checks::{self, FormatError, Record, Slots, Trace};
use super::contexts::Contexts;
use super::format::ProbeEntry;
use super::format::{
    offset, Counters, Header, HEADER_SIZE, INDEX_MASK, MAX_RECORD_SLOTS, SLOT_SIZE, TABLE_OFFSET,
};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};

/// Where a file's bytes are.
pub trait ReadAt {
    /// The file's length in bytes now.
    fn file_len(&self) -> io::Result<u64>;
    /// Reads into `buf` from `offset`, as pread does: fewer bytes than
    /// asked at the file's end, 0 past it.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Which file it is, where that can be told: a reader that reads a
    /// ring again knows by it a ring rewritten from a new one.
    fn file_id(&self) -> io::Result<Option<FileId>> {
        Ok(None)
    }
    /// Where the first byte at or after `offset` that may not be zero is:
    /// past a hole of a sparse file, which reads as zeros; `offset` where
    /// the source cannot tell, `None` if nothing but zeros follows. A read
    /// skips what is in a hole, so that its time follows the bytes written
    /// rather than the length a file claims.
    fn data_from(&self, offset: u64) -> io::Result<Option<u64>> {
        Ok(Some(offset))
    }
}

/// A file, by its device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl ReadAt for [u8] {
    fn file_len(&self) -> io::Result<u64> {
        Ok(<[u8]>::len(self) as u64)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.len());
        let bytes = &self[start..self.len().min(start.saturating_add(buf.len()))];
        buf[..bytes.len()].copy_from_slice(bytes);
        Ok(bytes.len())
    }
}

impl ReadAt for File {
    fn file_len(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, offset)
    }

    fn file_id(&self) -> io::Result<Option<FileId>> {
        let metadata = self.metadata()?;
        Ok(Some(FileId {
            dev: metadata.dev(),
            ino: metadata.ino(),
        }))
    }

    fn data_from(&self, offset: u64) -> io::Result<Option<u64>> {
        let Ok(at) = libc::off_t::try_from(offset) else {
            return Ok(Some(offset));
        };
        let fd = self.as_raw_fd();
        // SAFETY: lseek on the descriptor this File holds open. SEEK_DATA
        // moves the file's offset, which no read here uses (they are
        // pread); it is put back where it was, for whoever shares it.
        let found = unsafe {
            let was = libc::lseek(fd, 0, libc::SEEK_CUR);
            let found = libc::lseek(fd, at, libc::SEEK_DATA);
            let errno = io::Error::last_os_error();
            if was >= 0 {
                libc::lseek(fd, was, libc::SEEK_SET);
            }
            if found < 0 {
                return Ok(match errno.raw_os_error() {
                    Some(libc::ENXIO) => None,
                    // A file system that cannot tell holes: read it all.
                    _ => Some(offset),
                });
            }
            found
        };
        Ok(Some(found as u64))
    }
}

/// Fills `buf` from `offset` of a file that had `file_len` bytes when it
/// was opened: one that ends before is one that shrank as it was read.
fn read_exact_at(
    source: &(impl ReadAt + ?Sized),
    buf: &mut [u8],
    offset: u64,
    file_len: u64,
) -> Result<(), ReadError> {
    let mut done = 0;
    while done < buf.len() {
        match source.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => {
                return Err(FormatError::file(format!(
                    "it shrank while it was read: it had {file_len} bytes, now at most {}",
                    offset + done as u64
                ))
                .into())
            }
            Ok(read) => done += read,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
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

/// Why a file could not be read, naming it as messages do.
#[derive(Debug)]
pub enum TraceError {
    /// It breaks the format: `name: what, where, expected, found`.
    Format(String),
    /// Reading (or writing) it failed.
    Io { name: String, err: io::Error },
}

impl TraceError {
    pub fn of(name: &str, err: ReadError) -> TraceError {
        match err {
            ReadError::Format(err) => TraceError::Format(format!("{name}: {}", err.message())),
            ReadError::Io(err) => TraceError::Io {
                name: name.to_owned(),
                err,
            },
        }
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Format(message) => f.write_str(message),
            TraceError::Io { name, err } => write!(f, "cannot read {name}: {}", reason(err)),
        }
    }
}

impl std::error::Error for TraceError {}

/// What went wrong in a system call, in its errno's own words ("No space
/// left on device"), as the command words every failure.
pub fn reason(err: &io::Error) -> String {
    let text = err.to_string();
    match err.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .map_or_else(|| text.clone(), str::to_owned),
        None => text,
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

/// Slots read at once: 512 KiB (a few under Miri, whose tests cross
/// windows in rings it can run through).
pub(super) const WINDOW_SLOTS: u64 = if cfg!(miri) { 1 << 6 } else { 1 << 14 };

/// Slots of a window whose records are decoded at once, before they are
/// visited: few enough that what they take (a vector of records, one of
/// arguments each) is freed and taken again from the same few pages,
/// batch after batch. A window's worth at once took megabytes, which
/// malloc gave back to the kernel after each window and the next faulted
/// in again: 40,000 page faults for a million records.
const BATCH_SLOTS: u64 = if cfg!(miri) { 1 << 4 } else { 1 << 8 };

/// Slots read at once, and the part of them whose records are taken
/// there: from where they start to `end` (an index from the oldest slot).
struct Part<'a> {
    window: &'a [u8],
    /// The ring position of the window's first slot.
    position: u64,
    end: u64,
}

/// A ring or trace file's header, counters and probe table, read and
/// checked; its slots are read by [`Opened::scan`].
#[derive(Clone, Debug)]
pub struct Opened {
    pub header: Header,
    /// For a live ring, as of the cut.
    pub counters: Counters,
    pub probes: Vec<ProbeEntry>,
    pub pass: Pass,
    /// The file's length when it was opened.
    pub file_len: u64,
}

/// Reads and checks the header, counters and table of the file in
/// `source`; `pass` is how its slots will be read (a complete file is
/// always read once).
pub fn open(source: &(impl ReadAt + ?Sized), pass: Pass) -> Result<Opened, ReadError> {
    let file_len = source.file_len()?;
    let mut bytes = vec![0; file_len.min(HEADER_SIZE) as usize];
    read_exact_at(source, &mut bytes, 0, file_len)?;
    let header = checks::header(&bytes, file_len)?;
    let pass = if header.complete() { Pass::Once } else { pass };
    if pass == Pass::Live {
        // The cut: head (and table_used) read again after records and
        // dropped, so that every record counted was reserved below head.
        for (at, len) in [(offset::HEAD, 8), (offset::TABLE_USED, 4)] {
            read_exact_at(source, &mut bytes[at..at + len], at as u64, file_len)?;
        }
    }
    let counters = checks::counters(&bytes, &header)?;
    let mut table = vec![0; counters.table_used as usize];
    read_exact_at(source, &mut table, TABLE_OFFSET, file_len)?;
    let probes = checks::table(&table)?;
    Ok(Opened {
        header,
        counters,
        probes,
        pass,
        file_len,
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
        let first = from.max(self.first_written());
        if self.pass == Pass::Live {
            return self.scan_live(source, first, &mut visit);
        }
        let reach = self.reach();
        let mut window = Vec::new();
        let mut index = first;
        while index < slot_count {
            let part_end = slot_count.min(index + WINDOW_SLOTS);
            let len = slot_count.min(part_end - index + reach);
            let position = self.position(index);
            if self.in_a_hole(source, position, len)? {
                // Zeros: no record starts there.
                index = part_end;
                continue;
            }
            self.read_window(source, position, len, &mut window)?;
            let part = Part {
                window: &window,
                position,
                end: part_end,
            };
            index = self.visit_part(&part, index, self.counters.head, &mut visit)?;
        }
        Ok(index)
    }

    /// [`Opened::scan`] of a ring its process may be writing: its windows
    /// are read newest first, then their records visited oldest first. A
    /// writer in flight mode overwrites the oldest slots first, the ones
    /// just past head: read from there on, a ring written faster than it is
    /// read would be overwritten just ahead of the reader, window after
    /// window, and read almost empty; read from head back, a writer takes a
    /// whole lap to reach the newest records, and takes only the oldest.
    /// Only records the writer can make are read whole: a stamp claiming
    /// more slots than the longest record takes is passed over (what is
    /// held is one copy of the slots read, not a window's reach more).
    fn scan_live(
        &self,
        source: &(impl ReadAt + ?Sized),
        first: u64,
        visit: &mut impl FnMut(Record, &[u8]),
    ) -> Result<u64, ReadError> {
        let slot_count = self.header.slot_count;
        let reach = self.reach();
        let starts: Vec<u64> = (first..slot_count).step_by(WINDOW_SLOTS as usize).collect();
        let mut windows = Vec::with_capacity(starts.len());
        for &start in starts.iter().rev() {
            let part_end = slot_count.min(start + WINDOW_SLOTS);
            let len = slot_count.min(part_end - start + reach);
            let mut window = Vec::new();
            self.read_window(source, self.position(start), len, &mut window)?;
            windows.push(window);
        }
        windows.reverse();
        let limit = self.counters.head.max(self.head_now(source)?);
        let mut index = first;
        for (&start, window) in starts.iter().zip(&windows) {
            let part = Part {
                window,
                position: self.position(start),
                end: slot_count.min(start + WINDOW_SLOTS),
            };
            index = self.visit_part(&part, index.max(start), limit, visit)?;
        }
        Ok(index)
    }

    /// How far past its part a window reaches, so that it holds every
    /// record that starts in the part: as far as a stamp can claim in a
    /// file read once (for its checks), as far as the longest record the
    /// writer makes in a live ring (a stamp claiming more is passed over:
    /// a live read holds no more than it must, at every poll and scrape).
    fn reach(&self) -> u64 {
        let longest = match self.pass {
            Pass::Once => INDEX_MASK,
            Pass::Live => MAX_RECORD_SLOTS,
        };
        longest.min(self.header.slot_count)
    }

    /// Visits the records whose first slot is in `part` from `index` on;
    /// returns the index after the last slot looked at.
    fn visit_part(
        &self,
        part: &Part<'_>,
        mut index: u64,
        limit: u64,
        visit: &mut impl FnMut(Record, &[u8]),
    ) -> Result<u64, ReadError> {
        let slot_count = self.header.slot_count;
        let slots = self.slots(part.window, part.position, limit);
        let mut wrapped = Vec::new();
        while index < part.end {
            let (records, next) =
                slots.records_between(index, part.end.min(index + BATCH_SLOTS))?;
            for record in records {
                // The record's slots are in the window, one after another,
                // but for a window of the whole ring that they wrap around.
                let start = (record.seq % slot_count + slot_count - part.position) % slot_count;
                let (start, len) = (
                    (start * SLOT_SIZE) as usize,
                    (record.slots * SLOT_SIZE) as usize,
                );
                if let Some(bytes) = part.window.get(start..start + len) {
                    visit(record, bytes);
                } else {
                    wrapped.clear();
                    wrapped.extend_from_slice(&part.window[start..]);
                    wrapped.extend_from_slice(&part.window[..start + len - part.window.len()]);
                    visit(record, &wrapped);
                }
            }
            index = next;
        }
        Ok(index)
    }

    /// Visits every valid record, as [`read`] reads them (each with the
    /// trace context it was made in), then checks them against the
    /// counters as they are now: for a caller that holds the records its
    /// own way rather than as `read`'s vector. They come in
    /// index order: sequence order but for a record written a lap late,
    /// which the caller sorts. Afterwards `probes` is the table as it is
    /// now (a live ring's grows); `counters` stay those of the cut.
    pub fn read_all(
        &mut self,
        source: &(impl ReadAt + ?Sized),
        mut visit: impl FnMut(Record, &[u8]),
    ) -> Result<(), ReadError> {
        let mut found = 0u64;
        let mut contexts = Contexts::default();
        self.scan(source, 0, |mut record, slots| {
            found += 1;
            contexts.resolve(&mut record);
            visit(record, slots);
        })?;
        let now = self.reread(source)?;
        // Every record read was counted by the time it was read.
        if found > now.records {
            return Err(FormatError::invalid(
                "header field records",
                offset::RECORDS as u64,
                format!("at least the {found} records the file holds"),
                now.records,
            )
            .into());
        }
        Ok(())
    }

    /// Visits the records one after another from sequence number `from`
    /// (a reader's position: `tail`, or where its last read stopped), as a
    /// reader following a live ring takes them (see `Slots::contiguous`),
    /// each with the bytes of its slots; returns the sequence number to
    /// read from next. Of the slots before `from`, only the last
    /// `slot_count` before head can still be there: it starts there at
    /// the earliest (what it passes over was overwritten: lost).
    pub fn follow(
        &self,
        source: &(impl ReadAt + ?Sized),
        from: u64,
        mut visit: impl FnMut(Record, &[u8]),
    ) -> Result<u64, ReadError> {
        let (slot_count, head) = (self.header.slot_count, self.counters.head);
        let oldest = head.saturating_sub(slot_count);
        let mut seq = from.clamp(oldest, head);
        let mut window = Vec::new();
        let reach = self.reach();
        let mut limit = head;
        while seq < head {
            // The index of `seq` from the oldest slot (the one after head's).
            let index = seq + slot_count - head;
            let part_end = slot_count.min(index + WINDOW_SLOTS);
            let len = slot_count.min(part_end - index + reach);
            let position = self.position(index);
            self.read_window(source, position, len, &mut window)?;
            limit = limit.max(self.head_now(source)?);
            let (records, next) = self.slots(&window, position, limit).contiguous(
                index,
                part_end,
                self.header.overwrite(),
            )?;
            for record in records {
                let start =
                    ((record.seq % slot_count + slot_count - position) % slot_count) as usize;
                let len = (record.slots * SLOT_SIZE) as usize;
                let start = start * SLOT_SIZE as usize;
                visit(record, &window[start..start + len]);
            }
            seq = next + head - slot_count;
            if next < part_end {
                break;
            }
        }
        Ok(seq)
    }

    /// The index of the first slot a writer can have written: on the
    /// ring's first lap, a live ring's slots past head were never written,
    /// and are not read (a trace file's are, and checked).
    fn first_written(&self) -> u64 {
        match self.pass {
            Pass::Live => self.header.slot_count.saturating_sub(self.counters.head),
            Pass::Once => 0,
        }
    }

    /// Head as it is now: where a live ring's writers are once its slots
    /// were read, what no stamp can be past.
    fn head_now(&self, source: &(impl ReadAt + ?Sized)) -> Result<u64, ReadError> {
        if self.pass == Pass::Once {
            return Ok(self.counters.head);
        }
        let mut head = [0; 8];
        read_exact_at(source, &mut head, offset::HEAD as u64, self.file_len)?;
        Ok(u64::from_le_bytes(head))
    }

    /// The table and counters as they are now (a live ring's grow), for
    /// the probes added since it was opened and a last check of the
    /// records read against them.
    pub fn reread(&mut self, source: &(impl ReadAt + ?Sized)) -> Result<Counters, ReadError> {
        if self.pass == Pass::Once {
            return Ok(self.counters);
        }
        let again = open(source, Pass::Live)?;
        if again.probes.len() > self.probes.len() {
            self.probes = again.probes;
        }
        Ok(again.counters)
    }

    fn slots<'a>(&'a self, window: &'a [u8], position: u64, limit: u64) -> Slots<'a> {
        Slots {
            area: window,
            window: position,
            slot_count: self.header.slot_count,
            head: self.counters.head,
            limit,
            cut: self.pass == Pass::Live,
            ring_offset: self.header.ring_offset,
            probes: &self.probes,
            max_string: self.header.max_string,
            version: self.header.version,
        }
    }

    /// The position of the slot `index` slots after the oldest.
    fn position(&self, index: u64) -> u64 {
        let slot_count = self.header.slot_count;
        (self.counters.head % slot_count + index % slot_count) % slot_count
    }

    /// Whether the `len` slots from `position` (wrapping past the last
    /// slot) are all in holes of the file, and so zeros.
    fn in_a_hole(
        &self,
        source: &(impl ReadAt + ?Sized),
        position: u64,
        len: u64,
    ) -> Result<bool, ReadError> {
        let first = len.min(self.header.slot_count - position);
        let hole = |from: u64, slots: u64| -> Result<bool, ReadError> {
            let start = self.header.ring_offset + from * SLOT_SIZE;
            let end = start + slots * SLOT_SIZE;
            Ok(source.data_from(start)?.is_none_or(|data| data >= end))
        };
        Ok(hole(position, first)? && (first == len || hole(0, len - first)?))
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
        let read = |into: &mut Vec<u8>| -> Result<(), ReadError> {
            into.resize(len as usize * slot_size, 0);
            let first = len.min(self.header.slot_count - position);
            let (head, tail) = into.split_at_mut(first as usize * slot_size);
            let ring_offset = self.header.ring_offset;
            read_exact_at(
                source,
                head,
                ring_offset + position * SLOT_SIZE,
                self.file_len,
            )?;
            if !tail.is_empty() {
                read_exact_at(source, tail, ring_offset, self.file_len)?;
            }
            Ok(())
        };
        if self.pass == Pass::Once {
            return read(window);
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
    let mut opened = open(source, pass)?;
    let mut records = Vec::new();
    opened.read_all(source, |record, _| records.push(record))?;
    // Out of order only if a record was written a lap late, over a newer
    // one's slot.
    records.sort_by_key(|record| record.seq);
    Ok(Trace {
        header: opened.header,
        counters: opened.counters,
        probes: opened.probes,
        records,
    })
}

/// Reads a ring file (in one pass: give it a consistent copy, such as
/// `Ring::snapshot` makes) or a trace file.
pub fn parse(bytes: &[u8]) -> Result<Trace, FormatError> {
    read(bytes, Pass::Once).map_err(|err| match err {
        ReadError::Format(err) => err,
        // header() checked every size against the length of `bytes`.
        ReadError::Io(err) => FormatError::file(format!("cannot be read: {err}")),
    })
}
