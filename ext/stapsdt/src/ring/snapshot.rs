//! A consistent copy of a live ring, as a trace file: what a process writes
//! of its own ring when a trigger fires or its code asks for a dump, all of
//! it or the newest records of a window ([`Window`]).

use super::checks::Slots;
use super::format::{
    self, decode_stamp, first_stamp, later_stamp, offset, ProbeEntry, Slot, Stamp, CONTEXT_PROBE,
    CONTEXT_SLOTS, CONTEXT_TAGS, FIRST, MAX_STRING, SEQUENCE_MASK, SLOT_SIZE,
};
use super::trace_file::{self, Origin};
use super::writer::Ring;
use crate::sys::AnonymousMemory;
use std::collections::BTreeSet;
use std::io::{self, Write};
use std::sync::atomic::fence;
use std::sync::atomic::Ordering::{Acquire, Relaxed};

/// Slots copied in one round of passes A, B and C: the stamps of one round
/// are all the snapshot holds besides its copy of the slots, and a window
/// is looked at after each round.
const ROUND: u64 = 1 << 14;

/// What a snapshot keeps of the ring: the newest records, back to the
/// first one made before `since_ns` (on the ring's clock) or until
/// `max_records` are kept, whichever comes first. The default keeps the
/// whole ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// Records made before this time are left out; none: no bound in time.
    pub since_ns: Option<u64>,
    /// At most this many records, the newest; none: no bound in records.
    pub max_records: Option<u64>,
}

impl Window {
    /// Everything the ring holds.
    pub const WHOLE: Window = Window {
        since_ns: None,
        max_records: None,
    };

    /// Whether a record made at `time_ns`, with `taken` newer ones kept
    /// already, is kept.
    fn keeps(&self, time_ns: u64, taken: u64) -> bool {
        self.since_ns.is_none_or(|since| time_ns >= since)
            && self.max_records.is_none_or(|most| taken < most)
    }
}

/// A snapshot made, not yet written: the trace file's header and table,
/// and its slots as copied (a mapping of its own, handed back to the
/// kernel when the snapshot is dropped: see [`AnonymousMemory`]).
#[derive(Debug)]
pub struct Snapshot {
    prefix: Vec<u8>,
    copy: AnonymousMemory,
    /// The trace file's slots are `copy[second..end]` then `copy[first..second]`
    /// (byte offsets): a record's position in a file is its sequence number
    /// modulo the file's slot count, which is not where it is in the copy.
    first: usize,
    second: usize,
    end: usize,
    records: u64,
    whole: bool,
}

impl Snapshot {
    /// The trace file's length in bytes.
    pub fn len(&self) -> u64 {
        (self.prefix.len() + self.end - self.first) as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records it holds.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Whether it holds every record the ring held (no window left any out).
    pub fn is_whole(&self) -> bool {
        self.whole
    }

    /// Writes the trace file to `out`, straight from the copy.
    pub fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        let slots = self.copy.as_slice();
        out.write_all(&self.prefix)?;
        out.write_all(&slots[self.second..self.end])?;
        out.write_all(&slots[self.first..self.second])
    }

    /// The trace file's bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.len() as usize);
        self.write_to(&mut bytes).expect("a Vec takes every write");
        bytes
    }
}

/// How far a window reaches into a copy.
enum Reach {
    /// It leaves a record out: it holds `held` records from sequence number
    /// `start` on.
    LeftOut { start: u64, held: u64 },
    /// It holds every record of the copy, `held` of them.
    All { held: u64 },
}

