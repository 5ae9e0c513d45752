//! The Ruby stack, for StackTracer and for finding a caller's `self`.

use magnus::{rb_sys::FromRawValue, RString, Ruby, Value};
use rb_sys::{rb_debug_inspector_t, VALUE};
use std::ffi::{c_long, c_void};

/// Most frames read from the stack; deeper frames are left out (the
/// outermost ones, since the innermost are kept).
const MAX_FRAMES: usize = 512;

/// The file name method wrappers are compiled under (by
/// lib/static_tracing/method_wrapper.rb, as `Native::WRAPPER_FILE`): their
/// frames are not the application's, so folded stacks leave them out. A
/// file name, not a module name: wrapper modules are anonymous, so that no
/// constant keeps a traced class alive. It starts with `<internal:` so that
/// `warn(..., uplevel:)` skips wrapper frames, as it skips Ruby's own.
pub const WRAPPER_FILE: &str = "<internal:static_tracing method wrapper>";

/// The frame in place of the outer frames of a folded stack cut to fit:
/// flame graphs then draw cut stacks as one tower of their own, not as
/// false ones rooted at whatever inner frame a cut left first.
pub const CUT_STACK_ROOT: &[u8] = b"[truncated]";

/// The stack in folded form, root first: `<main>;Foo#bar;Baz#qux`, with
/// `leaf` as the innermost frame in place of the `skip` innermost ones (this
/// function's own), and without wrapper frames. Cut from the root side to
/// `max_bytes`, with [`CUT_STACK_ROOT`] as its root when there is room for
/// it beside the leaf.
pub fn folded_stack(ruby: &Ruby, leaf: RString, skip: usize, max_bytes: usize) -> RString {
    let mut frames = [0 as VALUE; MAX_FRAMES];
    let mut lines = [0i32; MAX_FRAMES];
    // SAFETY: both buffers hold MAX_FRAMES entries. The frame VALUEs stay on
    // this stack frame, where the conservative GC sees them.
    let count = unsafe {
        rb_sys::rb_profile_frames(
            0,
            MAX_FRAMES as i32,
            frames.as_mut_ptr(),
            lines.as_mut_ptr(),
        )
    };
    let count = usize::try_from(count).unwrap_or(0);

    // Innermost first, as long as they fit.
    // SAFETY: `leaf` is a live String argument; the bytes are copied at once.
    let mut kept: Vec<Vec<u8>> = vec![unsafe { leaf.as_slice() }.to_vec()];
    let mut size = kept[0].len();
    // Frames past the deepest read are left out too.
    let mut cut = count == MAX_FRAMES;
    for (&frame, &line) in frames.iter().zip(&lines).take(count).skip(skip) {
        if !is_application_frame(frame, line) {
            continue;
        }
        // SAFETY: a frame VALUE returned by rb_profile_frames just above.
        let label = unsafe { rb_sys::rb_profile_frame_full_label(frame) };
        // SAFETY: a VALUE Ruby just returned, live on this stack.
        let Some(label) = RString::from_value(unsafe { Value::from_raw(label) }) else {
            continue;
        };
        // SAFETY: copied before any other Ruby call.
        let bytes = unsafe { label.as_slice() }.to_vec();
        if size + 1 + bytes.len() > max_bytes {
            cut = true;
            break;
        }
        size += 1 + bytes.len();
        kept.push(bytes);
    }
    if cut {
        let marked = |size: usize| size + 1 + CUT_STACK_ROOT.len();
        while kept.len() > 1 && marked(size) > max_bytes {
            let outermost = kept.pop().expect("more than the leaf");
            size -= 1 + outermost.len();
        }
        if marked(size) <= max_bytes {
            size = marked(size);
            kept.push(CUT_STACK_ROOT.to_vec());
        }
    }
    let mut folded = Vec::with_capacity(size);
    for (index, frame) in kept.iter().rev().enumerate() {
        if index > 0 {
            folded.push(b';');
        }
        folded.extend_from_slice(frame);
    }
    folded.truncate(max_bytes);
    ruby.str_from_slice(&folded)
}

/// Whether `frame`, at `line`, is one of the application's: not a method
/// wrapper's, and not the VM's dummy top frame. Ruby 3.1 reports the dummy
/// frame under the main script's own `<main>` label (so folded stacks began
/// `<main>;<main>;`); it is a Ruby frame that never ran, at line 0, where
/// C frames (line 0 too) have no path.
fn is_application_frame(frame: VALUE, line: i32) -> bool {
    // SAFETY: a frame VALUE returned by rb_profile_frames, still on the
    // caller's stack; the path is a String, or nil for C frames.
    let path = unsafe { Value::from_raw(rb_sys::rb_profile_frame_path(frame)) };
    let Some(path) = RString::from_value(path) else {
        return true;
    };
    // SAFETY: compared at once, before any other Ruby call.
    line != 0 && unsafe { path.as_slice() } != WRAPPER_FILE.as_bytes()
}

unsafe extern "C" fn frame_self(context: *const rb_debug_inspector_t, data: *mut c_void) -> VALUE {
    // SAFETY: `data` points at the depth passed to rb_debug_inspector_open
    // below, and `context` is live for the duration of this callback. The
    // index is checked first: an out-of-range one would raise, and raising
    // through this frame is not allowed.
    unsafe {
        let depth = *data.cast::<c_long>();
        let locations = rb_sys::rb_debug_inspector_backtrace_locations(context);
        if depth >= rb_sys::RARRAY_LEN(locations) {
            return rb_sys::Qnil as VALUE;
        }
        rb_sys::rb_debug_inspector_frame_self_get(context, depth)
    }
}

/// `self` of the frame `depth` levels up the stack (0: the method calling
/// this one), or nil. Slow; meant for declarations, not for hot paths.
pub fn caller_self(depth: usize) -> Value {
    // Frame 0 is this native method itself.
    let mut depth = (depth + 1) as c_long;
    // SAFETY: `frame_self` only reads `depth` and queries the live context.
    let value = unsafe {
        rb_sys::rb_debug_inspector_open(Some(frame_self), (&mut depth as *mut c_long).cast())
    };
    // SAFETY: a VALUE returned by the VM.
    unsafe { Value::from_raw(value) }
}

/// The frames' primitives on `StaticTracing::Native`, for method wrappers.
pub(super) fn define_natives(native: magnus::RModule) -> Result<(), magnus::Error> {
    use magnus::Object;
    native.define_singleton_method("folded_stack", function!(folded_stack, 3))?;
    native.define_singleton_method("caller_self", function!(caller_self, 1))?;
    Ok(())
}
