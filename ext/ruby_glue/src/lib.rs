//! What both of the gem's native libraries need of Ruby, in one place
//! rather than compiled into each from the other's sources: the extension
//! (`static_tracing.so`, loaded by a traced process) and the reader
//! (`trace_reader.so`, loaded by the command and by the Rack endpoint).
//!
//! - [`gvl`]: work done with the GVL released;
//! - [`errno`]: a Rust `io::Error` as Ruby's `SystemCallError` of its
//!   errno, and back;
//! - [`panics`]: a panic caught at a native entry point and raised as a
//!   Ruby exception, never unwound into Ruby's frames.

pub mod errno;
pub mod gvl;
pub mod panics;
