//! The ring's writer: `Ring::create` lays out the header in memory the
//! caller maps, `add_probe` appends to the probe table, `record*` append
//! records that other threads and processes read as they are written.
//!
//! # Memory ordering
//!
//! A slot is a seqlock whose sequence word is its stamp. A writer takes
//! each of its slots by a compare-and-swap of the stamp to 0 (Acquire: the
//! previous record's words were released with its stamp, and ours must come
//! after them), issues a Release fence, writes the record's words (Relaxed),
//! then stores the stamps of the later slots and at last the first slot's,
//! each with Release. A reader (`Ring::snapshot`, or another process) loads
//! every stamp (pass A), then an Acquire fence, then the words (pass B),
//! another Acquire fence, then the stamps again (pass C). If pass A saw a
//! record's stamps, its words happen before pass B (A's loads synchronize
//! with their Release stores through the first fence). If pass B saw any
//! word of a later writer, that writer's 0 stamp happens before pass C (its
//! Release fence synchronizes with the reader's second fence), so pass C
//! finds 0 or a newer stamp, never the one pass A saw: a record whose stamps
//! agree in passes A and C was read whole. A stamp takes a value again
//! only when a writer puts back the one it found, having written no word
//! (see `give_up`): sequence numbers only grow, so there is no harmful ABA.
//!
//! Taking a slot by compare-and-swap, rather than storing 0, is what keeps
//! two writers from writing one slot at once. Without it, in flight mode, a
//! writer stalled for a whole lap (preempted, or faulting on the mapping)
//! would write its words among those of the writer that reserved the slot a
//! lap later, and the last stamp stored would vouch for words of both: a
//! torn record no reader can detect. So a writer takes a slot only from the
//! stamp of an older record (or from 0 on the slot's first lap, when nothing
//! else can take it); finding 0 (another writer holds it) or a newer stamp,
//! it gives its record up, which then counts as lost like an overwritten one.

use super::format::{
    self, first_stamp, later_stamp, offset, Counters, Entry, EntryError, Header, FIRST_PAYLOAD,
    MAX_RECORD_SLOTS, MAX_STRING, SEQUENCE_BITS, SEQUENCE_MASK, SLOT_SIZE, SLOT_WORDS, STAMP_SHIFT,
};
use super::format::{Arg, Maker, ProbeEntry, CONTEXT_PROBE, CONTEXT_SLOTS};
use super::region::Region;
use crate::probe::{ArgType, MAX_ARGS};
use crate::trace_context::TraceContext;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{fence, AtomicU32, AtomicU64};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The smallest ring `RingConfig::for_size` makes: 2048 slots, room for a
/// few hundred records of Strings.
/// Records of up to this many slots (a payload of up to 368 bytes) keep
/// the stamps they claim in a small buffer (see `Ring::record`).
const SMALL_RECORD_SLOTS: u64 = 16;

pub const MIN_SLOTS_BYTES: u64 = 64 << 10;
/// The largest: 2^27 slots.
pub const MAX_SLOTS_BYTES: u64 = 4 << 30;
/// Room for about 500 probes of 100-byte names, and the slots then start
/// 64 KiB in.
pub const DEFAULT_TABLE_CAPACITY: u64 = 61440;
/// A table capacity bounds this process's copy of the table too.
pub const MAX_TABLE_CAPACITY: u64 = 16 << 20;

/// The geometry and the identity a ring is created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// A power of two.
    pub slot_count: u64,
    /// A multiple of 4096 (up to `MAX_TABLE_CAPACITY`), so that the slots
    /// start on a page.
    pub table_capacity: u64,
    /// Flight mode: the newest records replace the oldest.
    pub overwrite: bool,
    pub pid: u64,
    pub pid_namespace: u64,
    /// `CLOCK_MONOTONIC` at creation: records' times are of this clock.
    pub anchor_monotonic_ns: u64,
    /// `CLOCK_REALTIME` at the same moment.
    pub anchor_realtime_ns: i64,
}

