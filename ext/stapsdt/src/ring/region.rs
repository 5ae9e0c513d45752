//! The ring's shared memory, and the only place where its addresses become
//! references: every byte of it is reached through an atomic of the size of
//! its field, at the field's offset, so that the other process reading it,
//! or this process's snapshot, never races with a writer in the language's
//! sense (and Miri can check that the tests do as they should).

use super::format::{HEADER_SIZE, SLOT_SIZE, SLOT_WORDS, TABLE_OFFSET};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

const HEADER: usize = HEADER_SIZE as usize;

/// The header, the probe table and the slots. Every accessor is safe for
/// any argument: offsets are checked or masked into the region.
pub(super) struct Region {
    base: NonNull<u8>,
    table_words: usize,
    ring_offset: usize,
    /// `slot_count - 1`, slot_count being a power of two.
    mask: u64,
}

// SAFETY: the region is only ever accessed through atomics (the accessors
// below hand out nothing else), so sharing or sending its pointer between
// threads cannot make a data race; `Region::new`'s contract keeps the memory
// valid for as long as the region lives, whatever thread it is on.
unsafe impl Send for Region {}
// SAFETY: as for Send.
unsafe impl Sync for Region {}

impl Region {
    /// # Safety
    /// `base` is 8-aligned, and the `4096 + table_capacity + slot_count * 32`
    /// bytes from it are valid for reads and writes for as long as the region
    /// lives, and accessed by nobody else but through atomics of the same size
    /// at the same offsets (or by another process, through a shared mapping
    /// or read and write syscalls). `table_capacity` is a multiple of 8,
    /// `slot_count` a power of two, and the sum fits in an `isize`.
    pub(super) unsafe fn new(base: NonNull<u8>, table_capacity: usize, slot_count: u64) -> Region {
        debug_assert!(base.as_ptr().addr() % 8 == 0);
        debug_assert!(table_capacity % 8 == 0 && slot_count.is_power_of_two());
        Region {
            base,
            table_words: table_capacity / 8,
            ring_offset: TABLE_OFFSET as usize + table_capacity,
            mask: slot_count - 1,
        }
    }

    /// The u64 header field at `offset`.
    #[inline]
    pub(super) fn header_u64(&self, offset: usize) -> &AtomicU64 {
        // Offsets are constants: the check folds away.
        assert!(offset % 8 == 0 && offset + 8 <= HEADER);
        // SAFETY: the header's 4096 bytes are in the region (new's contract),
        // and `offset` is 8-aligned from an 8-aligned base: an aligned u64
        // valid for reads and writes while `self` lives, which others access
        // only through atomics.
        unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(offset).cast()) }
    }

    /// The u32 header field at `offset`.
    #[inline]
    pub(super) fn header_u32(&self, offset: usize) -> &AtomicU32 {
        assert!(offset % 4 == 0 && offset + 4 <= HEADER);
        // SAFETY: as in header_u64, for a 4-aligned u32.
        unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(offset).cast()) }
    }

    /// Word `index` of the probe table.
    #[inline]
    pub(super) fn table_word(&self, index: usize) -> &AtomicU64 {
        assert!(index < self.table_words);
        // SAFETY: the table's table_words * 8 bytes follow the header in the
        // region; 4096 + 8 * index is 8-aligned. As in header_u64 otherwise.
        unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(HEADER + 8 * index).cast()) }
    }

    /// The four words of the slot of sequence number `seq`: position
    /// `seq mod slot_count`.
    #[inline]
    pub(super) fn slot(&self, seq: u64) -> &[AtomicU64; SLOT_WORDS] {
        // Below slot_count: the cast cannot truncate, the offset is in the region.
        let position = (seq & self.mask) as usize;
        let offset = self.ring_offset + position * SLOT_SIZE as usize;
        // SAFETY: the slot's 32 bytes are in the region (position <
        // slot_count), 8-aligned (ring_offset is a multiple of 8), valid for
        // reads and writes while `self` lives and accessed by others only
        // through atomics (new's contract). AtomicU64 has the size and bit
        // validity of u64, and an alignment of 8, which the slot has.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(offset)
                .cast::<[AtomicU64; SLOT_WORDS]>()
        }
    }
}
