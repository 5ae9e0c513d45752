//! Which fiber runs on this thread: the fiber object, which
//! `trace_contexts` pins while it keeps the fiber's contexts, and a key
//! that is cheaper to read, by which it finds them, and which answers the
//! question every record made in a context asks (is this still the fiber
//! of the thread's last record?).
//!
//! The key is the address of the running fiber's execution context: Ruby
//! keeps it in its thread-local `ruby_current_ec`, which every fiber switch
//! sets before the resumed fiber runs any code (its pending interrupts
//! included). Reading it is one load through the variable's address, found
//! once per thread, where `rb_fiber_current` is a call through the PLT and
//! a dynamic thread-local lookup: about half of what a record in a context
//! costs more than one outside. The context is embedded in the fiber's own
//! memory, so while a fiber object lives (those whose keys are kept are
//! pinned) no other fiber has its key.
//!
//! Ruby 3.1 exports the variable by name. Later ones do not, but it is
//! still one of the two or three words of libruby's thread-local block,
//! and it differs in each of two new fibers and outside them, and is back
//! once they ended, by what it is: where exactly one word there does so,
//! that word is it (were another word to pass too, neither is taken).
//! Either way, the check runs once, with two fibers (`decide`); where no
//! word passes it, the key is the fiber object itself.

use magnus::rb_sys::protect;
use rb_sys::VALUE;
use std::cell::Cell;
use std::ffi::{c_int, c_void, CStr};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The fiber running on this thread. Call with the GVL held: it makes the
/// thread's root fiber object the first time, as `Fiber.current` does.
pub fn current() -> VALUE {
    // SAFETY: the callers hold the GVL (see `trace_contexts`).
    unsafe { rb_sys::rb_fiber_current() }
}

/// Where a thread's instance of the word that names its running fiber is.
#[derive(Clone, Copy, Debug)]
enum Slot {
    /// `ruby_current_ec`, by name.
    Exported,
    /// A word of the thread-local block of the object that defines
    /// `rb_fiber_current` (libruby, or the program itself): its `dlopen`
    /// handle, and the word's index.
    InBlock { handle: usize, word: usize },
}

impl Slot {
    /// This thread's instance of the word.
    fn of_this_thread(self) -> Option<NonNull<usize>> {
        match self {
            // SAFETY: a lookup by a NUL-terminated name; for a thread-local
            // symbol glibc gives the calling thread's instance.
            Slot::Exported => NonNull::new(unsafe {
                libc::dlsym(libc::RTLD_DEFAULT, c"ruby_current_ec".as_ptr())
            })
            .map(NonNull::cast),
            Slot::InBlock { handle, word } => {
                let block = tls_block(handle)?;
                // SAFETY: `word` is within the block's size, which
                // `ruby_tls` read from the object's own TLS header.
                Some(unsafe { block.add(word) })
            }
        }
    }
}

/// How fibers are keyed: by the word a slot holds, or (None) by the fiber
/// object; unset until the first context is set (`decide`).
static KEYS: OnceLock<Option<Slot>> = OnceLock::new();
/// Whether a thread took on `decide`'s work.
static DECIDING: AtomicBool = AtomicBool::new(false);

/// Works out, once, how fibers are keyed. Call with the GVL held, before
/// the first key is read, with nothing of `trace_contexts` borrowed: the
/// first time, it runs two fibers. Never waits: while it runs, Ruby may
/// switch threads (or run a trap handler) at a fiber switch, and a thread
/// that sets a context then keys its fibers by their objects (see
/// [`KeyReader`]), where waiting with the GVL held would never end.
pub fn decide() {
    if KEYS.get().is_none() && !DECIDING.swap(true, Ordering::AcqRel) {
        let _ = KEYS.set(find_slot());
    }
}

/// How fibers are keyed here, for the benchmark's table, or None before
/// the first context is set.
pub fn key_kind() -> Option<&'static str> {
    KEYS.get().map(|slot| match slot {
        Some(Slot::Exported) => "execution context (ruby_current_ec, exported)",
        Some(Slot::InBlock { .. }) => {
            "execution context (ruby_current_ec, in libruby's thread-local block)"
        }
        None => "fiber object (rb_fiber_current)",
    })
}

