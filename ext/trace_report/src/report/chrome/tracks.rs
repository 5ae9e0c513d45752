//! What a thread's timeline holds: its calls (of latency probes), each
//! from its start (its end, when the record was made, less its latency)
//! to its end, and its stacks (of stack probes), each frame of them a run
//! from the record where it appears to the next of the thread's stack
//! records where it is gone, the frames a stack shares with the one
//! before making one run; those of the thread's last stack last until the
//! file's last record.
//!
//! Calls nest in calls and frames in frames, but a stack is recorded at
//! points in time, not around calls: a thread with both has them on two
//! tracks, its stacks on a track of their own ([`STACKS_TRACK`]).
//!
//! Spans are given in preorder (by start, the longer first, and of two
//! with the same start and end the enclosing one first), as viewers that
//! take them in order need them to nest.

use super::ticks::Ticks;
use crate::records::RecordRef;
use crate::Trace;
use stapsdt::ring::Arg;
use std::cmp::Reverse;
use std::collections::BTreeMap;

/// The bit that makes a thread's id the id of its stacks' track (no
/// thread id reaches it: Linux's are below 2^22).
pub(super) const STACKS_TRACK: u32 = 1 << 31;

pub(super) struct Span<'a> {
    pub start: Ticks,
    pub end: Ticks,
    pub kind: SpanKind<'a>,
}

pub(super) enum SpanKind<'a> {
    /// A call of a latency probe, its record.
    Call(RecordRef<'a>),
    /// A frame of a stack, its bytes in the record and how deep it is.
    Frame { name: &'a [u8], depth: usize },
}

#[derive(Default)]
pub(super) struct Thread<'a> {
    pub calls: Vec<Span<'a>>,
    pub frames: Vec<Span<'a>>,
}

/// Each thread's calls and stacks in `trace`, by thread id, in steps from
/// `origin` (a wall-clock time, ns).
pub(super) fn threads(trace: &Trace, origin: i128) -> BTreeMap<u32, Thread<'_>> {
    let offset = i128::from(trace.header.anchor_realtime_ns)
        - i128::from(trace.header.anchor_monotonic_ns)
        - origin;
    let at = |time_ns: i128| Ticks::of_ns(offset + time_ns);
    let mut threads: BTreeMap<u32, Thread<'_>> = BTreeMap::new();
    let mut open: BTreeMap<u32, Vec<(&[u8], Ticks)>> = BTreeMap::new();
    for record in &trace.records {
        let probe = &trace.probes[record.probe as usize];
        let time = i128::from(record.time_ns);
        if probe.latency_arg.is_some() {
            let calls = &mut threads.entry(record.tid).or_default().calls;
            calls.push(Span {
                start: at(began_ns(trace, &record)),
                end: at(time),
                kind: SpanKind::Call(record),
            });
        }
        if let Some(Some(Arg::Str(stack))) = probe.stack_arg.map(|arg| record.arg(arg.into())) {
            let frames = &mut threads.entry(record.tid).or_default().frames;
            let open = open.entry(record.tid).or_default();
            stack_at(frames, open, stack, at(time));
        }
    }
    let last = trace.records.iter().map(|record| record.time_ns).max();
    let end = at(i128::from(last.unwrap_or_default()));
    for (tid, mut open) in open {
        let frames = &mut threads.entry(tid).or_default().frames;
        close(frames, &mut open, 0, end);
    }
    for thread in threads.values_mut() {
        // Of two calls with the same start and end, the one recorded
        // later encloses the other (an inner call's record is made first).
        // In place, with no copy: there can be millions.
        thread.calls.sort_unstable_by_key(|span| {
            let seq = match span.kind {
                SpanKind::Call(record) => record.seq,
                SpanKind::Frame { .. } => 0,
            };
            (span.start, Reverse(span.end), Reverse(seq))
        });
        thread.frames.sort_by_key(|span| {
            let depth = match span.kind {
                SpanKind::Frame { depth, .. } => depth,
                SpanKind::Call(_) => 0,
            };
            (span.start, Reverse(span.end), depth)
        });
    }
    threads
}

/// When `record` began, on its file's clock: a call's end less its
/// latency, any other record's time.
pub(super) fn began_ns(trace: &Trace, record: &RecordRef<'_>) -> i128 {
    let time = i128::from(record.time_ns);
    let Some(arg) = trace.probes[record.probe as usize].latency_arg else {
        return time;
    };
    // The reader checked that it is an Integer; a negative latency (the
    // process fired one) lasts nothing.
    match record.arg(usize::from(arg)) {
        Some(Arg::Int(latency)) => time - i128::from(latency.max(0)),
        _ => time,
    }
}

/// Moves a thread's stack to `stack`, recorded at `time`: ends the runs
/// of the frames of the stack before that it does not share, starts its
/// own.
fn stack_at<'a>(
    frames: &mut Vec<Span<'a>>,
    open: &mut Vec<(&'a [u8], Ticks)>,
    stack: &'a [u8],
    time: Ticks,
) {
    let names = || stack.split(|&byte| byte == b';');
    let shared = open
        .iter()
        .zip(names())
        .take_while(|((open, _), name)| open == name)
        .count();
    close(frames, open, shared, time);
    if !stack.is_empty() {
        open.extend(names().skip(shared).map(|name| (name, time)));
    }
}

/// Ends the runs of `open` past the first `keep` at `end`.
fn close<'a>(
    frames: &mut Vec<Span<'a>>,
    open: &mut Vec<(&'a [u8], Ticks)>,
    keep: usize,
    end: Ticks,
) {
    while open.len() > keep {
        let depth = open.len() - 1;
        let (name, start) = open.pop().expect("more than keep frames");
        frames.push(Span {
            start,
            // Records of a thread out of time order (a clock stepped
            // back) end a run when it starts.
            end: end.max(start),
            kind: SpanKind::Frame { name, depth },
        });
    }
}
