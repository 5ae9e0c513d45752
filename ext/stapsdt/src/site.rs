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
            unsafe { AtomicU16::from_ptr(std::ptr::with_exposed_provenance_mut(self.semaphore)) }
                .load(Ordering::Relaxed);
        // SAFETY: the image is loaded for the length of the call (the
        // caller's guarantee), which is what site_is_nop asks.
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
        let site = unsafe {
            std::slice::from_raw_parts(
                std::ptr::with_exposed_provenance::<u8>(self.stub),
                nop.len(),
            )
        };
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

/// The reads `is_enabled` makes, over heap buffers standing in for a loaded
/// image: these run under Miri too (`rake cargo:miri`), which checks the
/// accesses themselves (alignment, bounds, provenance), not just their result.
#[cfg(test)]
mod tests {
    use super::*;

    /// A stub and a semaphore, where the tests can write as a tracer would.
    struct FakeImage {
        stub: Vec<u8>,
        semaphore: Box<AtomicU16>,
    }

    impl FakeImage {
        fn new() -> FakeImage {
            FakeImage {
                stub: Arch::host().expect("a supported host").stub().to_vec(),
                semaphore: Box::new(AtomicU16::new(0)),
            }
        }

        fn site(&self) -> ProbeSite {
            ProbeSite {
                stub: self.stub.as_ptr().expose_provenance(),
                semaphore: std::ptr::from_ref::<AtomicU16>(&self.semaphore).expose_provenance(),
            }
        }
    }

    #[test]
    fn a_site_with_its_nop_and_a_zero_semaphore_is_not_enabled() {
        let image = FakeImage::new();
        // SAFETY: `image` outlives the call.
        assert!(!unsafe { image.site().is_enabled() });
    }

    #[test]
    fn a_raised_semaphore_means_enabled() {
        let image = FakeImage::new();
        image.semaphore.store(1, Ordering::Relaxed);
        // SAFETY: `image` outlives the call.
        assert!(unsafe { image.site().is_enabled() });
        image.semaphore.store(u16::MAX, Ordering::Relaxed);
        // SAFETY: as above.
        assert!(unsafe { image.site().is_enabled() });
    }

    #[test]
    fn a_breakpoint_on_the_site_means_enabled_with_the_semaphore_untouched() {
        let mut image = FakeImage::new();
        image.stub[0] = 0xcc;
        // SAFETY: `image` outlives the call.
        assert!(unsafe { image.site().is_enabled() });
    }

    #[test]
    fn only_the_nop_is_read_not_the_return_after_it() {
        let mut image = FakeImage::new();
        let nop_len = Arch::host().unwrap().nop().len();
        // What follows the nop does not matter: a tracer only patches the nop.
        image.stub.truncate(nop_len);
        image.stub.shrink_to_fit();
        // SAFETY: `image` outlives the call; Miri fails it if the read
        // went past the nop.
        assert!(!unsafe { image.site().is_enabled() });
    }
}
