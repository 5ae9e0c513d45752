//! A tally as bytes, and back: what the workers of one server share in a
//! file (StaticTracing::Rack::Metrics), so that whichever worker answers a
//! scrape goes on from the same cursors and counts, and the counters are
//! the same whichever answers. Plain numbers, little-endian, versioned;
//! bytes that are not a tally this version wrote are refused, never
//! trusted (a probe index out of range, a length past the end).

use super::{Histogram, Identity, ProbeTally, RingRead, Tally};
use stapsdt::ring::{Cursor, Lost};
use std::collections::HashMap;
use std::time::Duration;

const MAGIC: &[u8; 8] = b"STTALLY\x01";

impl Tally {
    /// The tally as bytes ([`Tally::from_state`] reads them back).
    pub fn state(&self) -> Vec<u8> {
        let mut out = Out(MAGIC.to_vec());
        out.text(&self.name);
        out.u64(u64::try_from(self.grace.as_nanos()).unwrap_or(u64::MAX));
        out.lost(self.lost_before);
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
            }
        }
        out.flag(self.ring.is_some());
        if let Some(ring) = &self.ring {
            let identity = &ring.identity;
            out.u64(identity.anchor_monotonic_ns);
            out.u64(identity.anchor_realtime_ns as u64);
            out.u64(identity.slot_count);
            out.flag(identity.overwrite);
            out.u64(identity.pid);
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
        }
        out.0
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
            let identity = Identity {
                anchor_monotonic_ns: input.u64()?,
                anchor_realtime_ns: input.u64()? as i64,
                slot_count: input.u64()?,
                overwrite: input.flag()?,
                pid: input.u64()?,
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
            Some(RingRead {
                identity,
                cursor,
                probes: ring_probes,
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{calls, owned, LiveRing};

    #[test]
    fn a_tally_read_back_goes_on_from_where_it_was_and_counts_nothing_twice() {
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        let mut tally = Tally::new("ring");
        live.latencies(index, &[1000, 2_000_000, 5]);
        assert_eq!(tally.scrape(&live).unwrap(), 3);
        let state = tally.state();
        let mut again = Tally::from_state(&state).unwrap();
        assert_eq!(again.state(), state);
        assert_eq!(again.scrape(&live).unwrap(), 0);
        live.latencies(index, &[1000; 80]);
        assert_eq!(again.scrape(&live).unwrap(), 64);
        assert_eq!(calls(&again), owned(&[("app:index", 67)]));
        assert_eq!(again.lost().overwritten, 16);
        assert_eq!(again.probes()[0].latency.as_ref().unwrap().count, 67);
    }

    #[test]
    fn bytes_that_are_no_tally_are_refused_whatever_is_cut_or_changed() {
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        live.latencies(index, &[1000; 3]);
        let mut tally = Tally::new("ring");
        tally.scrape(&live).unwrap();
        let state = tally.state();
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
