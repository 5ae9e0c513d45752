//! A state machine over the tally, the reader that reads one ring again
//! and again: its process records, adds probes, and rewrites words of its
//! ring's header (a table that shrinks, a string limit lowered, an anchor
//! moved, counters sent back) and puts them back, between scrapes. Whatever
//! it does, a scrape never panics, nothing is counted that was not
//! recorded, nothing counted is taken back, a refused ring's counts stay,
//! and a ring that was never rewritten is counted whole.

use crate::exposition::{exposition, Format};
use crate::tally::Tally;
use crate::testing::{calls, LiveRing};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngAlgorithm};
use stapsdt::ring::format::offset;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;

/// The header words a process may rewrite: each is one the reader relies on.
const WORDS: [usize; 8] = [
    offset::TABLE_USED,
    offset::MAX_STRING,
    offset::ANCHOR_MONOTONIC_NS,
    offset::ANCHOR_REALTIME_NS,
    offset::SLOT_COUNT,
    offset::HEAD,
    offset::RECORDS,
    offset::DROPPED,
];

#[derive(Clone, Debug)]
enum Step {
    /// `count` calls of the probe at `probe` among those added.
    Call {
        probe: Index,
        count: u16,
    },
    AddProbe,
    Scrape,
    /// The word at `WORDS[word]` made `value` of what it holds.
    Rewrite {
        word: Index,
        value: Value,
    },
    /// Every word rewritten put back as it was.
    PutBack,
}

#[derive(Clone, Copy, Debug)]
enum Value {
    Zero,
    Less(u64),
    More(u64),
    Half,
    Any(u64),
}

impl Value {
    fn of(self, was: u64) -> u64 {
        match self {
            Value::Zero => 0,
            Value::Less(by) => was.wrapping_sub(by),
            Value::More(by) => was.wrapping_add(by),
            Value::Half => was / 2,
            Value::Any(value) => value,
        }
    }
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Zero),
        (1u64..64).prop_map(Value::Less),
        (1u64..64).prop_map(Value::More),
        Just(Value::Half),
        any::<u64>().prop_map(Value::Any),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (any::<Index>(), 1u16..40).prop_map(|(probe, count)| Step::Call { probe, count }),
        1 => Just(Step::AddProbe),
        4 => Just(Step::Scrape),
        2 => (any::<Index>(), value()).prop_map(|(word, value)| Step::Rewrite { word, value }),
        2 => Just(Step::PutBack),
    ]
}

/// The ring, what its process recorded, and the words it holds rewritten.
struct Process {
    live: LiveRing,
    probes: Vec<(u32, String)>,
    recorded: HashMap<String, u64>,
    rewritten: Vec<(usize, u64)>,
    ever_rewritten: bool,
}

impl Process {
    fn new() -> Process {
        let live = LiveRing::new(256, false);
        let first = live.latency_probe("p0");
        Process {
            live,
            probes: vec![(first, "app:p0".to_owned())],
            recorded: HashMap::new(),
            rewritten: Vec::new(),
            ever_rewritten: false,
        }
    }

    /// Whatever the process does, its own writer writes only the ring as it
    /// made it: what it rewrites is put back first.
    fn act(&mut self, step: &Step) {
        match step {
            Step::Call { probe, count } => {
                self.put_back();
                let (id, label) = probe.get(&self.probes).clone();
                for _ in 0..*count {
                    if self.live.ring.record_integer(id, 1, 7, 1000) {
                        *self.recorded.entry(label.clone()).or_default() += 1;
                    }
                }
            }
            Step::AddProbe => {
                self.put_back();
                let name = format!("p{}", self.probes.len());
                if let Ok(id) = self.live.ring.add_probe(
                    "app",
                    &name,
                    &[stapsdt::ArgType::Int64],
                    Some(0),
                    None,
                ) {
                    self.probes.push((id, format!("app:{name}")));
                }
            }
            Step::Rewrite { word, value } => {
                let at = *word.get(&WORDS);
                let word = self.live.header_word(at);
                let was = word.load(Relaxed);
                word.store(value.of(was), Relaxed);
                if !self.rewritten.iter().any(|&(done, _)| done == at) {
                    self.rewritten.push((at, was));
                }
                self.ever_rewritten |= value.of(was) != was;
            }
            Step::PutBack => self.put_back(),
            Step::Scrape => {}
        }
    }

    fn put_back(&mut self) {
        for (at, was) in self.rewritten.drain(..).rev() {
            self.live.header_word(at).store(was, Relaxed);
        }
    }
}

fn run(steps: &[Step]) -> Result<(), TestCaseError> {
    let mut process = Process::new();
    let mut tally = Tally::new("ring");
    let mut counted: HashMap<String, u64> = HashMap::new();
    for step in steps {
        process.act(step);
        if !matches!(step, Step::Scrape) {
            continue;
        }
        let refused_before = tally.refused().is_some();
        let read = tally.scrape(&process.live);
        let now: HashMap<String, u64> = calls(&tally).into_iter().collect();
        for (label, &calls) in &now {
            let recorded = process.recorded.get(label).copied().unwrap_or(0);
            prop_assert!(
                calls <= recorded,
                "{label}: {calls} counted, {recorded} recorded"
            );
            let before = counted.get(label).copied().unwrap_or(0);
            prop_assert!(calls >= before, "{label}: {before} counted, then {calls}");
            if refused_before {
                prop_assert_eq!(calls, before, "{} counted on in a refused ring", label);
            }
        }
        if !process.ever_rewritten {
            prop_assert!(read.is_ok(), "{:?}", read);
            for (label, &recorded) in &process.recorded {
                prop_assert_eq!(now.get(label).copied().unwrap_or(0), recorded);
            }
        }
        if let Err(err) = &read {
            prop_assert!(!err.to_string().is_empty());
        }
        let text = exposition(&[(42, &tally)], Format::Prometheus);
        let marked = text.contains("static_tracing_ring_refused{pid=\"42\"} ");
        prop_assert!(marked, "no refused gauge in {}", text);
        counted = now;
    }
    Ok(())
}

proptest! {
    #![proptest_config(Config {
        cases: 96,
        rng_algorithm: RngAlgorithm::XorShift,
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn a_tally_of_a_ring_its_process_rewrites_never_panics_nor_counts_twice(
        steps in proptest::collection::vec(step(), 1..40)
    ) {
        run(&steps)?;
    }
}
