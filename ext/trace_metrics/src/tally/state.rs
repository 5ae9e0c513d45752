//! A tally as bytes, and back: what the workers of one server share in a
//! file (StaticTracing::Rack::Metrics), so that whichever worker answers a
//! scrape goes on from the same cursors and counts, and the counters are
//! the same whichever answers. Plain numbers, little-endian, versioned;
//! bytes that are not a tally this version wrote are refused, never
//! trusted (a probe index out of range, a length past the end).
//!
//! Each bucket's exemplar is in it, and the trace context in force on each
//! thread of the ring as far as the reads so far tell: a call read by the
//! next worker, of a request whose context record the one before read, is
//! known to be that request's.
//!
//! What holds each read of a ring to the reads before is in it too (the
//! ring's continuity, why it was refused, the files of the rings read
//! before, whether a scrape never returned): a worker that takes the
//! tally on refuses what the one before refused, and counts nothing
//! twice.

use super::{Exemplar, Histogram, ProbeTally, RingRead, Tally, LEFT_FILES};
use stapsdt::ring::continuity::Continuity;
use stapsdt::ring::scan::FileId;
use stapsdt::ring::{Contexts, Cursor, Latest, Lost};
use stapsdt::trace_context::{TraceContext, SPAN_ID_LEN, TRACE_ID_LEN};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

const MAGIC: &[u8; 8] = b"STTALLY\x03";

impl Tally {
    /// The tally as bytes ([`Tally::from_state`] reads them back); an
    /// error if a probe it read would not encode (the reader checks every
    /// entry it reads as the writer does, so none should).
    pub fn state(&self) -> Result<Vec<u8>, String> {
        let mut out = Out(MAGIC.to_vec());
        out.text(&self.name);
        out.u64(u64::try_from(self.grace.as_nanos()).unwrap_or(u64::MAX));
        out.lost(self.lost_before);
        out.flag(self.scraping);
        out.len(self.left.len());
        self.left.iter().for_each(|&file| out.file(file));
        out.len(self.probes.len());
        for probe in &self.probes {
            out.text(&probe.provider);
            out.text(&probe.name);
            out.u64(probe.calls);
            out.flag(probe.latency.is_some());
            if let Some(histogram) = &probe.latency {
                histogram.buckets.iter().for_each(|&count| out.u64(count));
                out.u64(histogram.count);
                out.0.extend_from_slice(&histogram.sum_ns.to_le_bytes());
                for exemplar in &histogram.exemplars {
                    out.flag(exemplar.is_some());
                    if let Some(exemplar) = exemplar {
                        out.context(&exemplar.context);
                        out.u64(exemplar.duration_ns as u64);
                        out.u64(exemplar.realtime_ns as u64);
                    }
                }
            }
        }
        out.flag(self.ring.is_some());
        if let Some(ring) = &self.ring {
            out.flag(ring.continuity.file().is_some());
            if let Some(file) = ring.continuity.file() {
                out.file(file);
            }
            let continuity = ring
                .continuity
                .encode()
                .map_err(|err| format!("{}: {err}", self.name))?;
            out.len(continuity.len());
            out.0.extend_from_slice(&continuity);
            out.flag(ring.refused.is_some());
            if let Some(refused) = &ring.refused {
                out.text(refused);
            }
            let cursor = &ring.cursor;
            out.u64(cursor.position);
            out.u64(cursor.read);
            out.lost(cursor.lost);
            out.flag(cursor.stalled.is_some());
            let (at, since) = cursor.stalled.unwrap_or_default();
            out.u64(at);
            out.u64(since);
            out.len(ring.probes.len());
            ring.probes.iter().for_each(|&index| out.u64(index as u64));
            let latest = cursor.contexts.latest();
            out.len(latest.len());
            for thread in latest {
                out.0.extend_from_slice(&thread.tid.to_le_bytes());
                out.u64(thread.seq);
                out.0.extend_from_slice(&thread.tag.to_le_bytes());
                out.context(&thread.context);
            }
        }
        Ok(out.0)
    }

