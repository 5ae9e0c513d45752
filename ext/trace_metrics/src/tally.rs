//! A process's ring tallied across scrapes, for `static-tracing export`
//! and the Rack endpoint (docs/fleet.md): per probe, the calls read and,
//! for a latency probe, a histogram of their durations in the report's
//! power-of-two buckets (`trace_report::report::histogram`'s rule); and
//! the records lost.
//!
//! Each scrape reads the ring at a cut and moves the ring's [`Cursor`]
//! (`stapsdt::ring::cursor`, which says what is read once and what is
//! lost): a record is counted once, by the scrape that first finds it
//! whole. A tally never writes the file (it only has a [`ReadAt`]):
//! without overwrite the writer is not let reuse what was read, and the
//! process is asked for nothing. Many readers can tally one ring at once.
//! A record still not whole where the previous scrape stopped, a
//! [`Tally::with_grace`] later, was given up (or its writer stalled): the
//! scrape then takes every whole record from there to the cut, and what
//! it passes over counts as lost.
//!
//! Each bucket of a latency histogram also keeps its exemplar: the latest
//! call in it made in a known trace context (its trace and span ids, its
//! duration, when it ended), which the OpenMetrics exposition serves so
//! that a slow bucket on a dashboard leads to a request. The latest, not
//! the slowest since the last scrape: it does not depend on how often, or
//! by how many Prometheus servers, the tally is scraped.
//!
//! What a tally keeps (the cursor, the counts and buckets) is plain
//! numbers: [`Tally::state`] writes them as bytes and
//! [`Tally::from_state`] reads them back, so that the workers of one
//! server can share one tally of each ring.

use stapsdt::ring::continuity::{Continuity, Next};
use stapsdt::ring::scan::{self, FileId, Opened, Pass, ReadAt, ReadError};
use stapsdt::ring::{Context, Cursor, Header, Lost, ProbeEntry, Record, TraceError, Value};
use stapsdt::trace_context::TraceContext;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use trace_report::report::histogram::bucket_bits;

mod state;

/// Finite histogram buckets: durations below 1us, 2us, 4us... up to
/// 2^25us (33.6s); longer ones count in `+Inf` only. The bounds of
/// bpftrace's `hist()` of microseconds, which the text report prints: a
/// bucket here holds the report's bucket of the same upper bound and
/// those below it.
pub const BUCKETS: usize = 26;

/// How long a record may stay not whole where a scrape stopped before the
/// next scrape passes it over.
pub const GRACE: Duration = Duration::from_secs(1);

/// A call that stands for its bucket: one made in a known trace context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exemplar {
    pub context: TraceContext,
    pub duration_ns: i64,
    /// When its record was made (as the call ended), in nanoseconds since
    /// the Unix epoch.
    pub realtime_ns: i64,
}

/// Durations in power-of-two buckets, as Prometheus keeps a histogram.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Calls in each bucket alone (not cumulative): bucket `k` holds the
    /// durations below `2^k` microseconds that bucket `k - 1` does not.
    pub buckets: [u64; BUCKETS],
    pub count: u64,
    pub sum_ns: i128,
    /// Each bucket's latest call made in a known trace context, and past
    /// the last one (`+Inf`, at `BUCKETS`).
    pub exemplars: [Option<Exemplar>; BUCKETS + 1],
}

impl Histogram {
    pub fn observe(&mut self, nanoseconds: i64) {
        if let Some(bucket) = bucket_of(nanoseconds) {
            self.buckets[bucket] += 1;
        }
        self.count += 1;
        self.sum_ns += i128::from(nanoseconds);
    }

    /// Makes `exemplar`, a call observed after the bucket's exemplar so
    /// far, its bucket's.
    pub fn exemplify(&mut self, exemplar: Exemplar) {
        let bucket = bucket_of(exemplar.duration_ns).unwrap_or(BUCKETS);
        self.exemplars[bucket] = Some(exemplar);
    }

    /// Adds the calls of `later`, observed after these.
    fn add(&mut self, later: &Histogram) {
        for (mine, theirs) in self.buckets.iter_mut().zip(&later.buckets) {
            *mine += theirs;
        }
        self.count += later.count;
        self.sum_ns += later.sum_ns;
        for (mine, theirs) in self.exemplars.iter_mut().zip(&later.exemplars) {
            if theirs.is_some() {
                *mine = *theirs;
            }
        }
    }
}