impl Ring {
    /// The whole ring as a trace file: [`Ring::snapshot_within`] of
    /// [`Window::WHOLE`], as bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        self.snapshot_within(Window::WHOLE)
            .map(|snapshot| snapshot.to_vec())
            // A copy in memory that cannot be mapped cannot be a Vec either.
            .unwrap_or_else(|err| panic!("no memory for a snapshot: {err}"))
    }

    /// The records of `window` as a trace file (flag `complete`, tail 0),
    /// read in passes A (stamps), B (slots) and C (stamps) as
    /// docs/recording.md says, while writers may be writing, and sized to
    /// what it holds. Fails only when its copy cannot be mapped.
    ///
    /// The cut is taken first: `records` and `dropped`, then `head`. The
    /// copy goes from head back, a round of slots at a time, as far as the
    /// window reaches (or the ring's oldest slot, whichever comes first),
    /// and counts as reserved only the records reserved before the cut: a
    /// record written after it is neither held nor lost. A snapshot of 5
    /// records is a few KiB.
    ///
    /// Every slot that is not part of a whole, valid record of the cut
    /// (its stamp changed between passes A and C, its record was not whole
    /// in pass B, or another process wrote nonsense into it) is zeroed, stamp and words: the file holds
    /// only records a reader takes, and `parse` reads it back. The probe
    /// table is this process's copy, taken after the last pass C (its lock
    /// held only for that copy), so that it names every record held.
    ///
    /// Records lost: a whole snapshot says what the ring's counters say
    /// (every record reserved before the cut and not held, dropped ones
    /// apart). One that a window cut short holds the records from its
    /// window's first on, and counts as lost only those of them it saw
    /// reserved and could not take (overwritten while it copied them, or
    /// not whole at the cut): the records before its window were left
    /// out, not lost. `dropped` is the ring's, since it began, either way.
    ///
    /// Trace contexts: a window cut short keeps the contexts of its
    /// records. A thread whose records in the window were made in a trace
    /// context whose context record lies before the window has that
    /// context record (its latest before the window, the one in force at
    /// its start) copied just before the window's first record, as the
    /// file's first records, with its own time and ids: the window's
    /// records read with the context the whole ring gives them, never
    /// "unknown" for the window alone, never another context. Where that
    /// context record is older than the copy reached, the copy goes on to
    /// the ring's oldest slot for it; where the ring no longer holds it, the
    /// records read "unknown", as in the whole ring.
    ///
    /// Writers never wait for it. It allocates the stamps of one round and
    /// a flag a slot copied; its copy is a mapping of its own.
    pub fn snapshot_within(&self, window: Window) -> io::Result<Snapshot> {
        let load = |at| self.region.header_u64(at).load(Relaxed);
        // A writer adds to head before it adds to records: every record
        // counted here has its slots below the head read after it.
        let (records, dropped) = (load(offset::RECORDS), load(offset::DROPPED));
        fence(Acquire);
        let head = load(offset::HEAD);
        let first = head.saturating_sub(self.config.slot_count);
        // Either slot_count (the ring has wrapped) or head (its first lap):
        // either way a slot's position `seq mod span` is its position in
        // the ring, where a record of another lap (one a writer gave up
        // over, or one written after the cut) is checked as a reader
        // checks it in the ring.
        let span = head - first;
        let slot_size = SLOT_SIZE as usize;
        // span <= slot_count, whose slots are in memory: no overflow. The
        // copy holds sequence number `seq` at `seq - first`.
        let mut copy = AnonymousMemory::new(span as usize * slot_size)?;
        let mut stamps = Vec::with_capacity(span.min(ROUND) as usize);
        // Records this copy saw whole in pass A and lost before pass C.
        let mut torn = Vec::new();
        // Newest first: in flight mode the writers overwrite the oldest
        // slots first, and would overwrite a copy made from there on just
        // ahead of it, round after round (see `scan::Opened::scan_live`).
        // The window is looked at after each round; where it seems reached,
        // the records copied are checked, and where fewer of them are whole
        // than it takes, the copy goes on.
        let mut lowest = head;
        let mut taken = 0;
        // Set once a window's records need a context record older than
        // what was copied: the copy then goes on to the ring's oldest slot.
        let mut to_oldest = false;
        let (table_bytes, kept, start, mut held, cut_short, carried) = loop {
            let mut reached = false;
            while lowest > first && (to_oldest || !reached) {
                let start = first.max(lowest.saturating_sub(ROUND));
                let area = copy.as_mut_slice();
                self.copy_round(start, lowest, first, &mut stamps, area, &mut torn);
                reached = Self::window_reached(area, start, lowest, first, &window, &mut taken);
                lowest = start;
            }
            // The probe table, taken after the last pass C (its lock held
            // only for the copy): it names every record copied.
            let (table_bytes, probes) = {
                let table = self.table();
                (table.bytes.clone(), table.probes.clone())
            };
            let area = &copy.as_slice()[((lowest - first) as usize * slot_size)..];
            let kept = Self::kept(area, lowest, span, head, self.config.slot_count, &probes);
            match Self::window_start(area, &kept, lowest, head, &window) {
                Reach::LeftOut { start, held } => {
                    let (carried, missing) = contexts_in_force(area, &kept, lowest, start, head);
                    if missing && lowest > first {
                        to_oldest = true;
                        continue;
                    }
                    break (table_bytes, kept, start, held, true, carried);
                }
                // Every record is in the window, older laps' too: the whole
                // ring, each record at its position.
                Reach::All { held } if lowest == first => {
                    break (table_bytes, kept, first, held, false, Vec::new())
                }
                // Fewer records copied were whole than the window takes.
                Reach::All { .. } => {}
            }
        };

        // The window's slots of no record held are zeroed; a first slot
        // there that pass A saw whole counts as lost.
        let area = &mut copy.as_mut_slice()[((lowest - first) as usize * slot_size)..];
        let mut not_held = torn.iter().filter(|&&seq| seq >= start).count() as u64;
        let window_slots = area.chunks_exact_mut(slot_size).enumerate();
        for (index, slot) in window_slots.skip((start - lowest) as usize) {
            let seq = lowest + index as u64;
            // Cut short, the file's positions are not the ring's: a record
            // of an older lap (one whose overwriter gave up) is left out.
            if kept[index] && (!cut_short || stamp_of(slot, seq)) {
                continue;
            }
            if !kept[index] {
                not_held += u64::from(first_of(slot, seq));
            }
            slot.fill(0);
        }
        // The context records in force at the window's start that its
        // records need go just before it, in their order: the file's first
        // records, so that each of those records reads with its context.
        let start = carry(area, lowest, start, &carried);
        held += carried.len() as u64;

        let slot_count = head - start;
        let origin = Origin {
            header: &self.config.header(),
            table: &table_bytes,
            // Whole, what the ring says it reserved; cut short by the
            // window, those of the window's records it saw.
            records_total: if cut_short { held + not_held } else { records },
            dropped,
        };
        let prefix = trace_file::prefix(&origin, slot_count, head, held);
        // The file's slot 0 holds the sequence number of the window that is
        // a multiple of its slot count.
        let at = |seq: u64| (seq - first) as usize * slot_size;
        let zero_at = if slot_count == 0 {
            start
        } else {
            start + (slot_count - start % slot_count) % slot_count
        };
        Ok(Snapshot {
            prefix,
            copy,
            first: at(start),
            second: at(zero_at),
            end: at(head),
            records: held,
            whole: !cut_short,
        })
    }

    /// Which slots of `area` (a copy from sequence number `lowest` on, of a
    /// ring of `slot_count` slots cut at `head`, `span` of them written
    /// since its oldest) hold a whole, valid record (see `Slots::kept`).
    fn kept(
        area: &[u8],
        lowest: u64,
        span: u64,
        head: u64,
        slot_count: u64,
        probes: &[ProbeEntry],
    ) -> Vec<bool> {
        if span == 0 {
            return Vec::new();
        }
        Slots {
            area,
            window: lowest % span,
            slot_count: span,
            head,
            // Written after the cut, a record is not the snapshot's.
            cut: true,
            // A writer a lap or more past the cut made nonsense of its slot
            // for this copy: refused, it is zeroed as any other.
            limit: head.saturating_add(slot_count),
            ring_offset: 0,
            probes,
            max_string: MAX_STRING,
            version: format::VERSION,
        }
        .kept()
    }

    /// Where the window starts in `area` (a copy from sequence number
    /// `lowest` on, `kept` its whole records): from the newest record
    /// back, the first one the window keeps no more. A record of an older
    /// lap (its overwriter gave up) is as old as the ring's oldest: it is
    /// looked at last, and left out of a window that leaves any out.
    fn window_start(area: &[u8], kept: &[bool], lowest: u64, head: u64, window: &Window) -> Reach {
        let slot_size = SLOT_SIZE as usize;
        let firsts = (0..kept.len()).rev().filter_map(|index| {
            let bytes = &area[index * slot_size..][..slot_size];
            let slot = Slot::at(bytes);
            (kept[index] && slot.stamp() & FIRST != 0).then(|| (lowest + index as u64, bytes))
        });
        let (mut start, mut held) = (head, 0);
        let mut older = Vec::new();
        for (seq, bytes) in firsts {
            let time = Slot::at(bytes).time_ns();
            if !first_of(bytes, seq) {
                older.push(time);
            } else if window.keeps(time, held) {
                held += 1;
                start = seq;
            } else {
                return Reach::LeftOut { start, held };
            }
        }
        let left_out = older
            .iter()
            .enumerate()
            .any(|(index, &time)| !window.keeps(time, held + index as u64));
        if left_out {
            return Reach::LeftOut { start, held };
        }
        Reach::All {
            held: held + older.len() as u64,
        }
    }

    /// Whether the slots of sequence numbers `start..end`, just copied into
    /// `area` (a copy from sequence number `first`), reach back past the
    /// window: a first slot of a record made before it, or more records
    /// than it keeps (counted in `taken`, newest first).
    fn window_reached(
        area: &[u8],
        start: u64,
        end: u64,
        first: u64,
        window: &Window,
        taken: &mut u64,
    ) -> bool {
        if *window == Window::WHOLE {
            return false;
        }
        let slot_size = SLOT_SIZE as usize;
        (start..end).rev().any(|seq| {
            let slot = &area[(seq - first) as usize * slot_size..][..slot_size];
            if !first_of(slot, seq) {
                return false;
            }
            let reached = !window.keeps(Slot::at(slot).time_ns(), *taken);
            *taken += 1;
            reached
        })
    }

    /// Passes A, B and C over the slots of sequence numbers `start..end`,
    /// into `area`, a copy of slots from sequence number `first` on. A slot
    /// whose stamp changed between passes A and C gets stamp 0: its words
    /// may be anyone's; if pass A saw it as the first slot of its sequence
    /// number's record, that record is noted in `torn`.
    fn copy_round(
        &self,
        start: u64,
        end: u64,
        first: u64,
        stamps: &mut Vec<u64>,
        area: &mut [u8],
        torn: &mut Vec<u64>,
    ) {
        let slot_size = SLOT_SIZE as usize;
        // Pass A. The fence after it pairs with the writers' Release stores
        // of the stamps it saw: their records' words happen before pass B.
        stamps.clear();
        stamps.extend((start..end).map(|seq| self.region.slot(seq)[0].load(Relaxed)));
        fence(Acquire);
        // Pass B.
        for seq in start..end {
            let at = (seq - first) as usize * slot_size;
            let slot = &mut area[at..at + slot_size];
            for (word, bytes) in self.region.slot(seq).iter().zip(slot.chunks_exact_mut(8)) {
                bytes.copy_from_slice(&word.load(Relaxed).to_le_bytes());
            }
        }
        // Pairs with the Release fence of any writer whose words pass B saw:
        // its 0 stamp then happens before pass C.
        fence(Acquire);
        // Pass C.
        for (seq, &stamp) in (start..end).zip(stamps.iter()) {
            if self.region.slot(seq)[0].load(Relaxed) != stamp {
                let at = (seq - first) as usize * slot_size;
                if is_first_stamp_of(stamp, seq) {
                    torn.push(seq);
                }
                area[at..at + 8].fill(0);
            }
        }
    }
}