    /// A tally from [`Tally::state`]'s bytes; an error says what is wrong.
    pub fn from_state(bytes: &[u8]) -> Result<Tally, String> {
        let mut input = In(bytes);
        if input.take(MAGIC.len())? != MAGIC {
            return Err("not a tally of this version".into());
        }
        let name = input.text()?;
        let grace = Duration::from_nanos(input.u64()?);
        let lost_before = input.lost()?;
        let scraping = input.flag()?;
        let left_count = input.len(16)?;
        if left_count > LEFT_FILES {
            return Err(format!(
                "{left_count} files read before, of {LEFT_FILES} kept"
            ));
        }
        let mut left = VecDeque::with_capacity(left_count);
        for _ in 0..left_count {
            left.push_back(input.file()?);
        }
        let count = input.len(8)?;
        let mut probes = Vec::with_capacity(count);
        let mut by_label = HashMap::with_capacity(count);
        for index in 0..count {
            let provider = input.text()?;
            let name = input.text()?;
            let calls = input.u64()?;
            let latency = if input.flag()? {
                let mut histogram = Histogram::default();
                for bucket in histogram.buckets.iter_mut() {
                    *bucket = input.u64()?;
                }
                histogram.count = input.u64()?;
                histogram.sum_ns = i128::from_le_bytes(input.take(16)?.try_into().unwrap());
                for exemplar in histogram.exemplars.iter_mut() {
                    if input.flag()? {
                        *exemplar = Some(Exemplar {
                            context: input.context()?,
                            duration_ns: input.u64()? as i64,
                            realtime_ns: input.u64()? as i64,
                        });
                    }
                }
                Some(histogram)
            } else {
                None
            };
            if by_label
                .insert((provider.clone(), name.clone()), index)
                .is_some()
            {
                return Err(format!("probe {provider}:{name} twice"));
            }
            probes.push(ProbeTally {
                provider,
                name,
                calls,
                latency,
            });
        }
        let ring = if input.flag()? {
            let file = if input.flag()? {
                Some(input.file()?)
            } else {
                None
            };
            let continuity_len = input.len(1)?;
            let continuity = Continuity::decode(input.take(continuity_len)?, file)
                .map_err(|err| format!("its ring's continuity: {err}"))?;
            let refused = if input.flag()? {
                Some(input.text()?)
            } else {
                None
            };
            let mut cursor = Cursor::at(input.u64()?);
            cursor.read = input.u64()?;
            cursor.lost = input.lost()?;
            let stalled = input.flag()?;
            let at_since = (input.u64()?, input.u64()?);
            cursor.stalled = stalled.then_some(at_since);
            let ids = input.len(8)?;
            let mut ring_probes = Vec::with_capacity(ids);
            for _ in 0..ids {
                let index = input.u64()?;
                if index >= probes.len() as u64 {
                    return Err(format!("probe index {index} of {}", probes.len()));
                }
                ring_probes.push(index as usize);
            }
            let threads = input.len(4 + 8 + 4 + TRACE_ID_LEN + SPAN_ID_LEN)?;
            let mut latest = Vec::with_capacity(threads);
            for _ in 0..threads {
                latest.push(Latest {
                    tid: input.u32()?,
                    seq: input.u64()?,
                    tag: input.u32()?,
                    context: input.context()?,
                });
            }
            cursor.contexts = Contexts::from_latest(latest);
            if ring_probes.len() > continuity.probes().len() {
                return Err(format!(
                    "{} probes read of a ring whose table has {}",
                    ring_probes.len(),
                    continuity.probes().len()
                ));
            }
            Some(RingRead {
                continuity,
                cursor,
                probes: ring_probes,
                refused,
            })
        } else {
            None
        };
        if !input.0.is_empty() {
            return Err(format!("{} bytes after its end", input.0.len()));
        }
        Ok(Tally {
            name,
            grace,
            probes,
            by_label,
            ring,
            lost_before,
            left,
            scraping,
        })
    }
}

struct Out(Vec<u8>);

impl Out {
    fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    fn len(&mut self, len: usize) {
        self.u64(len as u64);
    }

    fn flag(&mut self, flag: bool) {
        self.0.push(u8::from(flag));
    }

    fn text(&mut self, text: &str) {
        self.len(text.len());
        self.0.extend_from_slice(text.as_bytes());
    }

    fn lost(&mut self, lost: Lost) {
        self.u64(lost.dropped);
        self.u64(lost.overwritten);
    }

    fn file(&mut self, file: FileId) {
        self.u64(file.dev);
        self.u64(file.ino);
    }

    fn context(&mut self, context: &TraceContext) {
        self.0.extend_from_slice(context.trace_id());
        self.0.extend_from_slice(context.span_id());
    }
}

struct In<'a>(&'a [u8]);

