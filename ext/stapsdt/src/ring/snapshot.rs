//! A consistent copy of a live ring, as a trace file: what a process writes
//! of its own ring when a trigger fires.

use super::format::{
    offset, Counters, COMPLETE, FIRST, HEADER_SIZE, MAX_STRING, SLOT_SIZE, TABLE_OFFSET,
};
use super::reader::Slots;
use super::writer::Ring;
use std::sync::atomic::fence;
use std::sync::atomic::Ordering::{Acquire, Relaxed};

impl Ring {
    /// The ring as a trace file (flag `complete`, the same geometry, tail
    /// 0), read in passes A (stamps), B (slots) and C (stamps) as
    /// docs/recording.md says, while writers may be writing. Every slot
    /// that is not part of a whole, valid record in the copy (its stamp
    /// changed between passes A and C, its record was not whole in pass B,
    /// or another process wrote nonsense into it) is zeroed, stamp and
    /// words: the file holds only records a reader takes, and `parse`
    /// reads it back. Counters are read after pass C, so that they cover
    /// every record in the copy; the probe table is this process's copy.
    ///
    /// Takes the table's lock (so waits for an `add_probe`), and allocates
    /// the file's length plus a quarter of the slots' size.
    pub fn snapshot(&self) -> Vec<u8> {
        let slot_count = self.config.slot_count;
        let ring_offset = self.config.ring_offset() as usize;
        // create() checked that the file fits in memory.
        let mut out = vec![0u8; self.config.file_len() as usize];

        // Pass A. The fence after it pairs with the writers' Release stores
        // of the stamps it saw: their records' words happen before pass B.
        let mut stamps: Vec<u64> = (0..slot_count)
            .map(|seq| self.region.slot(seq)[0].load(Relaxed))
            .collect();
        fence(Acquire);
        // Pass B.
        let area = &mut out[ring_offset..];
        for (seq, slot) in (0..slot_count).zip(area.chunks_exact_mut(SLOT_SIZE as usize)) {
            let words = self.region.slot(seq);
            for (word, bytes) in words.iter().zip(slot.chunks_exact_mut(8)) {
                bytes.copy_from_slice(&word.load(Relaxed).to_le_bytes());
            }
        }
        // Pairs with the Release fence of any writer whose words pass B saw:
        // its 0 stamp then happens before pass C.
        fence(Acquire);
        // Pass C: a stamp that changed since pass A, its slot's words may be
        // anyone's.
        for (seq, stamp) in (0..slot_count).zip(stamps.iter_mut()) {
            if self.region.slot(seq)[0].load(Relaxed) != *stamp {
                *stamp = 0;
            }
        }
        // After pass C, and after the fences: head and records count every
        // record whose stamp pass A saw (their writers added to them before
        // storing the stamps).
        let load = |at| self.region.header_u64(at).load(Relaxed);
        let (head, records, dropped) = (
            load(offset::HEAD),
            load(offset::RECORDS),
            load(offset::DROPPED),
        );
        // Every probe a record in the copy names: its writer loaded the
        // probe's signature, published after the table's entry.
        let table = self.table();

        for (slot, &stamp) in area.chunks_exact_mut(SLOT_SIZE as usize).zip(&stamps) {
            slot[..8].copy_from_slice(&stamp.to_le_bytes());
        }
        let kept = Slots {
            area,
            slot_count,
            head,
            ring_offset: ring_offset as u64,
            probes: &table.probes,
            max_string: MAX_STRING,
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

        let mut header = self.config.header();
        header.flags |= COMPLETE;
        header.encode(&mut out);
        Counters {
            head,
            // At least the records held, even if another process wrote the
            // counter: the file must read back.
            records: records.max(held),
            dropped,
            tail: 0,
            // The table's capacity bounds it: the cast cannot truncate.
            table_used: table.bytes.len() as u32,
        }
        .encode(&mut out[..HEADER_SIZE as usize]);
        let table_start = TABLE_OFFSET as usize;
        out[table_start..table_start + table.bytes.len()].copy_from_slice(&table.bytes);
        out
    }
}