/// The context records that the records of the window `start..head` of
/// `area` (a copy from sequence number `lowest` on, `kept` its whole
/// records) need from before it: for each thread with a record in the
/// window made in a context (a context tag) before any context record of
/// its own there, its latest context record before the window, the one in
/// force at its start (the reader takes a thread's latest context record:
/// see `contexts`). Their sequence numbers, oldest first, and whether one
/// of those threads has none in `area` (an older copy may have it).
fn contexts_in_force(
    area: &[u8],
    kept: &[bool],
    lowest: u64,
    start: u64,
    head: u64,
) -> (Vec<u64>, bool) {
    let slot_size = SLOT_SIZE as usize;
    let record_at = |seq: u64| {
        let index = (seq - lowest) as usize;
        let bytes = &area[index * slot_size..][..slot_size];
        (kept[index] && first_of(bytes, seq)).then(|| Slot::at(bytes))
    };
    let (mut needed, mut in_window) = (BTreeSet::new(), BTreeSet::new());
    for slot in (start..head).filter_map(record_at) {
        if slot.probe() == CONTEXT_PROBE {
            in_window.insert(slot.tid());
        } else if CONTEXT_TAGS.contains(&slot.tag()) && !in_window.contains(&slot.tid()) {
            needed.insert(slot.tid());
        }
    }
    let mut carried = Vec::with_capacity(needed.len());
    for seq in (lowest..start).rev() {
        if needed.is_empty() {
            break;
        }
        if let Some(slot) = record_at(seq) {
            if slot.probe() == CONTEXT_PROBE && needed.remove(&slot.tid()) {
                carried.push(seq);
            }
        }
    }
    carried.reverse();
    (carried, !needed.is_empty())
}

