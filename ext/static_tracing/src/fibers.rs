//! Which fiber runs on this thread: the fiber object, which
//! `trace_contexts` pins while it keeps the fiber's contexts, and a key
//! that is cheaper to read, by which it finds them, and which answers the
//! question every record made in a context asks (is this still the fiber
//! of the thread's last record?).
//!
//! The key is the address of the running fiber's execution context: Ruby
//! keeps it in the thread-local `ruby_current_ec`, which every fiber
//! switch sets before the resumed fiber runs any code (its pending
//! interrupts included). Reading it is one load through a slot address
//! looked up once per thread, where `rb_fiber_current` is a call through
//! the PLT and a dynamic thread-local lookup: about half of what a record
//! in a context costs more than one outside. The context is embedded in
//! the fiber's own memory, so while a fiber object lives (those whose keys
//! are kept are pinned) no other fiber has its key. That this holds in the running Ruby is checked once, by running a
//! fiber (`decide`); where it does not, or the symbol is not there, the
//! key is the fiber object itself.

use magnus::rb_sys::protect;
use rb_sys::VALUE;
use std::cell::Cell;
use std::ffi::c_int;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The fiber running on this thread. Call with the GVL held: it makes the
/// thread's root fiber object the first time, as `Fiber.current` does.
pub fn current() -> VALUE {
    // SAFETY: the callers hold the GVL (see `trace_contexts`).
    unsafe { rb_sys::rb_fiber_current() }
}

/// Whether a fiber's key is its execution context's address; unset until
/// the first context is set (`decide`).
static KEYED_BY_CONTEXT: OnceLock<bool> = OnceLock::new();

/// Works out, once, how fibers are keyed. Call with the GVL held, before
/// the first key is read. Runs a fiber the first time.
pub fn decide() {
    KEYED_BY_CONTEXT.get_or_init(contexts_name_fibers);
}

/// How fibers are keyed here, for the benchmark's table: "execution
/// context" or "fiber object", or None before the first context is set.
pub fn key_kind() -> Option<&'static str> {
    KEYED_BY_CONTEXT.get().map(|&by_context| {
        if by_context {
            "execution context"
        } else {
            "fiber object"
        }
    })
}

/// This thread's `ruby_current_ec`, where Ruby exports it.
fn context_slot() -> Option<NonNull<usize>> {
    // SAFETY: a lookup by a NUL-terminated name; for a thread-local symbol
    // glibc gives the calling thread's instance.
    NonNull::new(unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"ruby_current_ec".as_ptr()) }.cast())
}

/// Whether `ruby_current_ec` names fibers apart: another address inside a
/// new fiber, and the first one again once that fiber has ended.
fn contexts_name_fibers() -> bool {
    static INSIDE: AtomicUsize = AtomicUsize::new(0);
    unsafe extern "C" fn read_inside(
        _: VALUE,
        _: VALUE,
        _: c_int,
        _: *const VALUE,
        _: VALUE,
    ) -> VALUE {
        if let Some(slot) = context_slot() {
            // SAFETY: this thread's instance of the variable; Ruby writes
            // it only on this thread, which is here now.
            INSIDE.store(unsafe { slot.as_ptr().read() }, Ordering::Relaxed);
        }
        rb_sys::Qnil as VALUE
    }
    let Some(slot) = context_slot() else {
        return false;
    };
    // SAFETY: as in `read_inside`.
    let read = || unsafe { slot.as_ptr().read() };
    let outside = read();
    // SAFETY: a fiber of a C function that reads a thread-local and
    // returns nil, resumed once on this thread, whose GVL we hold; an
    // exception (no memory for a fiber) is caught by `protect`.
    let ran = protect(|| unsafe {
        let fiber = rb_sys::rb_fiber_new(Some(read_inside), rb_sys::Qnil as VALUE);
        rb_sys::rb_fiber_resume(fiber, 0, std::ptr::null())
    });
    let inside = INSIDE.load(Ordering::Relaxed);
    ran.is_ok() && outside != 0 && inside != 0 && inside != outside && read() == outside
}

/// One thread's way to the key of the fiber running on it: the slot of its
/// `ruby_current_ec`, looked up the first time.
#[derive(Default)]
pub struct KeyReader {
    slot: Cell<Option<NonNull<usize>>>,
}

impl KeyReader {
    /// The key of the fiber running on this thread: among live fibers, its
    /// own. Call with the GVL held, on the thread this reader belongs to.
    #[inline]
    pub fn current(&self) -> usize {
        if KEYED_BY_CONTEXT.get() == Some(&true) {
            if let Some(slot) = self.slot.get().or_else(|| self.look_up()) {
                // SAFETY: this thread's `ruby_current_ec` (a reader is a
                // thread-local's part), which Ruby writes only on this
                // thread: not while this runs on it.
                return unsafe { slot.as_ptr().read() };
            }
        }
        current() as usize
    }

    #[cold]
    fn look_up(&self) -> Option<NonNull<usize>> {
        let slot = context_slot();
        self.slot.set(slot);
        slot
    }
}
