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
//! the garbage collector (`rb_gc_register_address`) until they clear it:
//! a fiber's address is then never another fiber's while it is a key here.
//! Everything here runs with the GVL held (Ruby methods, and records made
//! by `Tracepoint#fire`).

use crate::recording::Recording;
use rb_sys::VALUE;
use stapsdt::ring::format::{Maker, CONTEXT_TAGS, NO_CONTEXT, UNKNOWN_CONTEXT};
use stapsdt::trace_context::TraceContext;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU32, Ordering};

/// A fiber's context: its tag and ids, and the fiber, pinned.
struct Entry {
    /// The fiber, in memory registered with the garbage collector: given
    /// back in `clear`; left to the collector when a thread ends with a
    /// context set (its thread-locals go without the GVL, which taking
    /// it off the collector's list needs), which keeps that fiber.
    fiber: &'static mut VALUE,
    tag: u32,
    context: TraceContext,
}

/// One thread's contexts.
#[derive(Default)]
struct ThreadContexts {
    /// Whether any fiber of this thread has a context: the one check a
    /// record made outside any context makes.
    any: Cell<bool>,
    entries: RefCell<Vec<Entry>>,
    /// The recording (its generation) and tag of the last context record
    /// this thread wrote.
    written: Cell<Option<(u32, u32)>>,
}

thread_local! {
    static THREAD: ThreadContexts = ThreadContexts::default();
}

/// The next tag to hand out, cycling through `CONTEXT_TAGS`.
static NEXT_TAG: AtomicU32 = AtomicU32::new(0);

fn next_tag() -> u32 {
    let span = CONTEXT_TAGS.end() - CONTEXT_TAGS.start() + 1;
    CONTEXT_TAGS.start() + NEXT_TAG.fetch_add(1, Ordering::Relaxed) % span
}

fn current_fiber() -> VALUE {
    // SAFETY: called with the GVL held (see the module docs); makes the
    // thread's root fiber object the first time, as Fiber.current does.
    unsafe { rb_sys::rb_fiber_current() }
}

/// The current fiber is in `context` from now on (replacing the one it was
/// in, if any): its next record writes a context record first.
pub fn set(context: TraceContext) {
    let fiber = current_fiber();
    THREAD.with(|thread| {
        let mut entries = thread.entries.borrow_mut();
        let tag = next_tag();
        match entries.iter_mut().find(|entry| *entry.fiber == fiber) {
            Some(entry) => {
                entry.tag = tag;
                entry.context = context;
            }
            None => {
                let pinned = Box::leak(Box::new(fiber));
                // SAFETY: the memory stays valid until it is unregistered,
                // in `clear`, before it is freed; we hold the GVL.
                unsafe { rb_sys::rb_gc_register_address(pinned) };
                entries.push(Entry {
                    fiber: pinned,
                    tag,
                    context,
                });
            }
        }
        thread.any.set(true);
    });
}

/// The current fiber is in no context from now on.
pub fn clear() {
    let fiber = current_fiber();
    THREAD.with(|thread| {
        let mut entries = thread.entries.borrow_mut();
        if let Some(at) = entries.iter().position(|entry| *entry.fiber == fiber) {
            let entry = entries.swap_remove(at);
            let pinned: *mut VALUE = entry.fiber;
            // SAFETY: registered in `set` from a leaked box, and still
            // there; once off the collector's list nothing else refers to
            // it, so the box is ours to free. We hold the GVL.
            unsafe {
                rb_sys::rb_gc_unregister_address(pinned);
                drop(Box::from_raw(pinned));
            }
        }
        thread.any.set(!entries.is_empty());
    });
}

/// The current fiber's context, if it has one.
pub fn current() -> Option<TraceContext> {
    let fiber = current_fiber();
    THREAD.with(|thread| {
        thread
            .entries
            .borrow()
            .iter()
            .find(|entry| *entry.fiber == fiber)
            .map(|entry| entry.context)
    })
}

/// Who makes a record in `recording` at `time_ns` on thread `tid`: the
/// thread, and the tag of its fiber's context, whose context record is
/// written first if this thread's last one in this recording was not it.
/// Outside any context: one thread-local read.
#[inline]
pub fn maker(recording: &Recording, time_ns: u64, tid: u32) -> Maker {
    THREAD.with(|thread| {
        if !thread.any.get() {
            return Maker::new(tid, NO_CONTEXT);
        }
        in_context(thread, recording, time_ns, tid)
    })
}

#[cold]
fn in_context(thread: &ThreadContexts, recording: &Recording, time_ns: u64, tid: u32) -> Maker {
    let fiber = current_fiber();
    let entries = thread.entries.borrow();
    let Some(entry) = entries.iter().find(|entry| *entry.fiber == fiber) else {
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
    Maker::new(tid, entry.tag)
}
