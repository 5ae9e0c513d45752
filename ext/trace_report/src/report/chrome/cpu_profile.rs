//! A track's spans as a Chrome CPU profile (a `Profile` and a
//! `ProfileChunk` event, as Chrome DevTools writes them in a trace): a
//! tree of nodes, one per span, and samples that say which node is
//! innermost from when, each time something starts or ends. speedscope
//! reads a file named as DevTools names its own (`*.chrome.json`) only
//! through these; it turns the samples back into the same spans.
//!
//! Times are as in the events, from the first record: the profile starts
//! at 0, its first time delta is its first span's start.

use super::ticks::Ticks;
use std::io::{self, Write};

pub(super) struct CpuProfile {
    /// Each node's name and its parent's id; node 1 is the root, whose
    /// name is "(root)", which speedscope shows as no frame.
    nodes: Vec<(String, usize)>,
    /// When a node becomes the innermost.
    samples: Vec<(Ticks, usize)>,
    /// The spans open, innermost last: their end and their node.
    open: Vec<(Ticks, usize)>,
}

const ROOT: usize = 1;

impl CpuProfile {
    pub fn new() -> CpuProfile {
        CpuProfile {
            nodes: vec![("(root)".to_owned(), 0)],
            samples: Vec::new(),
            open: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// One more span, in preorder.
    pub fn span(&mut self, start: Ticks, end: Ticks, name: &str) {
        self.end_before(start);
        let parent = self.open.last().map_or(ROOT, |&(_, node)| node);
        self.nodes.push((name.to_owned(), parent));
        let node = self.nodes.len();
        self.open.push((end, node));
        self.sample(start, node);
    }

    /// Ends the spans open that end by `time`.
    fn end_before(&mut self, time: Ticks) {
        while let Some(&(end, _)) = self.open.last() {
            if end > time {
                break;
            }
            self.open.pop();
            let innermost = self.open.last().map_or(ROOT, |&(_, node)| node);
            self.sample(end, innermost);
        }
    }

    fn sample(&mut self, time: Ticks, node: usize) {
        // Times only go forward in a profile.
        let time = self
            .samples
            .last()
            .map_or(time, |&(last, _)| time.max(last));
        self.samples.push((time, node));
    }

    /// The `Profile` and `ProfileChunk` events of profile `id` of track
    /// `pid`/`tid`, each after `separate` has written what goes before an
    /// event.
    pub fn write<W: Write>(
        mut self,
        out: &mut W,
        id: u64,
        pid: u64,
        tid: u32,
        mut separate: impl FnMut(&mut W) -> io::Result<()>,
    ) -> io::Result<()> {
        if let Some(last) = self.open.iter().map(|&(end, _)| end).max() {
            self.end_before(last);
        }
        let zero = Ticks::of_ns(0);
        let end = self.samples.last().map_or(zero, |&(time, _)| time);
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
        out.write_all(b"\"cpuProfile\":{\"nodes\":[")?;
        for (index, (name, parent)) in self.nodes.iter().enumerate() {
            if index > 0 {
                out.write_all(b",")?;
            }
            write!(out, "{{\"id\":{}", index + 1)?;
            if *parent != 0 {
                write!(out, ",\"parent\":{parent}")?;
            }
            out.write_all(b",\"callFrame\":{\"functionName\":")?;
            serde_json::to_writer(&mut *out, name).map_err(io::Error::from)?;
            out.write_all(b",\"url\":\"\",\"lineNumber\":-1,\"columnNumber\":-1}}")?;
        }
        out.write_all(b"],\"samples\":[")?;
        for (index, (_, node)) in self.samples.iter().enumerate() {
            if index > 0 {
                out.write_all(b",")?;
            }
            write!(out, "{node}")?;
        }
        out.write_all(b"]},\"timeDeltas\":[")?;
        let mut before = zero;
        for (index, &(time, _)) in self.samples.iter().enumerate() {
            if index > 0 {
                out.write_all(b",")?;
            }
            (time - before).write(out)?;
            before = time;
        }
        out.write_all(b"],\"endTime\":")?;
        end.write(out)?;
        out.write_all(b"}}}")
    }
}
