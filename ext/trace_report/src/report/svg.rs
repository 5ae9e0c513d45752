//! A flame graph of the stacks stack probes recorded, drawn as SVG by
//! inferno from the folded stacks (as `--format folded` counts them), so
//! that a user with only the gem gets a picture. A frame's width counts
//! the records (calls) whose stacks pass through it, not time: StackTracer
//! fires a stack per call, not per interval.

use super::folded;
use crate::Trace;
use inferno::flamegraph::{self, Options};
use std::io::{self, Write};

pub fn write(traces: &[Trace], out: &mut impl Write) -> io::Result<()> {
    let lines: Vec<String> = folded::counts(traces)
        .into_iter()
        .map(|(stack, count)| format!("{stack} {count}"))
        .collect();
    let mut options = Options::default();
    options.title = "Recorded stacks".to_owned();
    options.subtitle = Some("Widths count calls (records of stack probes), not time".to_owned());
    options.count_name = "calls".to_owned();
    // Every frame drawn, however narrow: a frame too thin to see can
    // still be searched for, and none of the recorded frames goes missing.
    options.min_width = 0.0;
    // The lines come sorted, as folded::counts gives them.
    options.no_sort = true;
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg)?;
    out.write_all(&labelled_root(svg))
}

/// The flame graph with its root bar labelled as its tooltip is (`all
/// (1,200 calls, 100%)`): inferno draws the root, whose frame has no
/// name, with an empty label.
fn labelled_root(mut svg: Vec<u8>) -> Vec<u8> {
    const TITLE: &[u8] = b"<title>all (";
    let find = |bytes: &[u8], what: &[u8], from: usize| {
        bytes[from..]
            .windows(what.len())
            .position(|window| window == what)
            .map(|at| from + at)
    };
    let Some(title) = find(&svg, TITLE, 0) else {
        return svg;
    };
    let start = title + b"<title>".len();
    let (Some(end), Some(text), Some(group_end)) = (
        find(&svg, b"</title>", start),
        find(&svg, b"></text>", start),
        find(&svg, b"</g>", start),
    ) else {
        return svg;
    };
    // Only the root's own label, if it is empty.
    if text > group_end {
        return svg;
    }
    // The title's text, as inferno escaped it for the title.
    let label = svg[start..end].to_vec();
    svg.splice(text + 1..text + 1, label);
    svg
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn names_every_frame_and_counts_calls() {
        let records = vec![
            stack_record(b"main;a;b", 1),
            stack_record(b"main;a;b", 2),
            stack_record(b"main;a;c<&>", 3),
            stack_record(b"main;tiny", 4),
        ];
        let mut out = Vec::new();
        write(&[trace("a.trace", standard_probes(), records)], &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        assert!(svg.starts_with("<?xml"), "{svg}");
        for title in [
            "main (4 calls, 100.00%)",
            "a (3 calls, 75.00%)",
            "b (2 calls, 50.00%)",
            "c&lt;&amp;&gt; (1 calls, 25.00%)",
            "tiny (1 calls, 25.00%)",
        ] {
            assert!(svg.contains(&format!("<title>{title}</title>")), "{title}");
        }
    }

    #[test]
    fn labels_the_root_as_its_tooltip() {
        let records = vec![
            stack_record(b"[truncated];a;b", 1),
            stack_record(b"main;a", 2),
        ];
        let mut out = Vec::new();
        write(&[trace("a.trace", standard_probes(), records)], &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        let root = svg.find("<title>all (2 calls, 100%)</title>").unwrap();
        let group = &svg[root..root + svg[root..].find("</g>").unwrap()];
        assert!(group.ends_with(">all (2 calls, 100%)</text>"), "{group}");
        // A cut stack's marker is a frame of its own beside the roots.
        assert!(svg.contains("<title>[truncated] (1 calls, 50.00%)</title>"));
    }
}