/// The object that defines `rb_fiber_current`: a `dlopen` handle to it,
/// and how many words its thread-local block has (at most `MAX_WORDS`).
fn ruby_tls() -> Option<(usize, usize)> {
    struct Found {
        code: usize,
        name: Option<std::ffi::CString>,
        main: bool,
        size: usize,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _: libc::size_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: glibc hands each loaded object's header, valid for this
        // call; `data` is the `Found` below, which nothing else touches.
        let (info, found) = unsafe { (&*info, &mut *data.cast::<Found>()) };
        // SAFETY: `dlpi_phnum` headers start at `dlpi_phdr`.
        let headers =
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        let base = info.dlpi_addr as usize;
        let holds_code = headers.iter().any(|header| {
            header.p_type == libc::PT_LOAD
                && (base + header.p_vaddr as usize
                    ..base + (header.p_vaddr + header.p_memsz) as usize)
                    .contains(&found.code)
        });
        if !holds_code {
            return 0;
        }
        found.size = headers
            .iter()
            .find(|header| header.p_type == libc::PT_TLS)
            .map_or(0, |header| header.p_memsz as usize);
        // SAFETY: a NUL-terminated name, "" for the program itself.
        let name = (!info.dlpi_name.is_null()).then(|| unsafe { CStr::from_ptr(info.dlpi_name) });
        found.main = name.is_none_or(|name| name.is_empty());
        found.name = name.map(CStr::to_owned);
        1
    }
    let mut found = Found {
        code: rb_sys::rb_fiber_current as *const () as usize,
        name: None,
        main: false,
        size: 0,
    };
    // SAFETY: `each` only reads what glibc hands it and writes `found`.
    unsafe { libc::dl_iterate_phdr(Some(each), std::ptr::from_mut(&mut found).cast()) };
    let words = (found.size / size_of::<usize>()).min(MAX_WORDS);
    if words == 0 {
        return None;
    }
    // SAFETY: the program itself (a null name), or an object loaded
    // already by its own name (RTLD_NOLOAD); the handle is never closed.
    let handle = unsafe {
        match (&found.name, found.main) {
            (_, true) => libc::dlopen(std::ptr::null(), libc::RTLD_LAZY),
            (Some(name), false) => libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD),
            (None, false) => std::ptr::null_mut(),
        }
    };
    (!handle.is_null()).then_some((handle as usize, words))
}

/// The most words of a thread-local block looked at.
const MAX_WORDS: usize = 8;

/// This thread's instance of the thread-local block of the object `handle`
/// is a handle to.
fn tls_block(handle: usize) -> Option<NonNull<usize>> {
    let mut block: *mut c_void = std::ptr::null_mut();
    // SAFETY: a handle `dlopen` gave, never closed; the answer is one
    // pointer, written into `block`.
    let status = unsafe {
        libc::dlinfo(
            handle as *mut c_void,
            libc::RTLD_DI_TLS_DATA,
            std::ptr::from_mut(&mut block).cast(),
        )
    };
    if status == 0 {
        NonNull::new(block.cast())
    } else {
        None
    }
}

/// What the words looked at held in each fiber of the check: outside, in
/// the first fiber, in the second.
static SEEN: [[AtomicUsize; MAX_WORDS]; 3] =
    [const { [const { AtomicUsize::new(0) }; MAX_WORDS] }; 3];
/// Which of `SEEN` a fiber of the check fills.
static FILLING: AtomicUsize = AtomicUsize::new(0);
/// What the check reads, for the fibers it runs.
static CHECKED: OnceLock<(Slot, usize)> = OnceLock::new();

/// Reads the checked words into `SEEN[FILLING]`.
fn take_snapshot() {
    let Some(&(slot, words)) = CHECKED.get() else {
        return;
    };
    let Some(first) = slot.of_this_thread() else {
        return;
    };
    let row = &SEEN[FILLING.load(Ordering::Relaxed)];
    for (word, seen) in row.iter().enumerate().take(words) {
        // SAFETY: this thread's instance, `words` long (`ruby_tls`); Ruby
        // writes it only on this thread, which is here now.
        seen.store(
            unsafe { first.add(word).as_ptr().read() },
            Ordering::Relaxed,
        );
    }
}