/// Copies the context records of sequence numbers `carried` (oldest first,
/// all before `start`, in `area`, a copy from sequence number `lowest` on)
/// into the slots just before `start`, stamped for their new sequence
/// numbers; returns the window's new start. A context record's time and
/// words stay its own: only its place in the file changes.
fn carry(area: &mut [u8], lowest: u64, start: u64, carried: &[u64]) -> u64 {
    let slot_size = SLOT_SIZE as usize;
    let record_len = CONTEXT_SLOTS as usize * slot_size;
    let at = |seq: u64| (seq - lowest) as usize * slot_size;
    // Taken out first: a record's new slots may be another's old ones.
    let records: Vec<u8> = carried
        .iter()
        .flat_map(|&seq| area[at(seq)..][..record_len].iter().copied())
        .collect();
    // Each context record carried has slots of its own before `start`.
    let new_start = start - carried.len() as u64 * CONTEXT_SLOTS;
    for (index, record) in records.chunks_exact(record_len).enumerate() {
        let seq = new_start + index as u64 * CONTEXT_SLOTS;
        let slots = &mut area[at(seq)..][..record_len];
        slots.copy_from_slice(record);
        for (later, slot) in slots.chunks_exact_mut(slot_size).enumerate() {
            let stamp = if later == 0 {
                first_stamp(seq, CONTEXT_SLOTS)
            } else {
                later_stamp(seq, later as u64)
            };
            slot[..8].copy_from_slice(&stamp.to_le_bytes());
        }
    }
    new_start
}

/// Whether `slot` (its bytes) holds the first slot of sequence number `seq`'s record.
fn first_of(slot: &[u8], seq: u64) -> bool {
    is_first_stamp_of(Slot::at(slot).stamp(), seq)
}

/// Whether the stamp of `slot` (its bytes) is one of sequence number `seq`'s
/// own: of this lap, not of an older one.
fn stamp_of(slot: &[u8], seq: u64) -> bool {
    match decode_stamp(Slot::at(slot).stamp()) {
        Stamp::First { seq: bits, .. } | Stamp::Later { seq: bits, .. } => {
            bits == seq & SEQUENCE_MASK
        }
        Stamp::Empty | Stamp::Broken => false,
    }
}

fn is_first_stamp_of(stamp: u64, seq: u64) -> bool {
    matches!(decode_stamp(stamp), Stamp::First { seq: bits, .. }
        if bits == seq & SEQUENCE_MASK)
}
