//! A consistent copy of a live ring, as a trace file: what a process writes
//! of its own ring when a trigger fires or its code asks for a dump.

use super::checks::Slots;
use super::format::{self, offset, FIRST, MAX_STRING, SLOT_SIZE};
use super::trace_file::{self, Origin};
use super::writer::Ring;
use std::sync::atomic::fence;
use std::sync::atomic::Ordering::{Acquire, Relaxed};

/// Slots copied in one round of passes A, B and C: the stamps of one round
/// are all the snapshot holds besides the file itself.
const ROUND: u64 = 1 << 14;

impl Ring {
    /// The ring as a trace file (flag `complete`, tail 0), read in passes
    /// A (stamps), B (slots) and C (stamps) as docs/recording.md says,
    /// while writers may be writing, and sized to what it holds.
    ///
    /// The cut is taken first: `records` and `dropped`, then `head`. The
    /// file holds the slots before that head that can still be there (the
    /// last `slot_count` of them, fewer before the ring's first lap), as a
    /// trace file of exactly that many slots, and counts as reserved only
    /// the records reserved before the cut: a record written after it is
    /// neither held nor lost. A snapshot of 5 records is a few KiB.
    ///
    /// Every slot that is not part of a whole, valid record of the cut
    /// (its stamp changed between passes A and C, its record was not whole
    /// in pass B, or another process wrote nonsense into it) is zeroed, stamp and words: the file holds
    /// only records a reader takes, and `parse` reads it back. The probe
    /// table is this process's copy, taken after the last pass C (its lock
    /// held only for that copy), so that it names every record held.
    ///
    /// Writers never wait for it. It allocates the file's length and the
    /// stamps of one round.
    pub fn snapshot(&self) -> Vec<u8> {
        let load = |at| self.region.header_u64(at).load(Relaxed);
        // A writer adds to head before it adds to records: every record
        // counted here has its slots below the head read after it.
        let (records, dropped) = (load(offset::RECORDS), load(offset::DROPPED));
        fence(Acquire);
        let head = load(offset::HEAD);
        let first = head.saturating_sub(self.config.slot_count);
        // Either slot_count (the ring has wrapped) or head (its first lap):
        // either way a slot's position in the file, `seq mod span`, is its
        // position in the ring, where a record of another lap (one a writer
        // gave up over, or one written after the cut) is checked as a
        // reader checks it in the ring.
        let span = head - first;
        // span <= slot_count, whose slots are in memory: no overflow.
        let area_len = (span * SLOT_SIZE) as usize;

        let mut area = vec![0u8; area_len];
        let mut stamps = Vec::with_capacity(span.min(ROUND) as usize);
        // Newest first: in flight mode the writers overwrite the oldest
        // slots first, and would overwrite a copy made from there on just
        // ahead of it, round after round (see `scan::Opened::scan_live`).
        let mut end = head;
        while end > first {
            let start = first.max(end.saturating_sub(ROUND));
            self.copy_round(start, end, span, &mut stamps, &mut area);
            end = start;
        }
        let (table_bytes, probes) = {
            let table = self.table();
            (table.bytes.clone(), table.probes.clone())
        };

        let kept = Slots {
            area: &area,
            window: 0,
            slot_count: span,
            head,
            // Written after the cut, a record is not the snapshot's.
            cut: true,
            // A writer a lap or more past the cut made nonsense of its slot
            // for this copy: refused, it is zeroed as any other.
            limit: head.saturating_add(self.config.slot_count),
            ring_offset: 0,
            probes: &probes,
            max_string: MAX_STRING,
            version: format::VERSION,
        }
        .kept();
        let mut held = 0;
        for (slot, kept) in area.chunks_exact_mut(SLOT_SIZE as usize).zip(&kept) {
            if *kept {
                let stamp = u64::from_le_bytes(slot[..8].try_into().unwrap());
                held += u64::from(stamp & FIRST != 0);
            } else {
                slot.fill(0);
            }
        }

        let origin = Origin {
            header: &self.config.header(),
            table: &table_bytes,
            records_total: records,
            dropped,
        };
        let mut out = trace_file::prefix(&origin, span, head, held);
        out.reserve_exact(area_len);
        out.extend_from_slice(&area);
        out
    }

    /// Passes A, B and C over the slots of sequence numbers `start..end`,
    /// into `area`, a trace file's slots of `span` slots (sequence `s` at
    /// position `s mod span`). A slot whose stamp changed between passes A
    /// and C gets stamp 0: its words may be anyone's.
    fn copy_round(&self, start: u64, end: u64, span: u64, stamps: &mut Vec<u64>, area: &mut [u8]) {
        let slot_size = SLOT_SIZE as usize;
        // Pass A. The fence after it pairs with the writers' Release stores
        // of the stamps it saw: their records' words happen before pass B.
        stamps.clear();
        stamps.extend((start..end).map(|seq| self.region.slot(seq)[0].load(Relaxed)));
        fence(Acquire);
        // Pass B.
        for seq in start..end {
            let at = (seq % span) as usize * slot_size;
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
                let at = (seq % span) as usize * slot_size;
                area[at..at + 8].fill(0);
            }
        }
    }
}
