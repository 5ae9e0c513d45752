//! A loaded probe: the two raw memory accesses that make it work.

use crate::arch::Arch;
use std::sync::atomic::{AtomicU16, Ordering};

/// Where a loaded probe is in this process: its stub and its semaphore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeSite {
    pub stub: usize,
    pub semaphore: usize,
}

type Stub = extern "C" fn(u64, u64, u64, u64, u64, u64);

impl ProbeSite {
    /// A tracer is attached: it raised the semaphore (bpftrace, bcc and perf
    /// on kernels with `ref_ctr_offset`), or it planted a breakpoint on the
    /// probe site without touching the semaphore (raw uprobes).
    ///
    /// # Safety
    /// The image this site belongs to must be loaded, and stay loaded during the call.
    #[inline]
    pub unsafe fn is_enabled(&self) -> bool {
        // SAFETY: the semaphore is a 2-aligned u16 in a writable segment of a
        // loaded image (caller's guarantee). The kernel updates it from another
        // context, hence the atomic load.
        let semaphore =
            unsafe { AtomicU16::from_ptr(self.semaphore as *mut u16) }.load(Ordering::Relaxed);
        semaphore > 0 || !unsafe { self.site_is_nop() }
    }

    /// # Safety
    /// As [`ProbeSite::is_enabled`].
    #[inline]
    unsafe fn site_is_nop(&self) -> bool {
        let Some(arch) = Arch::host() else {
            return true;
        };
        let nop = arch.nop();
        // SAFETY: the stub is at least one instruction long and mapped readable.
        let site = unsafe { std::slice::from_raw_parts(self.stub as *const u8, nop.len()) };
        site == nop
    }

    /// Calls the stub with the six argument registers set to `args`; an
    /// attached tracer reads them at the probe site.
    ///
    /// # Safety
    /// As [`ProbeSite::is_enabled`]; the caller must also keep any pointer
    /// passed in `args` valid for the duration of the call.
    #[inline]
    pub unsafe fn fire(&self, args: &[u64; 6]) {
        // SAFETY: the stub is `nop; ret` (plus whatever breakpoint a tracer put
        // on the nop) in an executable segment of a loaded image. It takes no
        // arguments in the C ABI sense, so passing six is harmless: they are
        // only there to be read by the tracer from the registers.
        let stub: Stub = unsafe {
            std::mem::transmute::<*const (), Stub>(std::ptr::with_exposed_provenance(self.stub))
        };
        stub(args[0], args[1], args[2], args[3], args[4], args[5]);
    }
}