/// A ring geometry that cannot be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// `RingConfig::for_size` was asked for this many bytes of slots.
    SlotsSize(u64),
    SlotCount(u64),
    TableCapacity(u64),
    /// The file would not fit in memory.
    TooLarge {
        slot_count: u64,
        table_capacity: u64,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::SlotsSize(bytes) => write!(
                f,
                "a ring of {bytes} bytes is out of range: its slots take {} KiB to {} GiB (rounded up to a power of two)",
                MIN_SLOTS_BYTES >> 10,
                MAX_SLOTS_BYTES >> 30
            ),
            ConfigError::SlotCount(count) => write!(f, "slot_count {count} is not a power of two"),
            ConfigError::TableCapacity(capacity) => write!(
                f,
                "table_capacity {capacity} is not a multiple of 4096 up to {MAX_TABLE_CAPACITY}"
            ),
            ConfigError::TooLarge {
                slot_count,
                table_capacity,
            } => write!(
                f,
                "a ring of {slot_count} slots and a {table_capacity}-byte table does not fit in memory"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

impl RingConfig {
    /// The config of a ring whose slots take `slots_bytes` rounded up to a
    /// power of two, with the default table capacity (the slots then start
    /// at 64 KiB). Identity fields (pid, namespace, anchors) are 0: set them.
    pub fn for_size(slots_bytes: u64, overwrite: bool) -> Result<RingConfig, ConfigError> {
        if !(MIN_SLOTS_BYTES..=MAX_SLOTS_BYTES).contains(&slots_bytes) {
            return Err(ConfigError::SlotsSize(slots_bytes));
        }
        Ok(RingConfig {
            slot_count: slots_bytes.next_power_of_two() / SLOT_SIZE,
            table_capacity: DEFAULT_TABLE_CAPACITY,
            overwrite,
            pid: 0,
            pid_namespace: 0,
            anchor_monotonic_ns: 0,
            anchor_realtime_ns: 0,
        })
    }

    /// Where the slots start.
    pub fn ring_offset(&self) -> u64 {
        format::TABLE_OFFSET.saturating_add(self.table_capacity)
    }

    /// The bytes the ring takes: header, table and slots (saturated for a
    /// config `check` refuses).
    pub fn file_len(&self) -> u64 {
        self.ring_offset()
            .saturating_add(self.slot_count.saturating_mul(SLOT_SIZE))
    }

    pub fn check(&self) -> Result<(), ConfigError> {
        if !self.slot_count.is_power_of_two() {
            return Err(ConfigError::SlotCount(self.slot_count));
        }
        if self.table_capacity % format::PAGE != 0 || self.table_capacity > MAX_TABLE_CAPACITY {
            return Err(ConfigError::TableCapacity(self.table_capacity));
        }
        let fits = self
            .slot_count
            .checked_mul(SLOT_SIZE)
            .and_then(|slots| slots.checked_add(self.ring_offset()))
            .is_some_and(|len| len <= isize::MAX as u64);
        if !fits {
            return Err(ConfigError::TooLarge {
                slot_count: self.slot_count,
                table_capacity: self.table_capacity,
            });
        }
        Ok(())
    }

    /// The header a ring of this config has (`complete` added for a
    /// snapshot of it).
    pub fn header(&self) -> Header {
        Header {
            table_capacity: self.table_capacity,
            ring_offset: self.ring_offset(),
            slot_count: self.slot_count,
            flags: if self.overwrite { format::OVERWRITE } else { 0 },
            pid: self.pid,
            pid_namespace: self.pid_namespace,
            anchor_monotonic_ns: self.anchor_monotonic_ns,
            anchor_realtime_ns: self.anchor_realtime_ns,
            max_string: MAX_STRING,
            version: format::VERSION,
        }
    }
}

// Every probe a table can hold has an id below the context record's.
const _: () = assert!(MAX_TABLE_CAPACITY as usize / format::MIN_ENTRY_SIZE <= format::MAX_PROBES);

/// Why a probe was not added to the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableError {
    /// Its entry does not fit in what is left of the table.
    Full { capacity: u64 },
    /// The reader would refuse the entry (and the whole file with it).
    Entry(EntryError),
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableError::Full { capacity } => {
                write!(f, "the ring's probe table is full ({capacity} bytes)")
            }
            TableError::Entry(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for TableError {}

/// This process's copy of the probe table: what `add_probe` appends to and
/// `snapshot` writes out, whatever the shared copy has become.
#[derive(Default)]
pub(super) struct Table {
    pub(super) bytes: Vec<u8>,
    pub(super) probes: Vec<ProbeEntry>,
}

/// A recorder's ring, in memory shared with the processes that read it.
/// Writers on any number of threads record concurrently; see the module
/// documentation for how they agree with each other and with readers.
pub struct Ring {
    pub(super) region: Region,
    pub(super) config: RingConfig,
    /// Each probe's argument types, packed (see `signature`): a record is
    /// checked against its probe's types without touching the table, so
    /// that no record the reader would refuse is ever written.
    signatures: Box<[AtomicU32]>,
    pub(super) table: Mutex<Table>,
}

/// A signature's bit that says the probe is in the table.
const PRESENT: u32 = 1 << 31;

/// The types of a probe's arguments in a u32: their count in bits 0 to 3,
/// each type's code in two bits from bit 4, and `PRESENT`.
fn signature(codes: impl Iterator<Item = u8>) -> u32 {
    let mut signature = PRESENT;
    let mut count = 0;
    for code in codes {
        signature |= u32::from(code) << (4 + 2 * count);
        count += 1;
    }
    signature | count
}

const ONE_INTEGER: u32 = PRESENT | 1 | ((format::TYPE_INTEGER as u32) << 4);

/// The signature of arguments no probe takes: more than six (an id not in
/// the table has signature 0).
const NO_PROBE_TAKES: u32 = u32::MAX;

/// The signature `args` match and the bytes of their payload.
#[inline]
fn shape(args: &[Arg<'_>]) -> (u32, usize) {
    if args.len() > MAX_ARGS {
        return (NO_PROBE_TAKES, 0);
    }
    let mut len = 0;
    let codes = args.iter().map(|arg| match arg {
        Arg::Int(_) => {
            len += 8;
            format::TYPE_INTEGER
        }
        Arg::Float(_) => {
            len += 8;
            format::TYPE_FLOAT
        }
        Arg::Str(bytes) => {
            len += format::string_size(bytes.len());
            format::TYPE_STRING
        }
    });
    let signature = signature(codes);
    (signature, len)
}

/// Whether a writer of slot sequence number `seq` may take a slot whose
/// stamp is `stamp`.
#[inline]
fn claimable(stamp: u64, seq: u64, slot_count: u64) -> bool {
    if stamp == 0 {
        // Never written, on the slot's first lap: only the writer of that
        // sequence number ever takes a slot from 0. On a later lap, another
        // writer holds it.
        return seq < slot_count;
    }
    // An older record's: its 48-bit sequence number is behind ours (by
    // less than half their range, so that hostile bits cannot pass for old).
    let behind = seq.wrapping_sub(stamp >> STAMP_SHIFT) & SEQUENCE_MASK;
    behind != 0 && behind < 1 << (SEQUENCE_BITS - 1)
}

/// What a writer leaves in a slot it took from 0 and then gave up: the
/// stamp of a later slot of its own sequence number, which readers pass
/// over and later writers take as an older record's.
#[inline]
const fn given_up_stamp(seq: u64) -> u64 {
    later_stamp(seq.wrapping_sub(1), 1)
}

impl Ring {
    /// Writes the header of a ring of `config` at `base` (magic last, with
    /// Release, so that a reader in this process that sees it sees the rest)
    /// and returns the ring that writes there.
    ///
    /// # Safety
    /// `base` is 8-aligned (page-aligned, from `mmap`, in practice) and
    /// points to `config.file_len()` bytes, all zero, valid for reads and
    /// writes for the whole life of the returned `Ring`. Nothing else in
    /// this process accesses them but through atomics of the same size at
    /// the same offsets (another `Ring` over the same bytes would break the
    /// writers' agreement); other processes may read and write them through
    /// a shared mapping or read and write syscalls.
    ///
    /// # Panics
    /// If `base` is null or not 8-aligned.
    pub unsafe fn create(base: *mut u8, config: &RingConfig) -> Result<Ring, ConfigError> {
        config.check()?;
        let base = NonNull::new(base).expect("a ring's memory is not at address 0");
        assert!(
            base.as_ptr().addr() % 8 == 0,
            "a ring's memory is 8-aligned"
        );
        // check() bounded both below isize::MAX: the casts cannot truncate.
        // SAFETY: this function's contract is Region::new's, and check()
        // made the geometry one Region::new accepts.
        let region =
            unsafe { Region::new(base, config.table_capacity as usize, config.slot_count) };
        let mut fields = [0; format::FIELDS_END];
        config.header().encode(&mut fields);
        let words = fields
            .chunks_exact(8)
            .map(|word| u64::from_le_bytes(word.try_into().unwrap()));
        for (index, word) in words.enumerate().skip(1) {
            region.header_u64(8 * index).store(word, Relaxed);
        }
        region
            .header_u64(offset::MAGIC)
            .store(u64::from_le_bytes(format::MAGIC), Release);
        let probes_max = (config.table_capacity as usize) / format::MIN_ENTRY_SIZE;
        Ok(Ring {
            region,
            config: *config,
            signatures: (0..probes_max).map(|_| AtomicU32::new(0)).collect(),
            table: Mutex::new(Table::default()),
        })
    }

    pub fn config(&self) -> &RingConfig {
        &self.config
    }

    /// Appends a probe to the table; returns its id. Thread-safe (appends
    /// are serialized here); records may be written meanwhile.
    pub fn add_probe(
        &self,
        provider: &str,
        probe: &str,
        types: &[ArgType],
        latency_arg: Option<u8>,
        stack_arg: Option<u8>,
    ) -> Result<u32, TableError> {
        let entry = Entry {
            provider,
            probe,
            types,
            latency_arg,
            stack_arg,
        };
        let encoded = entry.encode().map_err(TableError::Entry)?;
        let bytes = encoded.as_bytes();
        let mut table = self.table();
        let (used, id) = (table.bytes.len(), table.probes.len());
        if used + bytes.len() > self.config.table_capacity as usize || id >= self.signatures.len() {
            return Err(TableError::Full {
                capacity: self.config.table_capacity,
            });
        }
        for (index, word) in bytes.chunks_exact(8).enumerate() {
            let word = u64::from_le_bytes(word.try_into().unwrap());
            self.region
                .table_word(used / 8 + index)
                .store(word, Relaxed);
        }
        // Release: the entry's words before table_used, for whoever loads it.
        // MAX_TABLE_CAPACITY bounds the table: the cast cannot truncate.
        let used_now = used + bytes.len();
        self.region
            .header_u32(offset::TABLE_USED)
            .store(used_now as u32, Release);
        table.bytes.extend_from_slice(bytes);
        table.probes.push(ProbeEntry {
            id: id as u32,
            provider: provider.to_owned(),
            name: probe.to_owned(),
            types: types.to_vec(),
            latency_arg,
            stack_arg,
        });
        drop(table);
        // Last, with Release: a writer that loads the signature (Acquire)
        // before writing a record of this probe makes the entry, and
        // table_used, visible to whoever then sees the record.
        self.signatures[id].store(
            signature(types.iter().map(|&t| format::type_code(t))),
            Release,
        );
        Ok(id as u32)
    }

    /// Records one Integer argument: the hot path of latency probes. Returns
    /// false if the record was not written: dropped (the ring was full
    /// without overwrite, or `probe` does not take one Integer; counted in
    /// `dropped`), or given up (its slot was held by a writer a lap away; it
    /// counts as lost, as overwritten records do).
    #[inline]
    pub fn record_integer(&self, probe: u32, time_ns: u64, tid: u32, value: i64) -> bool {
        self.record_integer_by(probe, time_ns, Maker::new(tid, format::NO_CONTEXT), value)
    }

    /// [`Ring::record_integer`] by a thread in a trace context: `maker`
    /// names both (see [`Maker`]).
    #[inline]
    pub fn record_integer_by(&self, probe: u32, time_ns: u64, maker: Maker, value: i64) -> bool {
        if self.signature(probe) != ONE_INTEGER {
            self.count_dropped();
            return false;
        }
        let Some(seq) = self.reserve(1) else {
            return false;
        };
        let slot = self.region.slot(seq);
        if self.claim(&slot[0], seq).is_none() {
            return false;
        }
        // Orders the 0 the claim stored before the words (see the module doc).
        fence(Release);
        slot[1].store(time_ns, Relaxed);
        slot[2].store(maker.word(probe), Relaxed);
        slot[3].store(value as u64, Relaxed);
        slot[0].store(first_stamp(seq, 1), Release);
        true
    }

    /// Records any arguments (Strings cut at `MAX_STRING` bytes). Returns
    /// false as `record_integer` does; also drops a record whose arguments
    /// do not match its probe's types, or that needs more slots than the
    /// ring has. Allocates nothing.
    pub fn record(&self, probe: u32, time_ns: u64, tid: u32, args: &[Arg<'_>]) -> bool {
        self.record_by(probe, time_ns, Maker::new(tid, format::NO_CONTEXT), args)
    }

    /// [`Ring::record`] by a thread in a trace context (see [`Maker`]).
    pub fn record_by(&self, probe: u32, time_ns: u64, maker: Maker, args: &[Arg<'_>]) -> bool {
        let (signature, payload_len) = shape(args);
        let slots = format::slots_for(payload_len);
        if self.signature(probe) != signature || slots > self.config.slot_count {
            self.count_dropped();
            return false;
        }
        let Some(seq) = self.reserve(slots) else {
            return false;
        };
        // The stamps taken are kept to be put back if the record is given
        // up: most records fit a few slots, and clearing room for the
        // largest on every call would cost more than the record itself.
        let claimed = if slots <= SMALL_RECORD_SLOTS {
            self.claim_slots(seq, &mut [0; SMALL_RECORD_SLOTS as usize][..slots as usize])
        } else {
            // slots <= MAX_RECORD_SLOTS: a probe has at most six arguments.
            self.claim_slots(seq, &mut [0; MAX_RECORD_SLOTS as usize][..slots as usize])
        };
        if !claimed {
            return false;
        }
        fence(Release);
        let first = self.region.slot(seq);
        first[1].store(time_ns, Relaxed);
        first[2].store(maker.word(probe), Relaxed);
        let mut payload = Payload::new(&self.region, seq, slots);
        for arg in args {
            match *arg {
                Arg::Int(value) => payload.push(&value.to_le_bytes()),
                Arg::Float(value) => payload.push(&value.to_bits().to_le_bytes()),
                Arg::Str(bytes) => {
                    let bytes = &bytes[..format::cut_len(bytes.len())];
                    // cut_len bounds it to MAX_STRING: the cast cannot truncate.
                    payload.push(&(bytes.len() as u16).to_le_bytes());
                    payload.push(bytes);
                }
            }
        }
        payload.finish();
        for index in 1..slots {
            self.region.slot(seq.wrapping_add(index))[0].store(later_stamp(seq, index), Release);
        }
        first[0].store(first_stamp(seq, slots), Release);
        true
    }

    /// Records that `maker`'s thread is in `context` from now on, under
    /// `maker`'s tag (one of `format::CONTEXT_TAGS`): the records it makes
    /// with that tag are made in that context. Returns false as
    /// `record_integer` does when the record was not written (dropped, or
    /// given up): the thread's later records must then not carry the tag.
    pub fn record_context(&self, time_ns: u64, maker: Maker, context: &TraceContext) -> bool {
        debug_assert!(format::CONTEXT_TAGS.contains(&maker.tag()), "{maker:?}");
        if CONTEXT_SLOTS > self.config.slot_count {
            self.count_dropped();
            return false;
        }
        let Some(seq) = self.reserve(CONTEXT_SLOTS) else {
            return false;
        };
        if !self.claim_slots(seq, &mut [0; CONTEXT_SLOTS as usize]) {
            return false;
        }
        fence(Release);
        let first = self.region.slot(seq);
        first[1].store(time_ns, Relaxed);
        first[2].store(maker.word(CONTEXT_PROBE), Relaxed);
        let mut payload = Payload::new(&self.region, seq, CONTEXT_SLOTS);
        payload.push(context.trace_id());
        payload.push(context.span_id());
        payload.finish();
        for index in 1..CONTEXT_SLOTS {
            self.region.slot(seq.wrapping_add(index))[0].store(later_stamp(seq, index), Release);
        }
        first[0].store(first_stamp(seq, CONTEXT_SLOTS), Release);
        true
    }

    /// Takes the slots from `seq` on, one for each of `previous`, which
    /// receives the stamps they held; gives them all back, and returns
    /// false, if one of them cannot be taken.
    #[inline]
    fn claim_slots(&self, seq: u64, previous: &mut [u64]) -> bool {
        for index in 0..previous.len() {
            let slot_seq = seq.wrapping_add(index as u64);
            match self.claim(&self.region.slot(slot_seq)[0], slot_seq) {
                Some(stamp) => previous[index] = stamp,
                None => {
                    self.give_up(seq, &previous[..index]);
                    return false;
                }
            }
        }
        true
    }

    /// Counts a record the caller could not write (its probe is not in the
    /// table: the table was full).
    #[inline]
    pub fn count_dropped(&self) {
        self.region
            .header_u64(offset::DROPPED)
            .fetch_add(1, Relaxed);
    }

    pub fn counters(&self) -> Counters {
        let load = |at| self.region.header_u64(at).load(Acquire);
        Counters {
            head: load(offset::HEAD),
            records: load(offset::RECORDS),
            dropped: load(offset::DROPPED),
            tail: load(offset::TAIL),
            table_used: self.region.header_u32(offset::TABLE_USED).load(Acquire),
        }
    }

    /// What a consumer does once it has read every record before slot
    /// sequence number `tail` (as the external reader does by writing the
    /// file): lets writers without overwrite reuse those slots.
    pub fn store_tail(&self, tail: u64) {
        // Release: the consumer's reads before its writers' reuse (they load
        // tail with Acquire).
        self.region.header_u64(offset::TAIL).store(tail, Release);
    }

    pub(super) fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while appending leaves at worst an entry not counted.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[inline]
    fn signature(&self, probe: u32) -> u32 {
        // Acquire: pairs with add_probe's Release (see there).
        self.signatures
            .get(probe as usize)
            .map_or(0, |signature| signature.load(Acquire))
    }

    /// Reserves `slots` consecutive slots; returns the first one's sequence
    /// number, or None (counted in dropped) when the ring is full without
    /// overwrite.
    #[inline]
    fn reserve(&self, slots: u64) -> Option<u64> {
        let head = self.region.header_u64(offset::HEAD);
        // Relaxed: the sequence number only has to be unique, which the
        // read-modify-write makes it. Readers that need head to cover a
        // record get that from its stamp's Release.
        let seq = if self.config.overwrite {
            head.fetch_add(slots, Relaxed)
        } else {
            self.reserve_below_tail(head, slots)?
        };
        self.region
            .header_u64(offset::RECORDS)
            .fetch_add(1, Relaxed);
        Some(seq)
    }

    fn reserve_below_tail(&self, head: &AtomicU64, slots: u64) -> Option<u64> {
        let tail = self.region.header_u64(offset::TAIL);
        let mut current = head.load(Relaxed);
        loop {
            // Acquire: the reader stored tail after reading the slots below
            // it; writing them again must come after those reads.
            let limit = tail.load(Acquire).saturating_add(self.config.slot_count);
            if current.saturating_add(slots) > limit {
                self.count_dropped();
                return None;
            }
            match head.compare_exchange_weak(current, current.wrapping_add(slots), Relaxed, Relaxed)
            {
                Ok(_) => return Some(current),
                Err(now) => current = now,
            }
        }
    }

    /// Takes the slot whose stamp is `stamp` for slot sequence number
    /// `seq`: returns the stamp it held (to put back if the record is given
    /// up), or None when another writer holds it or wrote a newer record.
    #[inline]
    fn claim(&self, stamp: &AtomicU64, seq: u64) -> Option<u64> {
        let mut current = stamp.load(Relaxed);
        loop {
            if !claimable(current, seq, self.config.slot_count) {
                return None;
            }
            // Acquire: the words of the record whose stamp this was happen
            // before ours.
            match stamp.compare_exchange_weak(current, 0, Acquire, Relaxed) {
                Ok(_) => return Some(current),
                Err(now) => current = now,
            }
        }
    }

    /// Puts back the stamps of the slots taken from `seq` on: the records
    /// they held are untouched (no word was written yet), so they are again
    /// what they were, for readers and for the next writer.
    #[cold]
    fn give_up(&self, seq: u64, previous: &[u64]) {
        for (index, &stamp) in (0..).zip(previous) {
            let slot_seq = seq.wrapping_add(index);
            let back = if stamp == 0 {
                given_up_stamp(slot_seq)
            } else {
                stamp
            };
            // Release: the next writer to take the slot (Acquire) comes after
            // the record's writer, as if it had taken the slot from it.
            self.region.slot(slot_seq)[0].store(back, Release);
        }
    }
}

/// Packs a record's payload into its slots' words: the first slot's last
/// word, then three words of each later slot, zeros after the payload.
struct Payload<'r> {
    region: &'r Region,
    seq: u64,
    slots: u64,
    /// The slot (from 0) and the word in it the next word goes to.
    slot: u64,
    word: usize,
    /// Bytes not yet stored: `fill` of them, from the low end.
    pending: u64,
    fill: usize,
}

impl<'r> Payload<'r> {
    fn new(region: &'r Region, seq: u64, slots: u64) -> Payload<'r> {
        Payload {
            region,
            seq,
            slots,
            slot: 0,
            word: SLOT_WORDS - FIRST_PAYLOAD / 8,
            pending: 0,
            fill: 0,
        }
    }

    #[inline]
    fn store(&mut self, word: u64) {
        debug_assert!(self.slot < self.slots, "a payload overran its slots");
        self.region.slot(self.seq.wrapping_add(self.slot))[self.word].store(word, Relaxed);
        self.word += 1;
        if self.word == SLOT_WORDS {
            self.slot += 1;
            self.word = 1;
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        while let Some((chunk, rest)) = bytes.split_first_chunk::<8>() {
            let word = u64::from_le_bytes(*chunk);
            if self.fill == 0 {
                self.store(word);
            } else {
                let shift = 8 * self.fill;
                self.store(self.pending | (word << shift));
                self.pending = word >> (64 - shift);
            }
            bytes = rest;
        }
        for &byte in bytes {
            self.pending |= u64::from(byte) << (8 * self.fill);
            self.fill += 1;
            if self.fill == 8 {
                self.store(self.pending);
                (self.pending, self.fill) = (0, 0);
            }
        }
    }

    /// Stores what is pending, then zeros to the end of the last slot.
    fn finish(mut self) {
        if self.fill > 0 {
            self.store(self.pending);
        }
        while self.slot < self.slots {
            self.store(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_tell_types_apart() {
        let of = |types: &[ArgType]| signature(types.iter().map(|&t| format::type_code(t)));
        assert_eq!(of(&[ArgType::Int64]), ONE_INTEGER);
        assert_eq!(shape(&[Arg::Int(7)]), (ONE_INTEGER, 8));
        let types = [ArgType::String, ArgType::Float64, ArgType::Int64];
        let args = [Arg::Str(b"abc"), Arg::Float(1.5), Arg::Int(2)];
        assert_eq!(shape(&args), (of(&types), 5 + 8 + 8));
        assert_ne!(of(&[]), of(&[ArgType::Int64]));
        assert_ne!(
            of(&[ArgType::Int64, ArgType::Int64]),
            of(&[ArgType::Float64, ArgType::Int64])
        );
        assert_ne!(of(&[ArgType::Int64; 6]), of(&[ArgType::Int64; 5]));
        assert_eq!(shape(&[Arg::Int(0); 7]).0, NO_PROBE_TAKES);
        assert_ne!(of(&[ArgType::Int64; 6]), NO_PROBE_TAKES);
        assert_eq!(shape(&[Arg::Str(&[b'x'; 5000])]).1, 2 + 1024);
    }

    #[test]
    fn a_slot_is_taken_only_from_an_older_record() {
        let count = 8;
        // First lap: from 0 only.
        assert!(claimable(0, 3, count));
        assert!(!claimable(0, 8, count), "0 on a later lap: being written");
        let stamp_of = |seq| first_stamp(seq, 1);
        assert!(claimable(stamp_of(3), 11, count));
        assert!(claimable(later_stamp(2, 1), 11, count));
        assert!(
            claimable(stamp_of(3), 19, count),
            "a writer that gave up left an older stamp"
        );
        assert!(!claimable(stamp_of(11), 11, count), "its own");
        assert!(
            !claimable(stamp_of(11), 3, count),
            "newer: the writer was lapped"
        );
        // Across the 48-bit wrap of stamps.
        let seq = 1 << 48;
        assert!(claimable(stamp_of(seq - 8), seq, count));
        assert!(!claimable(stamp_of(seq + 8), seq, count));
        assert!(claimable(given_up_stamp(3), 11, count));
        assert!(!claimable(given_up_stamp(11), 11, count));
    }

    #[test]
    fn configs_from_sizes() {
        let config = RingConfig::for_size(100_000, true).unwrap();
        assert_eq!(config.slot_count, 4096);
        assert_eq!(config.ring_offset(), 65536);
        assert_eq!(config.file_len(), 65536 + 131072);
        assert!(config.overwrite);
        assert_eq!(
            RingConfig::for_size(MIN_SLOTS_BYTES, false)
                .unwrap()
                .slot_count,
            2048
        );
        assert_eq!(
            RingConfig::for_size(MAX_SLOTS_BYTES, false)
                .unwrap()
                .slot_count,
            1 << 27
        );
        for bytes in [0, MIN_SLOTS_BYTES - 1, MAX_SLOTS_BYTES + 1, u64::MAX] {
            let err = RingConfig::for_size(bytes, false).unwrap_err();
            assert_eq!(err, ConfigError::SlotsSize(bytes));
            assert!(err.to_string().contains("64 KiB to 4 GiB"), "{err}");
        }
    }

    #[test]
    fn impossible_geometries_are_refused() {
        let good = RingConfig::for_size(MIN_SLOTS_BYTES, false).unwrap();
        assert_eq!(good.check(), Ok(()));
        let with = |slot_count, table_capacity| RingConfig {
            slot_count,
            table_capacity,
            ..good
        };
        assert_eq!(with(1, 0).check(), Ok(()));
        assert_eq!(with(0, 4096).check(), Err(ConfigError::SlotCount(0)));
        assert_eq!(with(3, 4096).check(), Err(ConfigError::SlotCount(3)));
        assert_eq!(with(8, 4097).check(), Err(ConfigError::TableCapacity(4097)));
        assert_eq!(with(8, 8).check(), Err(ConfigError::TableCapacity(8)));
        assert_eq!(
            with(8, MAX_TABLE_CAPACITY + 4096).check(),
            Err(ConfigError::TableCapacity(MAX_TABLE_CAPACITY + 4096))
        );
        assert!(matches!(
            with(1 << 63, 4096).check(),
            Err(ConfigError::TooLarge { .. })
        ));
        assert_eq!(with(1 << 63, 4096).file_len(), u64::MAX);
        assert!(matches!(
            with(1 << 58, 4096).check(),
            Err(ConfigError::TooLarge { .. })
        ));
    }
}
