//! The trace context each fiber is in, as the recorder writes it: a
//! context set in a fiber gets a tag (see `stapsdt::ring::format::Maker`)
//! that every record the fiber makes carries, and a context record that
//! ties the tag to the trace and span ids, written into the ring before
//! the first record that needs it.
//!
//! A context record is written when a thread's records change tag within a
//! recording: when a context is set, when another fiber with another
//! context runs on the thread, and for a context set before the recording
//! started (its thread's first record in this recording writes it). The
//! reader keeps, per thread, the latest context record's tag, so that a
//! record whose context record it did not read is "context unknown", never
//! another's. A record made outside any context costs one thread-local
//! read more than before, and no byte.
//!
//! What is kept per thread holds the fibers that set a context, pinned for
//! the garbage collector (`rb_gc_register_address`) until they clear it,
//! by their keys (see `fibers`): a fiber's key is then never another
//! fiber's while it is one here.
//! Everything here runs with the GVL held (Ruby methods, and records made
//! by `Tracepoint#fire`).

use crate::fibers::{self, KeyReader};
use crate::recording::Recording;
use rb_sys::VALUE;
use stapsdt::ring::format::{Maker, CONTEXT_TAGS, NO_CONTEXT, UNKNOWN_CONTEXT};
use stapsdt::trace_context::TraceContext;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU32, Ordering};

/// A context pushed on a fiber: the token that pops it, its tag, its ids.
#[derive(Clone, Copy)]
struct Pushed {
    token: u64,
    tag: u32,
    context: TraceContext,
}

/// A fiber's contexts, innermost last, and the fiber, pinned.
struct Entry {
    /// The fiber, in memory registered with the garbage collector. An
    /// entry whose stack is empty stays, so that a thread serving request
    /// after request in its one fiber registers it once; past
    /// `KEPT_EMPTY` of them a thread gives one back. A thread that ends
    /// leaves its entries to the collector (its thread-locals go without
    /// the GVL, which taking them off the collector's list needs), which
    /// keeps those fibers.
    fiber: &'static mut VALUE,
    /// The fiber's key, which finding its entry compares.
    key: usize,
    stack: Vec<Pushed>,
}

/// Entries with an empty stack a thread keeps (see [`Entry`]).
const KEPT_EMPTY: usize = 8;

impl Entry {
    /// Takes the fiber off the collector's list and frees its memory.
    fn give_back(self) {
        let pinned: *mut VALUE = self.fiber;
        // SAFETY: registered in `push` from a leaked box, and still there;
        // once off the collector's list nothing else refers to it, so the
        // box is ours to free. We hold the GVL.
        unsafe {
            rb_sys::rb_gc_unregister_address(pinned);
            drop(Box::from_raw(pinned));
        }
    }
}

/// One thread's id and contexts: one thread-local, read once a record.
#[derive(Default)]
struct ThreadContexts {
    /// The thread's id, and the fork count it was read at (a thread id
    /// read before a fork is not the child's): see [`ThreadContexts::tid`].
    tid: Cell<Option<(u32, u32)>>,
    /// How many contexts the fibers of this thread are in, together:
    /// whether it is 0 is the one check a record made outside any context
    /// makes.
    depth: Cell<usize>,
    /// The key (see `fibers`) of the fiber whose context this thread's
    /// last record was made in, and its tag, while that context's record is
    /// the thread's last written: the next record of that fiber needs no
    /// lookup. A fiber in a context is pinned, so no other has its key.
    hot: Cell<Option<(usize, u32)>>,
    fiber_key: KeyReader,
    entries: RefCell<Vec<Entry>>,
    /// The recording (its generation) and tag of the last context record
    /// this thread wrote.
    written: Cell<Option<(u32, u32)>>,
    /// This thread's number (from 1) in the process's line, and its
    /// contexts pushed so far: a token is both.
    serial: Cell<u32>,
    pushed: Cell<u32>,
    /// The contexts popped last, by token, so that one cleared twice is
    /// named in the error: see [`PopError::Popped`].
    popped: [Cell<Option<(u64, TraceContext)>>; POPPED_KEPT],
}

/// How many popped contexts a thread remembers (see `popped`).
const POPPED_KEPT: usize = 8;

thread_local! {
    static THREAD: ThreadContexts = ThreadContexts::default();
}

/// The next tag to hand out, cycling through `CONTEXT_TAGS`.
static NEXT_TAG: AtomicU32 = AtomicU32::new(0);
/// The last thread serial handed out.
static SERIALS: AtomicU32 = AtomicU32::new(0);

