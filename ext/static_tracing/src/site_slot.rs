//! Where a tracepoint's probe is loaded, if it is.

use stapsdt::site::ProbeSite;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Written by a provider on load, reload and unload; read by `fire` and
/// `enabled?` (with the GVL held, see the module docs of `ruby_api`) and by
/// the attach watcher's thread (under its lock, see `semaphore_poller`). A stub
/// address of 0 means "not loaded". The atomics only make sharing the slot
/// legal: the GVL, or the watcher's lock, orders every access.
#[derive(Default, Debug)]
pub struct SiteSlot {
    stub: AtomicUsize,
    semaphore: AtomicUsize,
}

impl SiteSlot {
    pub fn set(&self, site: Option<ProbeSite>) {
        let site = site.unwrap_or(ProbeSite {
            stub: 0,
            semaphore: 0,
        });
        self.stub.store(site.stub, Ordering::Relaxed);
        self.semaphore.store(site.semaphore, Ordering::Relaxed);
    }

    #[inline]
    pub fn get(&self) -> Option<ProbeSite> {
        let stub = self.stub.load(Ordering::Relaxed);
        (stub != 0).then(|| ProbeSite {
            stub,
            semaphore: self.semaphore.load(Ordering::Relaxed),
        })
    }
}
