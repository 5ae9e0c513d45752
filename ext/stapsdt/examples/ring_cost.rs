//! What a record costs written from Rust into the recorder's ring, the
//! clock read included (as LTTng-UST reads its clock for every event): the
//! figure `rake bench` sets beside LTTng-UST's event and a recorded Ruby
//! `fire(Integer)` (bench/lttng.rb).
//!
//! ```text
//! cargo run --release -p stapsdt --example ring_cost -- SLOTS_BYTES
//! ```
//!
//! The ring is made as a recording makes it (`RingFile::create`: in
//! memory, every page reserved and faulted in), in flight mode, with one
//! probe of one Integer. Records fill three quarters of its first lap,
//! timed; then it is filled until it has wrapped twice, and as many
//! records are timed again. Times are this thread's CPU time. Prints one
//! JSON line: ns a record on the first lap and once wrapped, the clock
//! read alone, and the process's resident memory (KiB) after each.

use stapsdt::ring::RingConfig;
use stapsdt::ring_file::RingFile;
use stapsdt::state_file::publish_state;
use stapsdt::stub_dir::candidates;
use stapsdt::ArgType;
use std::hint::black_box;

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid out-pointer; both clocks used here exist.
    unsafe { libc::clock_gettime(clock, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// ns a call of `f` takes, over `count` calls, by this thread's CPU time.
fn per_call(count: u64, mut f: impl FnMut(u64)) -> f64 {
    let start = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID);
    for index in 0..count {
        f(index);
    }
    (clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) - start) as f64 / count as f64
}

/// This process's resident memory in KiB (`VmRSS`).
fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

fn main() {
    let slots_bytes: u64 = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(64 << 20);
    publish_state(b"{}", &candidates()).expect("a stub directory for the state file");
    let resident_before = resident_kib();
    let config = RingConfig::for_size(slots_bytes, true).expect("a valid ring size");
    let file = RingFile::create(&config).unwrap_or_else(|err| panic!("no ring: {err}"));
    let ring = file.ring();
    let probe = ring
        .add_probe("bench", "value", &[ArgType::Int64], None, None)
        .expect("room for a probe");
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    let slots = config.slot_count;
    let timed = slots / 4 * 3;
    let mut record = |value: u64| {
        let now = clock_ns(libc::CLOCK_MONOTONIC);
        black_box(ring.record_integer(probe, now, tid, value as i64));
    };

    let first_lap = per_call(timed, &mut record);
    let resident_first_lap = resident_kib();
    per_call(2 * slots - timed, &mut record);
    let wrapped = per_call(timed, &mut record);
    let resident_wrapped = resident_kib();
    let clock = per_call(timed, |_| {
        black_box(clock_ns(libc::CLOCK_MONOTONIC));
    });
    let counters = ring.counters();
    println!(
        "{{\"slots\": {slots}, \"records_per_sample\": {timed}, \"first_lap_ns\": {first_lap:.3}, \
         \"wrapped_ns\": {wrapped:.3}, \"clock_ns\": {clock:.3}, \"records\": {}, \
         \"resident_before_kib\": {resident_before}, \"resident_first_lap_kib\": {resident_first_lap}, \
         \"resident_wrapped_kib\": {resident_wrapped}, \"ring\": \"{}\"}}",
        counters.records,
        file.path().display()
    );
}
