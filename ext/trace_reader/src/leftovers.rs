//! `TraceReader.sweep_leftover_rings(dir_fd)`: the command bounds the rings
//! killed processes left in a directory it reads a ring in, as a process
//! starting does (`stapsdt::leftovers`: one rule for both).

use magnus::{Error, RModule};
use std::fs::File;
use std::mem::ManuallyDrop;
use std::os::fd::{FromRawFd, RawFd};

/// Removes the leftover rings of the directory open as `dir_fd` beyond
/// what is kept; returns how many it removed.
fn sweep(dir_fd: RawFd) -> usize {
    if dir_fd < 0 {
        return 0;
    }
    // SAFETY: the command passes the fileno of a directory it opened and
    // checked, and holds open until this call returns (the GVL is held
    // throughout); ManuallyDrop never closes it.
    let dir = ManuallyDrop::new(unsafe { File::from_raw_fd(dir_fd) });
    stapsdt::leftovers::bound_in(&dir)
}

pub fn init(module: RModule) -> Result<(), Error> {
    module.define_module_function("sweep_leftover_rings", function!(sweep, 1))
}
