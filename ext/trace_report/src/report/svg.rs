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
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
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
}
