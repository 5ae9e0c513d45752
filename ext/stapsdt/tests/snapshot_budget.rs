//! Trigger snapshots within a directory's budget: however many writers
//! (threads here, each with a descriptor of its own, as processes have),
//! the directory's `.trace` files never pass its count or its bytes, and
//! what was there before (another process's, an earlier run's) counts.

#[path = "ring_support/mod.rs"]
mod ring_support;
#[path = "temp_dir/mod.rs"]
mod temp_dir;

use ring_support::{config, HeapRing};
use stapsdt::ring::{parse, Window};
use stapsdt::snapshot_file::{write_within_budget, Budget, Outcome};
use stapsdt::ArgType;
use std::path::Path;
use temp_dir::TempDir;

fn ring_of(records: u64) -> HeapRing {
    let ring = HeapRing::new(&config(1024, true));
    let probe = ring
        .add_probe("app", "slow", &[ArgType::Int64], Some(0), None)
        .unwrap();
    for time in 1..=records {
        ring.record_integer(probe, time * 1000, 7, time as i64);
    }
    ring
}

fn traces(dir: &Path) -> (u64, u64) {
    let mut held = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "trace") {
            held.0 += 1;
            held.1 += std::fs::metadata(&path).unwrap().len();
            if path.file_name().unwrap() != "earlier.trace" {
                parse(&std::fs::read(&path).unwrap()).unwrap();
            }
        }
    }
    held
}

#[test]
fn writers_at_once_never_pass_the_directorys_count() {
    let dir = TempDir::new("budget-count");
    let ring = ring_of(100);
    let budget = Budget {
        files: 5,
        bytes: u64::MAX,
    };
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..8)
            .map(|writer| {
                let (dir, ring) = (&dir.0, &ring);
                scope.spawn(move || {
                    (0..4)
                        .map(|n| {
                            let name = format!("{writer}-{n}.trace");
                            write_within_budget(dir, &name, budget, || {
                                ring.snapshot_within(Window::WHOLE)
                            })
                            .unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        writers
            .into_iter()
            .flat_map(|writer| writer.join().unwrap())
            .collect()
    });
    let written = outcomes
        .iter()
        .filter(|outcome| matches!(outcome, Outcome::Written { .. }))
        .count();
    assert_eq!(written, 5);
    assert_eq!(traces(&dir.0).0, 5);
    assert!(outcomes.contains(&Outcome::OverBudget {
        files: 5,
        bytes: traces(&dir.0).1,
        wanted: 0
    }));
}

#[test]
fn the_bytes_held_already_count_and_a_snapshot_that_would_pass_them_is_not_written() {
    let dir = TempDir::new("budget-bytes");
    // An earlier run's snapshot, and a file that is no snapshot.
    std::fs::write(dir.0.join("earlier.trace"), vec![0u8; 10_000]).unwrap();
    std::fs::write(dir.0.join("notes.txt"), vec![0u8; 100_000]).unwrap();
    let ring = ring_of(100);
    let window = Window {
        since_ns: None,
        max_records: Some(10),
    };
    let one = ring.snapshot_within(window).unwrap().len();
    let budget = Budget {
        files: 100,
        bytes: 10_000 + 2 * one + one / 2,
    };
    let mut written = 0;
    for n in 0..5 {
        let outcome = write_within_budget(&dir.0, &format!("{n}.trace"), budget, || {
            ring.snapshot_within(window)
        })
        .unwrap();
        match outcome {
            Outcome::Written { bytes, records } => {
                assert_eq!((bytes, records), (one, 10));
                written += 1;
            }
            Outcome::OverBudget {
                files,
                bytes,
                wanted,
            } => assert_eq!((files, bytes, wanted), (3, 10_000 + 2 * one, one)),
        }
    }
    assert_eq!(written, 2);
    assert_eq!(traces(&dir.0), (3, 10_000 + 2 * one));
}

#[test]
fn a_window_holds_the_newest_records_only() {
    let dir = TempDir::new("budget-window");
    let ring = ring_of(1000);
    let window = Window {
        since_ns: Some(900 * 1000),
        max_records: None,
    };
    let budget = Budget {
        files: 1,
        bytes: u64::MAX,
    };
    let outcome =
        write_within_budget(&dir.0, "w.trace", budget, || ring.snapshot_within(window)).unwrap();
    assert!(matches!(outcome, Outcome::Written { records: 101, .. }));
    let trace = parse(&std::fs::read(dir.0.join("w.trace")).unwrap()).unwrap();
    let times: Vec<u64> = trace.records.iter().map(|record| record.time_ns).collect();
    assert_eq!(times, (900..=1000).map(|t| t * 1000).collect::<Vec<_>>());
}
