//! A track's spans as a Chrome CPU profile (a `Profile` and a
//! `ProfileChunk` event, as Chrome DevTools writes them in a trace): a
//! tree of nodes, one per span, and samples that say which node is
//! innermost from when, each time something starts or ends. speedscope
//! reads a file named as DevTools names its own (`*.chrome.json`) only
//! through these; it turns the samples back into the same spans.
//!
//! Times are as in the events, from the same time 0: the profile starts
//! at 0, its first time delta is its first span's start. The tree and the
//! samples are walked from the spans as they are written: what is held
//! is each span's name, as an index into the names.

use super::ticks::Ticks;
use serde_json::ser::{CompactFormatter, Formatter};
use std::collections::HashMap;
use std::io::{self, Write};

pub(super) struct CpuProfile {
    /// Each span's name, as an index into `names`.
    spans: Vec<u32>,
    /// Each name once, as a JSON string, and where it is in `names`.
    names: Vec<Vec<u8>>,
    named: HashMap<String, u32>,
}

/// Node 1 is the root, whose name is "(root)", which speedscope shows as
/// no frame; span `i` is node `i + 2`.
const ROOT: usize = 1;

impl CpuProfile {
    pub fn new() -> CpuProfile {
        CpuProfile {
            spans: Vec::new(),
            names: Vec::new(),
            named: HashMap::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The name of one more span, in preorder.
    pub fn span(&mut self, name: &str) {
        let index = match self.named.get(name) {
            Some(&index) => index,
            None => {
                let index = self.names.len() as u32;
                self.names
                    .push(serde_json::to_vec(name).expect("a str is JSON"));
                self.named.insert(name.to_owned(), index);
                index
            }
        };
        self.spans.push(index);
    }

    /// The `Profile` and `ProfileChunk` events of profile `id` of track
    /// `pid`/`tid`, whose spans started and ended at `times` (in the order
    /// [`CpuProfile::span`] was given them), each event after `separate`
    /// has written what goes before an event.
    pub fn write<W: Write, T>(
        &self,
        out: &mut W,
        (id, pid, tid): (u64, u64, u32),
        times: T,
        mut separate: impl FnMut(&mut W) -> io::Result<()>,
    ) -> io::Result<()>
    where
        T: Iterator<Item = (Ticks, Ticks)> + Clone,
    {
        let head = |out: &mut W, name: &str| -> io::Result<()> {
            write!(
                out,
                "{{\"name\":\"{name}\",\"cat\":\"disabled-by-default-v8.cpu_profiler\",\
                 \"ph\":\"P\",\"id\":\"{id:#x}\",\"pid\":{pid},\"tid\":{tid},\"ts\":0,\
                 \"args\":{{\"data\":{{"
            )
        };
        separate(out)?;
        head(out, "Profile")?;
        out.write_all(b"\"startTime\":0}}}")?;
        separate(out)?;
        head(out, "ProfileChunk")?;
        out.write_all(b"\"cpuProfile\":{\"nodes\":[{\"id\":1,\"callFrame\":")?;
        call_frame(out, b"\"(root)\"")?;
        out.write_all(b"}")?;
        let mut failed = Ok(());
        walk(
            times.clone(),
            |span, parent| {
                if failed.is_ok() {
                    failed = self.node(out, span, parent);
                }
            },
            |_, _| {},
        );
        std::mem::replace(&mut failed, Ok(()))?;
        out.write_all(b"],\"samples\":[")?;
        let mut first = true;
        walk(
            times.clone(),
            |_, _| {},
            |_, node| {
                if failed.is_ok() {
                    failed = separated(out, &mut first)
                        .and_then(|()| CompactFormatter.write_u64(out, node as u64));
                }
            },
        );
        std::mem::replace(&mut failed, Ok(()))?;
        out.write_all(b"]},\"timeDeltas\":[")?;
        let (mut before, mut first) = (Ticks::of_ns(0), true);
        walk(
            times,
            |_, _| {},
            |time, _| {
                if failed.is_ok() {
                    failed = separated(out, &mut first).and_then(|()| (time - before).write(out));
                    before = time;
                }
            },
        );
        std::mem::replace(&mut failed, Ok(()))?;
        out.write_all(b"],\"endTime\":")?;
        before.write(out)?;
        out.write_all(b"}}}")
    }

    fn node(&self, out: &mut impl Write, span: usize, parent: usize) -> io::Result<()> {
        out.write_all(b",{\"id\":")?;
        CompactFormatter.write_u64(out, span as u64 + 2)?;
        out.write_all(b",\"parent\":")?;
        CompactFormatter.write_u64(out, parent as u64)?;
        out.write_all(b",\"callFrame\":")?;
        call_frame(out, &self.names[self.spans[span] as usize])?;
        out.write_all(b"}")
    }
}

fn call_frame(out: &mut impl Write, name: &[u8]) -> io::Result<()> {
    out.write_all(b"{\"functionName\":")?;
    out.write_all(name)?;
    out.write_all(b",\"url\":\"\",\"lineNumber\":-1,\"columnNumber\":-1}")
}

/// "," before every item but the first.
fn separated(out: &mut impl Write, first: &mut bool) -> io::Result<()> {
    if std::mem::take(first) {
        Ok(())
    } else {
        out.write_all(b",")
    }
}

/// Walks spans given in preorder by their `times`: `node(span, parent)`
/// for each span as it starts (its parent the innermost span open then,
/// or the root), and `sample(time, node)` each time the innermost node
/// changes, the times never going back, the last sample the root's.
fn walk(
    times: impl Iterator<Item = (Ticks, Ticks)>,
    mut node: impl FnMut(usize, usize),
    mut sample: impl FnMut(Ticks, usize),
) {
    // The spans open, innermost last: their end and their node.
    let mut open: Vec<(Ticks, usize)> = Vec::new();
    let mut last: Option<Ticks> = None;
    let mut at = |time: Ticks, innermost: usize| {
        let time = last.map_or(time, |last| time.max(last));
        last = Some(time);
        sample(time, innermost);
    };
    let end_until =
        |time: Option<Ticks>, open: &mut Vec<(Ticks, usize)>, at: &mut dyn FnMut(Ticks, usize)| {
            while let Some(&(end, _)) = open.last() {
                if time.is_some_and(|time| end > time) {
                    break;
                }
                open.pop();
                at(end, open.last().map_or(ROOT, |&(_, node)| node));
            }
        };
    for (span, (start, end)) in times.enumerate() {
        end_until(Some(start), &mut open, &mut at);
        let parent = open.last().map_or(ROOT, |&(_, node)| node);
        node(span, parent);
        open.push((end, span + 2));
        at(start, span + 2);
    }
    end_until(None, &mut open, &mut at);
}