fn next_tag() -> u32 {
    let span = CONTEXT_TAGS.end() - CONTEXT_TAGS.start() + 1;
    CONTEXT_TAGS.start() + NEXT_TAG.fetch_add(1, Ordering::Relaxed) % span
}

impl ThreadContexts {
    /// The thread's id, from the kernel once per thread and fork.
    #[inline]
    fn tid(&self) -> u32 {
        let forks = crate::recording::forks();
        match self.tid.get() {
            Some((seen_at, tid)) if seen_at == forks => tid,
            _ => {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() } as u32;
                self.tid.set(Some((forks, tid)));
                tid
            }
        }
    }

    /// `pushed` contexts more and `popped` fewer: the fiber of the
    /// thread's last record may no longer be in the context it was.
    fn changed(&self, pushed: usize, popped: usize) {
        self.depth.set(self.depth.get() + pushed - popped);
        self.hot.set(None);
    }

    fn serial(&self) -> u32 {
        if self.serial.get() == 0 {
            self.serial.set(
                SERIALS
                    .fetch_add(1, Ordering::Relaxed)
                    .wrapping_add(1)
                    .max(1),
            );
        }
        self.serial.get()
    }

    fn token(&self) -> u64 {
        let pushed = self.pushed.get().wrapping_add(1);
        self.pushed.set(pushed);
        u64::from(self.serial()) << 32 | u64::from(pushed)
    }

    fn remember_popped(&self, popped: &Pushed) {
        self.popped[popped.token as usize % POPPED_KEPT].set(Some((popped.token, popped.context)));
    }

    /// Why `token`, of this thread and on no fiber's stack, pops nothing.
    fn gone(&self, token: u64) -> PopError {
        if token as u32 == 0 || token as u32 > self.pushed.get() {
            return PopError::NeverSet;
        }
        let kept = self.popped[token as usize % POPPED_KEPT].get();
        PopError::Popped(
            kept.filter(|(kept, _)| *kept == token)
                .map(|(_, context)| context),
        )
    }
}

/// Why a context could not be popped.
#[derive(Debug, PartialEq, Eq)]
pub enum PopError {
    /// Pushed on another thread (or the token is no thread's).
    OtherThread,
    /// Pushed on another fiber of this thread: this one.
    OtherFiber(TraceContext),
    /// Popped already: this one, if the thread still remembers it.
    Popped(Option<TraceContext>),
    /// No context of this thread was ever pushed with the token.
    NeverSet,
    /// Contexts pushed after it (innermost last) are still there: with
    /// `unwind`, they were popped too; without, nothing changed.
    Inner {
        context: TraceContext,
        inner: Vec<TraceContext>,
    },
}

/// Puts the current fiber in `context` (inside the one it was in, if any):
/// its next record writes a context record first. Returns the token that
/// pops it.
pub fn push(context: TraceContext) -> u64 {
    push_keyed(context).0
}

/// [`push`], also returning the current fiber's key, which [`pop_on`]
/// takes.
pub fn push_keyed(context: TraceContext) -> (u64, usize) {
    fibers::decide();
    THREAD.with(|thread| {
        let key = thread.fiber_key.current();
        let token = thread.token();
        let pushed = Pushed {
            token,
            tag: next_tag(),
            context,
        };
        let mut entries = thread.entries.borrow_mut();
        match entries.iter_mut().find(|entry| entry.key == key) {
            Some(entry) => entry.stack.push(pushed),
            None => {
                let empty = entries
                    .iter()
                    .filter(|entry| entry.stack.is_empty())
                    .count();
                if empty >= KEPT_EMPTY {
                    if let Some(at) = entries.iter().position(|entry| entry.stack.is_empty()) {
                        entries.swap_remove(at).give_back();
                    }
                }
                let pinned = Box::leak(Box::new(fibers::current()));
                // SAFETY: the memory stays valid until it is unregistered,
                // in `pop`, before it is freed; we hold the GVL.
                unsafe { rb_sys::rb_gc_register_address(pinned) };
                entries.push(Entry {
                    fiber: pinned,
                    key,
                    stack: vec![pushed],
                });
            }
        }
        thread.changed(1, 0);
        (token, key)
    })
}

/// Pops the context `token` names from the current fiber, which is then in
/// the one it was in before (if any, returned). Contexts pushed after it
/// and still there are an error: popped too with `unwind`, else nothing
/// changes.
pub fn pop(token: u64, unwind: bool) -> Result<Option<TraceContext>, PopError> {
    fibers::decide();
    THREAD.with(|thread| pop_in(thread, thread.fiber_key.current(), token, unwind))
}

