//! A reader's place in a live ring, and the records it lost: the one
//! cursor that following a ring (`static-tracing record`, `dump`) and
//! tallying it (`export`, the Rack endpoint) both move, so that what is
//! read once and what counts as lost are decided in one place.
//!
//! A cursor holds a position, the sequence number of the next slot to
//! read. [`Cursor::follow`] moves it only through records committed one
//! after another, so that a record being written is taken by a later
//! read, whole; [`Cursor::read_rest`] takes every whole record from there
//! to the cut, passing over those that are not (they are lost): the last
//! read of a ring, or the one after a record stayed not whole for too
//! long ([`Cursor::follow_within`]).
//!
//! Lost records are counted, never guessed: `dropped` is the ring's own
//! counter; a record reserved before the position and not read was
//! overwritten (or given up by its writer, or torn) before it was read.
//! How many that is comes from the ring's `records` counter: records
//! reserved before the cut's head, less those read, less those that may
//! still be whole after the position (at most one per slot between the
//! position and head). That is a lower bound, exact once the position
//! reaches head; the count only ever takes the larger of what it had and
//! that bound, so that it never goes down and never counts a record that
//! a later read takes.
//!
//! A cursor also keeps the trace context in force on each thread (see
//! [`Contexts`]), so that the records it visits carry theirs across reads.
//!
//! A cursor is plain numbers (times are `CLOCK_MONOTONIC` nanoseconds,
//! the same in every process of the machine) and the contexts of the
//! threads it read, so that it can be kept wherever its readers are: in
//! one reader, or shared between processes. A read that fails leaves it
//! as it was.

use super::contexts::Contexts;
use super::format::Counters;
use super::scan::{Opened, ReadAt, ReadError};
use super::Record;

/// Records lost, as counted so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lost {
    /// Never written: the ring or its probe table was full.
    pub dropped: u64,
    /// Overwritten, given up or torn before a read took them.
    pub overwritten: u64,
}

impl Lost {
    /// Saturating, as the sums below: the counters come from a file its
    /// process may have written anything in.
    pub fn total(self) -> u64 {
        self.dropped.saturating_add(self.overwritten)
    }
}

impl std::ops::Add for Lost {
    type Output = Lost;

    fn add(self, other: Lost) -> Lost {
        Lost {
            dropped: self.dropped.saturating_add(other.dropped),
            overwritten: self.overwritten.saturating_add(other.overwritten),
        }
    }
}

/// A reader's place in one ring; see the module's documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The sequence number of the next slot to read.
    pub position: u64,
    /// Records read from the ring.
    pub read: u64,
    pub lost: Lost,
    /// Where a read last stopped short of its cut, and since when (ns).
    pub stalled: Option<(u64, u64)>,
    /// The context in force on each thread, as the records read tell.
    pub contexts: Contexts,
}

impl Cursor {
    /// A cursor that reads from sequence number `position` on.
    pub fn at(position: u64) -> Cursor {
        Cursor {
            position,
            ..Cursor::default()
        }
    }

    /// Visits the records committed one after another from the position
    /// to the cut of `opened` (the ring in `source`, opened live), each
    /// with the bytes of its slots and the context it was made in, and
    /// moves past them; returns how many.
    pub fn follow(
        &mut self,
        opened: &Opened,
        source: &(impl ReadAt + ?Sized),
        mut visit: impl FnMut(Record, &[u8]),
    ) -> Result<u64, ReadError> {
        let mut read = 0;
        let contexts = &mut self.contexts;
        let position = opened.follow(source, self.position, |mut record, slots| {
            read += 1;
            contexts.resolve(&mut record);
            visit(record, slots);
        })?;
        self.moved(opened, position, read);
        Ok(read)
    }

    /// Visits every record still whole from the position to the cut,
    /// whether or not the ones before it were committed, and moves to the
    /// cut's head; what it passes over is lost. Returns how many.
    pub fn read_rest(
        &mut self,
        opened: &Opened,
        source: &(impl ReadAt + ?Sized),
        mut visit: impl FnMut(Record, &[u8]),
    ) -> Result<u64, ReadError> {
        let (slot_count, head) = (opened.header.slot_count, opened.counters.head);
        let from = self.position.clamp(head.saturating_sub(slot_count), head);
        let position = self.position;
        let mut read = 0;
        let contexts = &mut self.contexts;
        opened.scan(source, slot_count - (head - from), |mut record, slots| {
            // A record a lap older than the position can still be in its
            // slot (its overwriter gave up): read before, or lost.
            if record.seq >= position {
                read += 1;
                contexts.resolve(&mut record);
                visit(record, slots);
            }
        })?;
        self.moved(opened, head.max(position), read);
        Ok(read)
    }

    /// [`Cursor::follow`], then, if the read stopped short where the one
    /// before stopped and `grace_ns` has passed since (at `now_ns`), the
    /// record there is taken as given up: [`Cursor::read_rest`].
    pub fn follow_within(
        &mut self,
        opened: &Opened,
        source: &(impl ReadAt + ?Sized),
        now_ns: u64,
        grace_ns: u64,
        mut visit: impl FnMut(Record, &[u8]),
    ) -> Result<u64, ReadError> {
        let mut next = self.clone();
        let stalled = next.stalled;
        let mut read = next.follow(opened, source, &mut visit)?;
        next.stalled = None;
        if next.position < opened.counters.head {
            next.stalled = match stalled {
                Some((at, since)) if at == next.position => {
                    if now_ns.saturating_sub(since) >= grace_ns {
                        read += next.read_rest(opened, source, &mut visit)?;
                        None
                    } else {
                        Some((at, since))
                    }
                }
                _ => Some((next.position, now_ns)),
            };
        }
        *self = next;
        Ok(read)
    }

    /// The lost-record rule (see the module's documentation).
    fn moved(&mut self, opened: &Opened, position: u64, read: u64) {
        self.position = position;
        self.read += read;
        self.count_lost(&opened.counters);
    }

    fn count_lost(&mut self, counters: &Counters) {
        let unread = counters.head.saturating_sub(self.position);
        let overwritten = counters
            .records
            .saturating_sub(self.read)
            .saturating_sub(unread);
        self.lost = Lost {
            dropped: self.lost.dropped.max(counters.dropped),
            overwritten: self.lost.overwritten.max(overwritten),
        };
    }
}