/// The bucket of a duration, as the report buckets it (everything below
/// 1us, negative durations too, in bucket 0); None past the last bound.
pub fn bucket_of(nanoseconds: i64) -> Option<usize> {
    let bits = bucket_bits(nanoseconds).max(0) as usize;
    (bits < BUCKETS).then_some(bits)
}

/// A bucket's upper bound, in microseconds.
pub fn bucket_bound_micros(bucket: usize) -> u64 {
    1 << bucket
}

/// One probe's figures, summed over every ring the tally read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeTally {
    pub provider: String,
    pub name: String,
    pub calls: u64,
    /// For a latency probe.
    pub latency: Option<Histogram>,
}

/// The ring the tally reads now, and where it is in it.
#[derive(Debug)]
struct RingRead {
    /// What its reads found, which each read must agree with
    /// (`stapsdt::ring::continuity`).
    continuity: Continuity,
    cursor: Cursor,
    /// Each probe id's index in `Tally::probes`.
    probes: Vec<usize>,
    /// Why it is read no more: it contradicted what its reads before found.
    refused: Option<String>,
}

/// How many of the files of rings read before the current one a tally
/// remembers, so that one that comes back is not read again from its
/// first record.
const LEFT_FILES: usize = 1024;

/// Calls and durations found by one scrape, by probe id: added to the
/// tally only once the scrape has read its ring without error, so that a
/// scrape that fails counts nothing twice.
#[derive(Default)]
struct Found {
    calls: Vec<u64>,
    latencies: Vec<Option<Histogram>>,
}

impl Found {
    fn new(probes: &[ProbeEntry]) -> Found {
        Found {
            calls: vec![0; probes.len()],
            latencies: probes
                .iter()
                .map(|probe| probe.latency_arg.map(|_| Histogram::default()))
                .collect(),
        }
    }

    fn take(&mut self, header: &Header, probes: &[ProbeEntry], record: &Record) {
        if record.is_context() {
            // Not a call: its thread's trace context changed.
            return;
        }
        let id = record.probe as usize;
        self.calls[id] += 1;
        if let (Some(arg), Some(histogram)) = (probes[id].latency_arg, &mut self.latencies[id]) {
            // The reader checked that a latency argument is an Integer.
            if let Some(&Value::Int(duration)) = record.args.get(usize::from(arg)) {
                histogram.observe(duration);
                if let Context::Known(context) = record.context {
                    let realtime = header.realtime_ns(record.time_ns);
                    // A hostile anchor may put it out of range: no exemplar.
                    if let Ok(realtime_ns) = i64::try_from(realtime) {
                        histogram.exemplify(Exemplar {
                            context,
                            duration_ns: duration,
                            realtime_ns,
                        });
                    }
                }
            }
        }
    }
}

/// A process's ring tallied across scrapes: counters that only grow for
/// as long as the tally lives, across the rings the process replaces its
/// ring with.
#[derive(Debug)]
pub struct Tally {
    name: String,
    grace: Duration,
    probes: Vec<ProbeTally>,
    by_label: HashMap<(String, String), usize>,
    ring: Option<RingRead>,
    /// Lost in the rings read before the current one.
    lost_before: Lost,
    /// The files of the rings read before the current one, newest last.
    left: VecDeque<FileId>,
    /// Set while a scrape runs. One that never returned (a panic unwound
    /// out of it, and its caller went on) leaves it set: what that scrape
    /// had taken of the tally's state is not known, so the tally reads no
    /// more rather than count anything twice.
    scraping: bool,
}

/// Why a tally whose scrape never returned reads no more.
const BROKEN: &str = "a scrape of this ring ended in a bug in the reader; it is read no more, \
                      so that nothing counts twice";

impl Tally {
    /// A tally of the ring named `name` in messages, read from its oldest
    /// record at the first scrape.
    pub fn new(name: &str) -> Tally {
        Tally::with_grace(name, GRACE)
    }

    /// As [`Tally::new`], passing over a record not whole after `grace`.
    pub fn with_grace(name: &str, grace: Duration) -> Tally {
        Tally {
            name: name.to_owned(),
            grace,
            probes: Vec::new(),
            by_label: HashMap::new(),
            ring: None,
            lost_before: Lost::default(),
            left: VecDeque::new(),
            scraping: false,
        }
    }

