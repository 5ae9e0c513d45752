//! How the property tests run their cases, for every test file that has
//! some: `PROPTEST_CASES=n` runs more (under Miri, pass it through with
//! `MIRIFLAGS=-Zmiri-env-forward=PROPTEST_CASES`), and the seed of a
//! failing case is saved next to the test file, to be replayed first.

use proptest::test_runner::{Config as ProptestConfig, FailurePersistence, RngAlgorithm};

pub fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: persistence(),
        // Unoptimized, the default ChaCha doubles the run: a case draws
        // thousands of values.
        rng_algorithm: RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    }
}

// The default (next to a `lib.rs`) finds none above `tests/` and says so on
// every run.
#[cfg(not(miri))]
fn persistence() -> Option<Box<dyn FailurePersistence>> {
    Some(Box::new(
        proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
    ))
}

// Miri's isolation refuses file access.
#[cfg(miri)]
fn persistence() -> Option<Box<dyn FailurePersistence>> {
    None
}
