//! Runtime-defined SystemTap SDT (USDT) probes for Linux.
//!
//! A process describes a *provider* and its *probes*; [`elf::build`] writes a
//! small shared object with one `nop; ret` stub, one semaphore and one
//! `.note.stapsdt` note a probe; [`image::LoadedImage`] writes it to a private
//! directory and `dlopen`s it. Calling a stub with arguments in registers
//! "fires" the probe: a tracer (bpftrace, bcc, perf) that attached a uprobe
//! to the stub's `nop` reads them.
//!
//! [`ring`] is the recorder's side of the same probes: a ring of records in a
//! shared-memory file (in memory: [`ring_dir`]) that the `static-tracing`
//! command reads from outside the process (docs/recording.md).
//!
//! Nothing here knows about Ruby.

pub mod arch;
#[cfg(unix)]
pub mod control;
#[cfg(unix)]
pub mod descriptors;
pub mod elf;
#[cfg(unix)]
pub mod image;
#[cfg(unix)]
pub mod leftovers;
pub mod names;
#[cfg(unix)]
pub mod owned_files;
pub mod probe;
pub mod ring;
#[cfg(unix)]
pub mod ring_dir;
#[cfg(unix)]
pub mod ring_file;
#[cfg(unix)]
pub mod site;
#[cfg(unix)]
pub mod snapshot_file;
#[cfg(unix)]
pub mod state_file;
#[cfg(unix)]
pub mod stub_dir;
#[cfg(unix)]
mod sys;
pub mod trace_context;
pub mod tried;

pub use arch::Arch;
pub use probe::{ArgType, ProbeSpec, MAX_ARGS};