    /// Reads the records added to the ring in `source` since the last
    /// scrape, up to its cut; returns how many. Reads only.
    pub fn scrape(&mut self, source: &(impl ReadAt + ?Sized)) -> Result<u64, TraceError> {
        self.scrape_at(source, monotonic_ns())
    }

    /// The last read of a ring whose process exited: every record still
    /// whole from where the last scrape stopped to the end, whether or
    /// not the ones before it were committed (one its writer was killed
    /// in the middle of is lost, the others are counted). Reads only; held
    /// to the reads before as a scrape is.
    pub fn finish(&mut self, source: &(impl ReadAt + ?Sized)) -> Result<u64, TraceError> {
        self.guarded(|tally| {
            tally.read_on(source, |cursor, opened, visit| {
                let read = cursor.follow(opened, source, &mut *visit)?;
                Ok(read + cursor.read_rest(opened, source, visit)?)
            })
        })
    }

    /// [`Tally::scrape`] at `now_ns` on `CLOCK_MONOTONIC`.
    ///
    /// Each read must agree with the reads of the ring before it
    /// (`stapsdt::ring::continuity`): a ring that contradicts them is
    /// refused, and read no more; what was counted of it stays, and the
    /// tally goes on with the next ring its process makes.
    pub fn scrape_at(
        &mut self,
        source: &(impl ReadAt + ?Sized),
        now_ns: u64,
    ) -> Result<u64, TraceError> {
        let grace_ns = u64::try_from(self.grace.as_nanos()).unwrap_or(u64::MAX);
        self.guarded(|tally| {
            tally.read_on(source, |cursor, opened, visit| {
                cursor.follow_within(opened, source, now_ns, grace_ns, visit)
            })
        })
    }

    /// `read`, unless a read before never returned; marked as running
    /// while it runs, so that one that never returns leaves the tally
    /// refusing.
    fn guarded(
        &mut self,
        read: impl FnOnce(&mut Tally) -> Result<u64, TraceError>,
    ) -> Result<u64, TraceError> {
        if self.scraping {
            return Err(TraceError::Format(format!("{}: {BROKEN}", self.name)));
        }
        self.scraping = true;
        let read = read(self);
        self.scraping = false;
        read
    }

    /// A read of the ring in `source` by `read` (which moves the cursor
    /// and visits the records it takes), held to the reads before and
    /// added to the tally.
    fn read_on<S: ReadAt + ?Sized>(
        &mut self,
        source: &S,
        read: impl FnOnce(&mut Cursor, &Opened, &mut dyn FnMut(Record, &[u8])) -> Result<u64, ReadError>,
    ) -> Result<u64, TraceError> {
        let file = source.file_id().map_err(|err| self.error(err.into()))?;
        if let Some(ring) = &self.ring {
            if let (Some(refused), Some(_)) = (&ring.refused, file) {
                if ring.continuity.file() == file {
                    return Err(TraceError::Format(refused.clone()));
                }
            }
        }
        let opened = scan::open(source, Pass::Live).map_err(|err| self.error(err))?;
        let next = match &self.ring {
            None => Next::Other,
            Some(ring) => match (ring.continuity.next(&opened, file), &ring.refused) {
                (Ok(Next::Other), _) => Next::Other,
                (_, Some(refused)) => return Err(TraceError::Format(refused.clone())),
                (Err(err), None) => return Err(self.refuse(err.into())),
                (Ok(Next::Same), None) => Next::Same,
            },
        };
        if next == Next::Other {
            self.replace_ring(&opened, file)?;
        }
        let mut ring = self.ring.take().expect("a ring was just set");
        let mut found = Found::new(&opened.probes);
        let read = read(&mut ring.cursor, &opened, &mut |record, _| {
            found.take(&opened.header, &opened.probes, &record)
        });
        let read = match read {
            Ok(read) => read,
            Err(err) => {
                self.ring = Some(ring);
                return Err(self.error(err));
            }
        };
        ring.continuity.advance(&opened);
        let known = ring.probes.len();
        for probe in &ring.continuity.probes()[known..] {
            ring.probes.push(self.probe_index(probe));
        }
        for (id, &index) in ring.probes.iter().enumerate().take(found.calls.len()) {
            let tally = &mut self.probes[index];
            tally.calls += found.calls[id];
            if let Some(histogram) = &found.latencies[id] {
                tally
                    .latency
                    .get_or_insert_with(Histogram::default)
                    .add(histogram);
            }
        }
        self.ring = Some(ring);
        Ok(read)
    }