impl<'a> In<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        if len > self.0.len() {
            return Err("cut short".into());
        }
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(taken)
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    fn context(&mut self) -> Result<TraceContext, String> {
        let trace_id = self.take(TRACE_ID_LEN)?.try_into().unwrap();
        let span_id = self.take(SPAN_ID_LEN)?.try_into().unwrap();
        TraceContext::new(trace_id, span_id).ok_or_else(|| "a trace context of zero ids".into())
    }

    /// A count of items of at least `item` bytes each: no more than the
    /// bytes left could hold.
    fn len(&mut self, item: usize) -> Result<usize, String> {
        let len = self.u64()?;
        if len > (self.0.len() / item.max(1)) as u64 {
            return Err(format!("a count of {len} past its end"));
        }
        Ok(len as usize)
    }

    fn flag(&mut self) -> Result<bool, String> {
        match self.take(1)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!("a flag of {other}")),
        }
    }

    fn text(&mut self) -> Result<String, String> {
        let len = self.len(1)?;
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| "a name not in UTF-8".into())
    }

    fn lost(&mut self) -> Result<Lost, String> {
        Ok(Lost {
            dropped: self.u64()?,
            overwritten: self.u64()?,
        })
    }

    fn file(&mut self) -> Result<FileId, String> {
        Ok(FileId {
            dev: self.u64()?,
            ino: self.u64()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{calls, owned, rings_read_in_turn, LiveRing};
    use stapsdt::ring::format::offset;
    use stapsdt::ring::scan::ReadAt;
    use std::sync::atomic::Ordering::Relaxed;

    /// The tally handed on, as one worker hands it to the next.
    fn handed_on(tally: &Tally) -> Tally {
        let state = tally.state().unwrap();
        let again = Tally::from_state(&state).unwrap();
        assert_eq!(again.state().unwrap(), state);
        again
    }

    #[test]
    fn a_ring_rewritten_after_the_tally_was_handed_on_is_refused_by_the_next_worker() {
        let live = LiveRing::new(256, true);
        let index = live.latency_probe("index");
        let mut tally = Tally::new("ring");
        live.latencies(index, &[1000; 100]);
        assert_eq!(tally.scrape(&live).unwrap(), 100);
        let mut next = handed_on(&tally);
        // records sent back under what the first worker read: the next one
        // holds its read to the reads before the hand-off.
        let records = live.header_word(offset::RECORDS).swap(10, Relaxed);
        let err = next.scrape(&live).unwrap_err().to_string();
        assert!(
            err.contains("its counter records went back from 100 to 10"),
            "{err}"
        );
        live.header_word(offset::RECORDS).store(records, Relaxed);
        // Refused, and handed on refused: put back, it is read no more.
        let mut third = handed_on(&next);
        assert_eq!(third.refused(), Some(err.as_str()));
        live.latencies(index, &[1000; 5]);
        assert_eq!(third.scrape(&live).unwrap_err().to_string(), err);
        assert_eq!(calls(&third), owned(&[("app:index", 100)]));
    }

    #[test]
    fn a_ring_read_before_a_hand_off_that_comes_back_is_refused_after_it() {
        let (first, _second, tally) = rings_read_in_turn();
        let mut next = handed_on(&tally);
        let err = next.scrape(&first).unwrap_err();
        assert!(err.to_string().contains("it came back"), "{err}");
        assert_eq!(calls(&next), owned(&[("app:index", 15)]));
    }

    /// A source that panics once asked for a slot.
    struct PanicsInSlots<'a>(&'a LiveRing);

    impl ReadAt for PanicsInSlots<'_> {
        fn file_len(&self) -> std::io::Result<u64> {
            self.0.file_len()
        }

        fn read_at(&self, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
            let ring_offset = self.0.header_word(offset::RING_OFFSET).load(Relaxed);
            assert!(at < ring_offset, "a bug in a read");
            self.0.read_at(buf, at)
        }
    }

    #[test]
    fn a_tally_whose_scrape_panicked_is_handed_on_refusing() {
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        let mut tally = Tally::new("ring");
        live.latencies(index, &[1000; 10]);
        assert_eq!(tally.scrape(&live).unwrap(), 10);
        live.latencies(index, &[1000; 5]);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tally.scrape(&PanicsInSlots(&live))
        }));
        assert!(unwound.is_err());
        let mut next = handed_on(&tally);
        assert!(next.refused().is_some());
        assert!(next.scrape(&live).is_err());
        assert_eq!(calls(&next), owned(&[("app:index", 10)]));
    }

    #[test]
    fn a_tally_read_back_goes_on_from_where_it_was_and_counts_nothing_twice() {
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        let mut tally = Tally::new("ring");
        live.latencies(index, &[1000, 2_000_000, 5]);
        assert_eq!(tally.scrape(&live).unwrap(), 3);
        let state = tally.state().unwrap();
        let mut again = Tally::from_state(&state).unwrap();
        assert_eq!(again.state().unwrap(), state);
        assert_eq!(again.scrape(&live).unwrap(), 0);
        live.latencies(index, &[1000; 80]);
        assert_eq!(again.scrape(&live).unwrap(), 64);
        assert_eq!(calls(&again), owned(&[("app:index", 67)]));
        assert_eq!(again.lost().overwritten, 16);
        assert_eq!(again.probes()[0].latency.as_ref().unwrap().count, 67);
    }

    #[test]
    fn a_tally_of_a_ring_with_trace_contexts_hands_on_its_calls_not_its_context_records() {
        use stapsdt::ring::Maker;
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        let context = TraceContext::new([1; 16], [2; 8]).unwrap();
        let mut tally = Tally::new("ring");
        assert!(live.ring.record_context(1, Maker::new(7, 1), &context));
        for _ in 0..3 {
            assert!(live
                .ring
                .record_integer_by(index, 2, Maker::new(7, 1), 1000));
        }
        assert_eq!(tally.scrape(&live).unwrap(), 4);
        assert_eq!(calls(&tally), owned(&[("app:index", 3)]));
        let mut next = handed_on(&tally);
        assert!(live.ring.record_context(3, Maker::new(7, 2), &context));
        assert!(live
            .ring
            .record_integer_by(index, 4, Maker::new(7, 2), 1000));
        assert_eq!(next.scrape(&live).unwrap(), 2);
        assert_eq!(calls(&next), owned(&[("app:index", 4)]));
        assert_eq!(next.probes()[0].latency.as_ref().unwrap().count, 4);
        assert_eq!(next.lost().overwritten, 0);
    }

    #[test]
    fn the_next_worker_knows_the_context_the_one_before_read_and_keeps_the_exemplars() {
        use stapsdt::ring::Maker;
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        let (request, other) = (
            TraceContext::new([4; 16], [5; 8]).unwrap(),
            TraceContext::new([6; 16], [7; 8]).unwrap(),
        );
        let mut tally = Tally::new("ring");
        assert!(live.ring.record_context(1, Maker::new(7, 1), &other));
        assert!(live
            .ring
            .record_integer_by(index, 2, Maker::new(7, 1), 3000));
        // The scrape ends between a request's context record and its call.
        assert!(live.ring.record_context(3, Maker::new(8, 2), &request));
        assert_eq!(tally.scrape(&live).unwrap(), 3);
        let mut next = handed_on(&tally);
        assert!(live
            .ring
            .record_integer_by(index, 4, Maker::new(8, 2), 900_000));
        assert_eq!(next.scrape(&live).unwrap(), 1);
        let exemplars = next.probes()[0].latency.as_ref().unwrap().exemplars;
        let known: Vec<_> = exemplars
            .iter()
            .flatten()
            .map(|exemplar| (exemplar.context, exemplar.duration_ns))
            .collect();
        assert_eq!(known, [(other, 3000), (request, 900_000)]);
        assert_eq!(handed_on(&next).probes(), next.probes());
    }

    #[test]
    fn bytes_that_are_no_tally_are_refused_whatever_is_cut_or_changed() {
        use stapsdt::ring::Maker;
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        live.latencies(index, &[1000; 3]);
        // An exemplar, and a context in force, in the bytes too.
        let context = TraceContext::new([8; 16], [9; 8]).unwrap();
        assert!(live.ring.record_context(5, Maker::new(7, 1), &context));
        assert!(live
            .ring
            .record_integer_by(index, 6, Maker::new(7, 1), 2000));
        let mut tally = Tally::new("ring");
        tally.scrape(&live).unwrap();
        let exemplars = tally.probes()[0].latency.as_ref().unwrap().exemplars;
        assert_eq!(exemplars.iter().flatten().count(), 1);
        let state = tally.state().unwrap();
        for len in 0..state.len() {
            assert!(Tally::from_state(&state[..len]).is_err(), "cut at {len}");
        }
        let mut longer = state.clone();
        longer.push(0);
        assert!(Tally::from_state(&longer).is_err());
        // Every byte changed: refused, or read as some tally, never a panic.
        for at in 0..state.len() {
            let mut changed = state.clone();
            changed[at] ^= 0xff;
            let _ = Tally::from_state(&changed);
        }
        let mut huge = state.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Tally::from_state(&huge).is_err());
    }
}