/// The word, among those `CHECKED` names, that names fibers apart: in each
/// of two new fibers, one after the other, another value than in the other
/// and outside them, none 0, and outside again once they ended.
fn find_slot() -> Option<Slot> {
    unsafe extern "C" fn in_fiber(
        _: VALUE,
        _: VALUE,
        _: c_int,
        _: *const VALUE,
        _: VALUE,
    ) -> VALUE {
        take_snapshot();
        rb_sys::Qnil as VALUE
    }
    let candidates = if Slot::Exported.of_this_thread().is_some() {
        (Slot::Exported, 1)
    } else {
        let (handle, words) = ruby_tls()?;
        (Slot::InBlock { handle, word: 0 }, words)
    };
    let &(slot, words) = CHECKED.get_or_init(|| candidates);
    FILLING.store(0, Ordering::Relaxed);
    take_snapshot();
    // SAFETY: two fibers of a C function that reads thread-locals and
    // returns nil, each resumed once on this thread, whose GVL we hold; an
    // exception (no memory for a fiber) is caught by `protect`. The fibers
    // stay on this stack, so both live until the check ends.
    let ran = protect(|| unsafe {
        let first = rb_sys::rb_fiber_new(Some(in_fiber), rb_sys::Qnil as VALUE);
        let second = rb_sys::rb_fiber_new(Some(in_fiber), rb_sys::Qnil as VALUE);
        FILLING.store(1, Ordering::Relaxed);
        rb_sys::rb_fiber_resume(first, 0, std::ptr::null());
        FILLING.store(2, Ordering::Relaxed);
        rb_sys::rb_fiber_resume(second, 0, std::ptr::null());
        std::hint::black_box([first, second]);
        rb_sys::Qnil as VALUE
    });
    let outside_before = SEEN[0].each_ref().map(|seen| seen.load(Ordering::Relaxed));
    FILLING.store(0, Ordering::Relaxed);
    take_snapshot();
    let naming: Vec<usize> = (0..words)
        .filter(|&word| {
            let [outside, first, second] =
                SEEN.each_ref().map(|row| row[word].load(Ordering::Relaxed));
            outside == outside_before[word]
                && ![outside, first, second].contains(&0)
                && outside != first
                && outside != second
                && first != second
        })
        .collect();
    match (ran, naming.as_slice(), slot) {
        (Ok(_), [_], Slot::Exported) => Some(Slot::Exported),
        (Ok(_), &[word], Slot::InBlock { handle, .. }) => Some(Slot::InBlock { handle, word }),
        _ => None,
    }
}

/// One thread's way to the key of the fiber running on it: its instance
/// of the word that names fibers, or the fiber object, chosen the first
/// time and kept, so that a thread's keys are all of one kind.
#[derive(Default)]
pub struct KeyReader {
    /// None until chosen; then the word, or None for the fiber object.
    word: Cell<Option<Option<NonNull<usize>>>>,
}

impl KeyReader {
    /// The key of the fiber running on this thread: among live fibers, its
    /// own. Call with the GVL held, on the thread this reader belongs to,
    /// after `decide`.
    #[inline]
    pub fn current(&self) -> usize {
        match self.word.get().unwrap_or_else(|| self.choose()) {
            // SAFETY: this thread's instance of the word (a reader is a
            // thread-local's part), which Ruby writes only on this thread:
            // not while this runs on it.
            Some(word) => unsafe { word.as_ptr().read() },
            None => current() as usize,
        }
    }

    /// The word, where `decide` found one and this thread has it; the
    /// fiber object otherwise, also while `decide` is still at work.
    #[cold]
    fn choose(&self) -> Option<NonNull<usize>> {
        let word = KEYS.get().copied().flatten().and_then(Slot::of_this_thread);
        self.word.set(Some(word));
        word
    }
}