    /// Goes on in the ring `opened` from `file`, which replaced the one
    /// read so far (or is the first): from its oldest record, unless it is
    /// a ring read before that came back.
    fn replace_ring(&mut self, opened: &Opened, file: Option<FileId>) -> Result<(), TraceError> {
        if let Some(file) = file {
            if self.left.contains(&file) {
                return Err(TraceError::Format(format!(
                    "{}: the ring is one read before, which another had replaced: it came back, \
                     and is not read again",
                    self.name
                )));
            }
        }
        if let Some(ring) = self.ring.take() {
            self.lost_before = self.lost_before + ring.cursor.lost;
            if let Some(left) = ring.continuity.file() {
                if self.left.len() == LEFT_FILES {
                    self.left.pop_front();
                }
                self.left.push_back(left);
            }
        }
        self.ring = Some(RingRead {
            continuity: Continuity::of(opened, file),
            cursor: Cursor::default(),
            probes: Vec::new(),
            refused: None,
        });
        Ok(())
    }

    /// The ring is read no more, for `err`; the error, named.
    fn refuse(&mut self, err: scan::ReadError) -> TraceError {
        let err = self.error(err);
        if let Some(ring) = &mut self.ring {
            ring.refused = Some(err.to_string());
        }
        err
    }

    fn probe_index(&mut self, probe: &ProbeEntry) -> usize {
        let key = (probe.provider.clone(), probe.name.clone());
        if let Some(&index) = self.by_label.get(&key) {
            return index;
        }
        self.probes.push(ProbeTally {
            provider: probe.provider.clone(),
            name: probe.name.clone(),
            calls: 0,
            latency: None,
        });
        self.by_label.insert(key, self.probes.len() - 1);
        self.probes.len() - 1
    }

    fn error(&self, err: scan::ReadError) -> TraceError {
        TraceError::of(&self.name, err)
    }

    /// The ring's name, as messages give it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every probe seen, in the order the rings' tables first named them.
    pub fn probes(&self) -> &[ProbeTally] {
        &self.probes
    }

    /// Records lost in every ring read so far.
    pub fn lost(&self) -> Lost {
        let now = self
            .ring
            .as_ref()
            .map(|ring| ring.cursor.lost)
            .unwrap_or_default();
        self.lost_before + now
    }

    /// Why the current ring is read no more, if it is not: it contradicted
    /// what the reads before found. What was counted of it stays.
    pub fn refused(&self) -> Option<&str> {
        if self.scraping {
            return Some(BROKEN);
        }
        self.ring.as_ref().and_then(|ring| ring.refused.as_deref())
    }