/// [`pop`], given the key of the fiber that pushed it, as [`push_keyed`]
/// returned it.
pub fn pop_on(key: usize, token: u64, unwind: bool) -> Result<Option<TraceContext>, PopError> {
    THREAD.with(|thread| pop_in(thread, key, token, unwind))
}

fn pop_in(
    thread: &ThreadContexts,
    key: usize,
    token: u64,
    unwind: bool,
) -> Result<Option<TraceContext>, PopError> {
    if token >> 32 != u64::from(thread.serial()) {
        return Err(PopError::OtherThread);
    }
    let mut entries = thread.entries.borrow_mut();
    // The usual clear: the innermost context of the fiber clearing it.
    if let Some(entry) = entries.iter_mut().find(|entry| entry.key == key) {
        if entry
            .stack
            .last()
            .is_some_and(|pushed| pushed.token == token)
        {
            if let Some(popped) = entry.stack.pop() {
                thread.remember_popped(&popped);
            }
            thread.changed(0, 1);
            return Ok(entry.stack.last().map(|pushed| pushed.context));
        }
    }
    let found = entries.iter().enumerate().find_map(|(index, entry)| {
        let at = entry
            .stack
            .iter()
            .rposition(|pushed| pushed.token == token)?;
        Some((index, at))
    });
    let Some((index, at)) = found else {
        return Err(thread.gone(token));
    };
    let entry = &mut entries[index];
    let popped = entry.stack[at];
    if entry.key != key {
        return Err(PopError::OtherFiber(popped.context));
    }
    let inner: Vec<TraceContext> = entry.stack[at + 1..]
        .iter()
        .map(|pushed| pushed.context)
        .collect();
    if !inner.is_empty() && !unwind {
        return Err(PopError::Inner {
            context: popped.context,
            inner,
        });
    }
    let drained = entry.stack.len() - at;
    for gone in entry.stack.drain(at..) {
        thread.remember_popped(&gone);
    }
    let now = entry.stack.last().map(|pushed| pushed.context);
    thread.changed(0, drained);
    if inner.is_empty() {
        Ok(now)
    } else {
        Err(PopError::Inner {
            context: popped.context,
            inner,
        })
    }
}

/// The current fiber's context, if it has one.
pub fn current() -> Option<TraceContext> {
    fibers::decide();
    THREAD.with(|thread| {
        let key = thread.fiber_key.current();
        thread
            .entries
            .borrow()
            .iter()
            .find(|entry| entry.key == key)
            .and_then(|entry| entry.stack.last())
            .map(|pushed| pushed.context)
    })
}

/// Who makes a record in `recording` at `time_ns`: this thread, and the
/// tag of its fiber's context, whose context record is written first if
/// this thread's last one in this recording was not it. Outside any
/// context: the one thread-local read the thread id takes anyway; in the
/// context of the fiber's last record, the current fiber's key more (a
/// load, see `fibers`).
///
/// The fiber's key is read on every record in a context: a counter bumped
/// by a `RUBY_EVENT_FIBER_SWITCH` hook would be cheaper, but Ruby runs a
/// resumed fiber's pending interrupts (trap handlers, finalizers) before
/// it fires that event, and a record made there would carry the context
/// of the fiber before.
#[inline]
pub fn maker(recording: &Recording, time_ns: u64) -> Maker {
    THREAD.with(|thread| {
        let tid = thread.tid();
        if thread.depth.get() == 0 {
            return Maker::new(tid, NO_CONTEXT);
        }
        let key = thread.fiber_key.current();
        match thread.hot.get() {
            Some((hot, tag))
                if hot == key && thread.written.get() == Some((recording.generation(), tag)) =>
            {
                Maker::new(tid, tag)
            }
            _ => in_context(thread, recording, time_ns, tid, key),
        }
    })
}

#[cold]
fn in_context(
    thread: &ThreadContexts,
    recording: &Recording,
    time_ns: u64,
    tid: u32,
    key: usize,
) -> Maker {
    let entries = thread.entries.borrow();
    let Some(entry) = entries
        .iter()
        .find(|entry| entry.key == key)
        .and_then(|entry| entry.stack.last())
    else {
        return Maker::new(tid, NO_CONTEXT);
    };
    let wanted = (recording.generation(), entry.tag);
    if thread.written.get() != Some(wanted) {
        let maker = Maker::new(tid, entry.tag);
        if !recording
            .ring()
            .record_context(time_ns, maker, &entry.context)
        {
            // Not in the ring: the record's context is unknown to a reader.
            return Maker::new(tid, UNKNOWN_CONTEXT);
        }
        thread.written.set(Some(wanted));
    }
    thread.hot.set(Some((key, entry.tag)));
    Maker::new(tid, entry.tag)
}
