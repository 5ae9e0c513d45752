//! Which trace context each record was made in: the reader's one rule,
//! applied as records are read (whole files by `scan::read` and
//! `Opened::read_all`, live rings by the [`Cursor`]).
//!
//! A thread's context changes by a context record (its thread, a tag, the
//! trace and span ids); every later record of the thread carries the tag of
//! the context it was made in (see [`Maker`]): [`NO_CONTEXT`], or a context
//! record's. So a record's context is known only when the latest context
//! record of its thread read before it has its tag: if that context record
//! was lost (overwritten in a flight ring, being written as the ring was
//! read), the reader has an older one with another tag, and says
//! "unknown", never that older context. Tags come from one counter in the
//! process, of 2^22 - 2 values: an older context record of the same thread
//! with the same tag is millions of context changes older, and a flight
//! ring overwrites its oldest records first.
//!
//! [`Cursor`]: super::Cursor
//! [`Maker`]: super::format::Maker

use super::checks::Record;
use super::format::{NO_CONTEXT, UNKNOWN_CONTEXT};
use crate::trace_context::TraceContext;
use std::collections::HashMap;

/// The trace context a record was made in, as the reader knows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Context {
    /// Made outside any context (every record of a version-1 file).
    #[default]
    None,
    /// Made in a context whose context record is not in what was read.
    Unknown,
    Known(TraceContext),
}

impl Context {
    pub fn known(&self) -> Option<&TraceContext> {
        match self {
            Context::Known(context) => Some(context),
            _ => None,
        }
    }
}

/// A thread's latest context record read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct InForce {
    seq: u64,
    tag: u32,
    context: TraceContext,
}

/// The context in force on each thread, as far as the records read so far
/// tell.
#[derive(Clone, Debug, Default)]
pub struct Contexts {
    threads: HashMap<u32, InForce>,
    /// The thread looked up last, and its entry: a thread's records mostly
    /// come one after another, and a look-up hashes with SipHash (thread
    /// ids are the inspected process's to choose).
    last: Option<(u32, InForce)>,
}

impl PartialEq for Contexts {
    fn eq(&self, other: &Contexts) -> bool {
        self.threads == other.threads
    }
}

impl Eq for Contexts {}

/// A thread's latest context record read, as a reader hands it on to one
/// that goes on from it ([`Contexts::latest`], [`Contexts::from_latest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Latest {
    pub tid: u32,
    /// The context record's sequence number and tag.
    pub seq: u64,
    pub tag: u32,
    pub context: TraceContext,
}

impl Contexts {
    /// Every thread's latest context record read, by thread id.
    pub fn latest(&self) -> Vec<Latest> {
        let mut latest: Vec<Latest> = self
            .threads
            .iter()
            .map(|(&tid, in_force)| Latest {
                tid,
                seq: in_force.seq,
                tag: in_force.tag,
                context: in_force.context,
            })
            .collect();
        latest.sort_unstable_by_key(|latest| latest.tid);
        latest
    }

    /// Contexts that go on from `latest` (as [`Contexts::latest`] gave
    /// them; of a thread given twice, the later one).
    pub fn from_latest(latest: impl IntoIterator<Item = Latest>) -> Contexts {
        let threads = latest
            .into_iter()
            .map(|latest| {
                let in_force = InForce {
                    seq: latest.seq,
                    tag: latest.tag,
                    context: latest.context,
                };
                (latest.tid, in_force)
            })
            .collect();
        Contexts {
            threads,
            last: None,
        }
    }

    /// Takes `record` in, the next one read (in sequence order but for a
    /// record a writer left a lap behind): a context record becomes its
    /// thread's context in force (unless a later one was read), and any
    /// other record gets the context it was made in.
    pub fn resolve(&mut self, record: &mut Record) {
        if record.is_context() {
            if let Context::Known(context) = record.context {
                let latest = self.threads.get(&record.tid);
                if latest.is_none_or(|latest| latest.seq < record.seq) {
                    let in_force = InForce {
                        seq: record.seq,
                        tag: record.tag,
                        context,
                    };
                    self.threads.insert(record.tid, in_force);
                    self.last = Some((record.tid, in_force));
                }
            }
            return;
        }
        record.context = match record.tag {
            NO_CONTEXT => Context::None,
            UNKNOWN_CONTEXT => Context::Unknown,
            tag => match self.in_force(record.tid) {
                Some(latest) if latest.tag == tag && latest.seq < record.seq => {
                    Context::Known(latest.context)
                }
                _ => Context::Unknown,
            },
        };
    }

    fn in_force(&mut self, tid: u32) -> Option<InForce> {
        match self.last {
            Some((last, in_force)) if last == tid => Some(in_force),
            _ => {
                let in_force = *self.threads.get(&tid)?;
                self.last = Some((tid, in_force));
                Some(in_force)
            }
        }
    }
}