    /// The sequence number of the next slot to read in the current ring.
    pub fn position(&self) -> u64 {
        self.ring.as_ref().map_or(0, |ring| ring.cursor.position)
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock a cursor's times are on.
fn monotonic_ns() -> u64 {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, which lives
    // for the call; CLOCK_MONOTONIC is always there on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut time) };
    time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{calls, owned, rings_read_in_turn, LiveRing};
    use stapsdt::ring::format::{first_stamp, offset};
    use stapsdt::ring::Arg;
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn counts_each_call_once_across_scrapes() {
        let live = LiveRing::new(1024, false);
        let index = live.latency_probe("index");
        let query = live.text_probe("query");
        let mut tally = Tally::new("ring");
        live.latencies(index, &[500, 1500, 3000]);
        assert!(live.ring.record(query, 1, 7, &[Arg::Str(&[b'q'; 100])]));
        assert_eq!(tally.scrape(&live).unwrap(), 4);
        assert_eq!(tally.scrape(&live).unwrap(), 0);
        live.latencies(index, &[2_000_000]);
        let later = live.latency_probe("later");
        live.latencies(later, &[10]);
        assert_eq!(tally.scrape(&live).unwrap(), 2);

        assert_eq!(
            calls(&tally),
            owned(&[("app:index", 4), ("app:query", 1), ("app:later", 1)])
        );
        let histogram = tally.probes()[0].latency.as_ref().unwrap();
        assert_eq!(histogram.count, 4);
        assert_eq!(histogram.sum_ns, 500 + 1500 + 3000 + 2_000_000);
        assert_eq!(tally.probes()[1].latency, None);
        assert_eq!(tally.lost(), Lost::default());
        // Nothing written: a ring without overwrite keeps its tail.
        assert_eq!(live.ring.counters().tail, 0);
    }

    #[test]
    fn buckets_durations_as_the_report_does() {
        let durations: Vec<i64> = vec![
            -5000,
            -999,
            0,
            999,
            1000,
            1999,
            2000,
            1_048_575,
            1_048_576,
            33_554_431_999,
            33_554_432_000,
            i64::MAX,
        ];
        let mut histogram = Histogram::default();
        for &duration in &durations {
            histogram.observe(duration);
        }
        // bpftrace's hist(arg0 / 1000), as the report's test writes it
        // out: "< 0" and [0] are both below 1us; bucket k, [2^(k-1), 2^k)us,
        // counts under its upper bound.
        let mut expected = [0; BUCKETS];
        for &duration in &durations {
            let micros = duration / 1000;
            let bits = if micros < 0 {
                0
            } else {
                (64 - micros.leading_zeros()) as usize
            };
            if bits < BUCKETS {
                expected[bits] += 1;
            }
        }
        assert_eq!(histogram.buckets, expected);
        assert_eq!(histogram.buckets[0], 4);
        assert_eq!(histogram.buckets[BUCKETS - 1], 1);
        assert_eq!(histogram.count, durations.len() as u64);
    }

    #[test]
    fn keeps_each_buckets_latest_call_in_a_known_context_as_its_exemplar() {
        use stapsdt::ring::format::UNKNOWN_CONTEXT;
        use stapsdt::ring::Maker;
        let live = LiveRing::new(256, true);
        let index = live.latency_probe("index");
        let (first, second, third) = (
            TraceContext::new([1; 16], [1; 8]).unwrap(),
            TraceContext::new([2; 16], [2; 8]).unwrap(),
            TraceContext::new([3; 16], [3; 8]).unwrap(),
        );
        let mut tally = Tally::new("ring");
        assert!(live.ring.record_context(10, Maker::new(7, 1), &first));
        assert!(live
            .ring
            .record_integer_by(index, 11, Maker::new(7, 1), 500));
        assert!(live
            .ring
            .record_integer_by(index, 12, Maker::new(7, 1), 1500));
        assert!(live.ring.record_context(13, Maker::new(8, 2), &second));
        assert!(live
            .ring
            .record_integer_by(index, 14, Maker::new(8, 2), 1600));
        // Outside any context, and in one whose context record is not in
        // the ring: calls counted, never an exemplar.
        assert!(live.ring.record_integer(index, 15, 9, 1700));
        assert!(live
            .ring
            .record_integer_by(index, 16, Maker::new(9, UNKNOWN_CONTEXT), 1800));
        assert!(live
            .ring
            .record_integer_by(index, 17, Maker::new(9, 5), 40_000_000_000));
        tally.scrape(&live).unwrap();
        let exemplar = |tally: &Tally, bucket: usize| {
            tally.probes()[0].latency.as_ref().unwrap().exemplars[bucket]
                .map(|exemplar| (exemplar.context, exemplar.duration_ns, exemplar.realtime_ns))
        };
        let realtime = |monotonic: i64| 1_700_000_000_000_000_000 + monotonic;
        assert_eq!(exemplar(&tally, 0), Some((first, 500, realtime(11))));
        assert_eq!(exemplar(&tally, 1), Some((second, 1600, realtime(14))));
        assert_eq!(exemplar(&tally, BUCKETS), None);
        let known = tally.probes()[0].latency.as_ref().unwrap().exemplars;
        assert_eq!(known.iter().flatten().count(), 2);

        // A later call in a bucket takes its place; the others stay.
        assert!(live.ring.record_context(20, Maker::new(7, 3), &third));
        assert!(live
            .ring
            .record_integer_by(index, 21, Maker::new(7, 3), 1999));
        assert!(live
            .ring
            .record_integer_by(index, 22, Maker::new(7, 3), 40_000_000_000));
        tally.scrape(&live).unwrap();
        assert_eq!(exemplar(&tally, 0), Some((first, 500, realtime(11))));
        assert_eq!(exemplar(&tally, 1), Some((third, 1999, realtime(21))));
        assert_eq!(
            exemplar(&tally, BUCKETS),
            Some((third, 40_000_000_000, realtime(22)))
        );
        assert_eq!(tally.probes()[0].calls, 8);
    }

    #[test]
    fn counts_what_a_flight_ring_overwrote_between_scrapes_as_lost_exactly() {
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        let query = live.text_probe("query");
        let mut tally = Tally::new("ring");
        live.latencies(index, &[1000; 10]);
        assert_eq!(tally.scrape(&live).unwrap(), 10);

        // 200 one-slot records through 64 slots: the oldest 136 are gone.
        live.latencies(index, &[1000; 200]);
        assert_eq!(tally.scrape(&live).unwrap(), 64);
        assert_eq!(calls(&tally), owned(&[("app:index", 74), ("app:query", 0)]));
        assert_eq!(
            tally.lost(),
            Lost {
                dropped: 0,
                overwritten: 136
            }
        );

        // Records of several slots: what was overwritten is counted from
        // the records counter, not from the slots passed over.
        for _ in 0..50 {
            assert!(live.ring.record(query, 1, 7, &[Arg::Str(&[b'x'; 30])]));
        }
        let read = tally.scrape(&live).unwrap();
        let counters = live.ring.counters();
        assert_eq!(read, 64 / 2);
        assert_eq!(tally.lost().overwritten, counters.records - 74 - read);
        assert_eq!(tally.lost().overwritten, 136 + 50 - 32);

        live.latencies(index, &[1000; 5]);
        assert_eq!(tally.scrape(&live).unwrap(), 5);
        assert_eq!(
            calls(&tally),
            owned(&[("app:index", 79), ("app:query", 32)])
        );
        assert_eq!(tally.lost().overwritten, 154);
    }

    #[test]
    fn waits_for_a_record_being_written_and_counts_it_once() {
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        let mut tally = Tally::new("ring");
        live.latencies(index, &[1000; 3]);
        // The second record as its writer leaves it before writing: stamp 0.
        let stamp = live.stamp(1).swap(0, Relaxed);
        assert_eq!(tally.scrape(&live).unwrap(), 1);
        assert_eq!(tally.position(), 1);
        assert_eq!(tally.lost(), Lost::default());
        live.stamp(1).store(stamp, Relaxed);
        assert_eq!(tally.scrape(&live).unwrap(), 2);
        assert_eq!(calls(&tally), owned(&[("app:index", 3)]));
        assert_eq!(tally.lost(), Lost::default());
    }

    #[test]
    fn passes_over_a_record_given_up_once_its_grace_is_over() {
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        let mut tally = Tally::with_grace("ring", Duration::from_secs(3600));
        live.latencies(index, &[1000; 70]);
        assert_eq!(tally.scrape(&live).unwrap(), 64);
        // A record of the next lap whose writer gave it up: its slot keeps
        // the stamp of the record a lap older, which was read.
        live.latencies(index, &[1000; 3]);
        let given_up = live.head() - 2;
        live.stamp(given_up)
            .store(first_stamp(given_up - 64, 1), Relaxed);

        let start = 1_000_000_000;
        assert_eq!(tally.scrape_at(&live, start).unwrap(), 1);
        assert_eq!(tally.scrape_at(&live, start).unwrap(), 0);
        assert_eq!(tally.lost().overwritten, 6);
        // A grace later, the record after it is read and it is lost.
        let later = start + 3600 * 1_000_000_000;
        assert_eq!(tally.scrape_at(&live, later).unwrap(), 1);
        assert_eq!(calls(&tally), owned(&[("app:index", 66)]));
        assert_eq!(tally.lost().overwritten, 7);
        assert_eq!(tally.position(), live.head());
        live.latencies(index, &[1000; 2]);
        assert_eq!(tally.scrape_at(&live, later).unwrap(), 2);
        assert_eq!(tally.lost().overwritten, 7);
    }

    #[test]
    fn counts_dropped_records_from_the_ring() {
        let live = LiveRing::new(64, false);
        let index = live.latency_probe("index");
        let mut tally = Tally::new("ring");
        for _ in 0..70 {
            live.ring.record_integer(index, 1, 7, 1000);
        }
        assert_eq!(tally.scrape(&live).unwrap(), 64);
        assert_eq!(
            tally.lost(),
            Lost {
                dropped: 6,
                overwritten: 0
            }
        );
    }

    #[test]
    fn goes_on_counting_in_the_ring_that_replaces_the_one_it_read() {
        let first = LiveRing::made_at(64, true, 1);
        let index = first.latency_probe("index");
        let mut tally = Tally::new("ring");
        first.latencies(index, &[1000; 100]);
        tally.scrape(&first).unwrap();
        assert_eq!(tally.lost().overwritten, 36);

        let second = LiveRing::made_at(64, true, 2);
        let other = second.text_probe("other");
        let index = second.latency_probe("index");
        second.latencies(index, &[1000; 5]);
        assert!(second.ring.record(other, 1, 7, &[Arg::Str(b"x")]));
        assert_eq!(tally.scrape(&second).unwrap(), 6);
        assert_eq!(calls(&tally), owned(&[("app:index", 69), ("app:other", 1)]));
        assert_eq!(tally.lost().overwritten, 36);
        assert_eq!(tally.probes()[0].latency.as_ref().unwrap().count, 69);
    }

    #[test]
    fn a_scrape_that_fails_counts_nothing() {
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        let mut tally = Tally::new("my.ring");
        live.latencies(index, &[1000; 3]);
        // A probe id the table does not have: the file breaks the format
        // there, after two records were found.
        let probe_and_tid = live.slot_word(2, 2).swap(99, Relaxed);
        let err = tally.scrape(&live).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("my.ring: record 2 in slot 2: probe id"),
            "{err}"
        );
        assert_eq!(tally.probes(), []);
        live.slot_word(2, 2).store(probe_and_tid, Relaxed);
        assert_eq!(tally.scrape(&live).unwrap(), 3);
        assert_eq!(calls(&tally), owned(&[("app:index", 3)]));
    }

    /// Sets the header's word at `at` to `value` for the length of `read`,
    /// then puts it back.
    fn with_word<T>(live: &LiveRing, at: usize, value: u64, read: impl FnOnce() -> T) -> T {
        let before = live.header_word(at).swap(value, Relaxed);
        let result = read();
        live.header_word(at).store(before, Relaxed);
        result
    }

    #[test]
    fn a_table_that_shrinks_under_the_tally_is_refused_and_nothing_counts_twice() {
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        let query = live.text_probe("query");
        let mut tally = Tally::new("my.ring");
        live.latencies(index, &[1000; 100]);
        assert!(live.ring.record(query, 1, 7, &[Arg::Str(b"q")]));
        assert_eq!(tally.scrape(&live).unwrap(), 64);
        let counted = calls(&tally);
        let lost = tally.lost();
        // table_used (the word's low half) down to the first entry.
        let used = live.header_word(offset::TABLE_USED).load(Relaxed);
        let err = with_word(&live, offset::TABLE_USED, 24, || tally.scrape(&live)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "my.ring: the ring was rewritten since it was last read: its probe table shrank \
             from 2 entries to 1 (a table only grows); it is read no more"
        );
        assert!(tally.refused().is_some());
        // Put back, and written on: the ring stays refused, and what was
        // counted of it stays as it was.
        assert_eq!(live.header_word(offset::TABLE_USED).load(Relaxed), used);
        live.latencies(index, &[1000; 10]);
        for _ in 0..3 {
            assert_eq!(
                tally.scrape(&live).unwrap_err().to_string(),
                err.to_string()
            );
        }
        assert_eq!(calls(&tally), counted);
        assert_eq!(tally.lost(), lost);
    }

    #[test]
    fn a_ring_whose_header_or_counters_are_rewritten_is_refused_not_read_again() {
        for (at, value, what) in [
            (
                offset::ANCHOR_MONOTONIC_NS,
                5,
                "its header field anchor_monotonic_ns changed from 0 to 5",
            ),
            (
                offset::MAX_STRING,
                16,
                "its header field max_string changed from 1024 to 16",
            ),
            (offset::HEAD, 3, "its counter head went back from 100 to 3"),
            (
                offset::RECORDS,
                0,
                "its counter records went back from 100 to 0",
            ),
        ] {
            let live = LiveRing::new(256, true);
            let index = live.latency_probe("index");
            let mut tally = Tally::new("ring");
            live.latencies(index, &[1000; 100]);
            assert_eq!(tally.scrape(&live).unwrap(), 100);
            let err = with_word(&live, at, value, || tally.scrape(&live)).unwrap_err();
            assert!(err.to_string().contains(what), "{what:?} not in {err}");
            // Neither the rewritten ring nor the ring put back is read again:
            // the calls stay counted once.
            assert!(with_word(&live, at, value, || tally.scrape(&live)).is_err());
            assert!(tally.scrape(&live).is_err());
            assert_eq!(calls(&tally), owned(&[("app:index", 100)]), "{what}");
        }
    }

    #[test]
    fn a_ring_read_before_that_comes_back_is_refused() {
        let (first, second, mut tally) = rings_read_in_turn();
        let err = tally.scrape(&first).unwrap_err();
        assert!(err.to_string().contains("it came back"), "{err}");
        assert_eq!(calls(&tally), owned(&[("app:index", 15)]));
        // The ring that replaced it is read on.
        // Its probe 0 is app:index.
        second.latencies(0, &[1000; 2]);
        assert_eq!(tally.scrape(&second).unwrap(), 2);
    }

    /// A source that panics once asked for bytes past `from`.
    struct PanicsPast<'a> {
        live: &'a LiveRing,
        from: u64,
    }

    impl ReadAt for PanicsPast<'_> {
        fn file_len(&self) -> std::io::Result<u64> {
            self.live.file_len()
        }

        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            assert!(offset < self.from, "a bug in a read");
            self.live.read_at(buf, offset)
        }
    }

    #[test]
    fn a_scrape_that_panics_leaves_the_tally_refusing_rather_than_counting_twice() {
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        let mut tally = Tally::new("ring");
        live.latencies(index, &[1000; 10]);
        assert_eq!(tally.scrape(&live).unwrap(), 10);
        live.latencies(index, &[1000; 5]);
        let ring_offset = live.header_word(offset::RING_OFFSET).load(Relaxed);
        let panicking = PanicsPast {
            live: &live,
            from: ring_offset,
        };
        let unwound =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tally.scrape(&panicking)));
        assert!(unwound.is_err());
        assert_eq!(tally.refused(), Some(BROKEN));
        assert_eq!(
            tally.scrape(&live).unwrap_err().to_string(),
            format!("ring: {BROKEN}")
        );
        assert_eq!(calls(&tally), owned(&[("app:index", 10)]));
    }

    #[test]
    fn finishing_a_dead_rings_reads_every_whole_record_past_one_its_writer_was_killed_in() {
        let live = LiveRing::new(64, true);
        let index = live.latency_probe("index");
        let mut tally = Tally::new("ring");
        live.latencies(index, &[1000; 5]);
        assert_eq!(tally.scrape(&live).unwrap(), 5);
        // Then 10 more, one of them never finished: its writer was killed.
        live.latencies(index, &[1000; 10]);
        live.stamp(8).store(0, Relaxed);
        assert_eq!(tally.scrape(&live).unwrap(), 3);
        assert_eq!(tally.finish(&live).unwrap(), 6);
        assert_eq!(calls(&tally), owned(&[("app:index", 14)]));
        assert_eq!(tally.lost().overwritten, 1);
        assert_eq!(tally.position(), live.head());
    }

    #[test]
    fn finishing_a_ring_rewritten_since_the_last_scrape_is_refused_and_counts_nothing_twice() {
        let live = LiveRing::new(256, true);
        let index = live.latency_probe("index");
        let mut tally = Tally::new("ring");
        live.latencies(index, &[1000; 20]);
        assert_eq!(tally.scrape(&live).unwrap(), 20);
        live.latencies(index, &[1000; 5]);
        let err = with_word(&live, offset::RECORDS, 3, || tally.finish(&live)).unwrap_err();
        assert!(
            err.to_string()
                .contains("its counter records went back from 20 to 3"),
            "{err}"
        );
        assert!(tally.finish(&live).is_err());
        assert_eq!(calls(&tally), owned(&[("app:index", 20)]));
    }
}
