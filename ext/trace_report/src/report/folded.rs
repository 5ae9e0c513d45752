//! The stacks that stack probes recorded (folded, root first, frames
//! separated by `;`, as StackTracer fires them), counted: one line
//! `stack count` per distinct stack, sorted, as flamegraph.pl reads them.

use crate::Trace;
use stapsdt::ring::Arg;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

/// Refuses `traces` that have no stack probe, or no stack that a stack
/// probe recorded: there would be nothing to fold, and an empty flame
/// graph (or no line at all) says nothing of why.
pub fn check(traces: &[Trace]) -> Result<(), String> {
    let probes = || traces.iter().flat_map(|trace| &trace.probes);
    let names = || {
        let names: Vec<&str> = traces.iter().map(|trace| trace.name.as_str()).collect();
        names.join(", ")
    };
    if probes().any(|probe| probe.stack_arg.is_some()) {
        if any_stack(traces) {
            return Ok(());
        }
        let mut labels: Vec<String> = Vec::new();
        for probe in probes().filter(|probe| probe.stack_arg.is_some()) {
            let label = format!("{}:{}", probe.provider, probe.name);
            if !labels.contains(&label) {
                labels.push(label);
            }
        }
        return Err(format!(
            "no stacks in {}: the stack probes ({}) recorded none (or none that --probe, --since and \
             --until keep), so there is nothing to fold",
            names(),
            labels.join(", ")
        ));
    }
    let mut labels: Vec<String> = Vec::new();
    for probe in probes() {
        let label = format!("{}:{}", probe.provider, probe.name);
        if !labels.contains(&label) {
            labels.push(label);
        }
    }
    let probes = if labels.is_empty() {
        "they have no probes".to_owned()
    } else {
        format!("probes: {}", labels.join(", "))
    };
    Err(format!(
        "no stack probes in {} (probes with a stack argument, as StackTracer makes), so no stacks to \
         fold; {probes}",
        names()
    ))
}

/// Whether a stack probe of `traces` recorded a stack with a frame.
fn any_stack(traces: &[Trace]) -> bool {
    traces.iter().any(|trace| {
        trace.records.iter().any(|record| {
            let probe = &trace.probes[record.probe as usize];
            probe.stack_arg.is_some_and(|arg| {
                matches!(record.arg(usize::from(arg)), Some(Arg::Str(stack)) if !stack.is_empty())
            })
        })
    })
}

pub fn write(traces: &[Trace], out: &mut impl Write) -> io::Result<()> {
    for (stack, count) in counts(traces) {
        out.write_all(stack.as_bytes())?;
        writeln!(out, " {count}")?;
    }
    Ok(())
}

/// Each distinct stack, cleaned, with its count, in byte order.
pub(super) fn counts(traces: &[Trace]) -> BTreeMap<String, u64> {
    let mut counts: HashMap<&[u8], u64> = HashMap::new();
    for trace in traces {
        let stack_args: Vec<Option<usize>> = trace
            .probes
            .iter()
            .map(|probe| probe.stack_arg.map(usize::from))
            .collect();
        for record in &trace.records {
            let Some(arg) = stack_args[record.probe as usize] else {
                continue;
            };
            // The reader checked that a stack argument is a String.
            if let Some(Arg::Str(stack)) = record.arg(arg) {
                *counts.entry(stack).or_default() += 1;
            }
        }
    }
    // No frames, no stack: flamegraph.pl would draw an empty one.
    counts.remove(&b""[..]);
    let mut clean: BTreeMap<String, u64> = BTreeMap::new();
    for (stack, count) in counts {
        *clean.entry(count_apart(cleaned(stack))).or_default() += count;
    }
    clean
}

/// `stack` with its innermost frame's name changed if it ends in a space
/// and a number (`worker 7`): flamegraph.pl and inferno would read that
/// number and the count after it as a differential line's two counts. The
/// spaces before the number become `_` (`worker_7`).
fn count_apart(mut stack: String) -> String {
    let leaf = stack.rfind(';').map_or(0, |at| at + 1);
    let without_number = stack.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    let number = &stack[without_number.len()..];
    if !number.starts_with(|c: char| c.is_ascii_digit()) {
        return stack;
    }
    let before = without_number.trim_end_matches(char::is_whitespace);
    if before.len() == without_number.len() || before.len() < leaf {
        return stack;
    }
    let spaces = before.len()..without_number.len();
    let underscores = "_".repeat(stack[spaces.clone()].chars().count());
    stack.replace_range(spaces, &underscores);
    stack
}

/// `stack` as one line of text: bytes that are not UTF-8 (each maximal
/// run that cannot begin a character) and control characters, line
/// breaks among them, each shown as "?".
pub(super) fn cleaned(stack: &[u8]) -> String {
    let mut text = String::with_capacity(stack.len());
    for chunk in stack.utf8_chunks() {
        text.extend(
            chunk
                .valid()
                .chars()
                .map(|c| if c.is_ascii_control() { '?' } else { c }),
        );
        if !chunk.invalid().is_empty() {
            text.push('?');
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use stapsdt::ring::Value;

    fn folded(traces: &[Trace]) -> String {
        let mut out = Vec::new();
        write(traces, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn counts_each_distinct_stack_one_line_each_sorted() {
        let mut records: Vec<_> = ["main;a;b", "main;a", "main;a;b"]
            .iter()
            .enumerate()
            .map(|(time, stack)| stack_record(stack.as_bytes(), time as u64))
            .collect();
        records.push(stack_record(b"bad\nline;x", 5));
        records.push(stack_record(b"", 6));
        records.extend(calls(&[1000]));
        let first = trace("a.trace", standard_probes(), records);
        let only_stack = record(0, vec![Value::Str(b"main;a".to_vec())], 1, 7);
        let second = trace("b.trace", vec![stack_probe(0)], vec![only_stack]);
        // A line break in a stack would break the line: it shows as "?".
        assert_eq!(
            folded(&[first, second]),
            "bad?line;x 1\nmain;a 2\nmain;a;b 2\n"
        );
    }

    #[test]
    fn shows_what_is_not_utf8_or_is_a_control_character_as_a_question_mark() {
        // As Ruby's String#scrub("?") does: one "?" for each maximal run
        // that cannot begin a character.
        let stacks: [&[u8]; 8] = [
            b"\xE3\x81",
            b"\xF0\x80\x80",
            b"\xED\xA0\x80",
            b"a\xFFb",
            b"\xC0\xAF",
            b"\xF4\x90\x80\x80",
            b"\xE3\x81\xFF",
            b"\x00\x1f\x7f\t\r\xC2\x85",
        ];
        let cleaned: Vec<String> = stacks.iter().map(|stack| cleaned(stack)).collect();
        assert_eq!(
            cleaned,
            ["?", "???", "???", "a?b", "??", "????", "??", "?????\u{85}"]
        );
    }

    #[test]
    fn merges_stacks_that_clean_to_the_same_line_and_sorts_by_bytes() {
        let records = vec![
            stack_record(b"a\nb", 1),
            stack_record(b"a\rb", 2),
            stack_record(b"a?b", 3),
            stack_record("é;x".as_bytes(), 4),
            stack_record(b"Z", 5),
            stack_record(b"\x00", 6),
        ];
        let traces = [trace("a.trace", standard_probes(), records)];
        assert_eq!(folded(&traces), "? 1\nZ 1\na?b 3\né;x 1\n");
    }

    #[test]
    fn refuses_files_without_a_stack_probe_saying_what_they_hold() {
        let traces = [trace("a.trace", vec![index_probe(0)], calls(&[1]))];
        assert_eq!(
            check(&traces).unwrap_err(),
            "no stack probes in a.trace (probes with a stack argument, as StackTracer makes), so no \
             stacks to fold; probes: my_controller:index"
        );
        let traces = [
            trace("a.trace", vec![index_probe(0), hits_probe(1)], vec![]),
            trace("b.trace", vec![hits_probe(0)], vec![]),
        ];
        assert_eq!(
            check(&traces).unwrap_err(),
            "no stack probes in a.trace, b.trace (probes with a stack argument, as StackTracer \
             makes), so no stacks to fold; probes: my_controller:index, app:hits"
        );
        let traces = [trace("a.trace", vec![], vec![])];
        assert_eq!(
            check(&traces).unwrap_err(),
            "no stack probes in a.trace (probes with a stack argument, as StackTracer makes), so no \
             stacks to fold; they have no probes"
        );
        let traces = [
            trace("a.trace", vec![index_probe(0)], vec![]),
            trace("b.trace", vec![stack_probe(0)], vec![]),
        ];
        // A stack probe that recorded nothing: refused as well.
        assert_eq!(
            check(&traces).unwrap_err(),
            "no stacks in a.trace, b.trace: the stack probes (my_controller_stack:index) recorded \
             none (or none that --probe, --since and --until keep), so there is nothing to fold"
        );
        assert_eq!(folded(&traces), "");
    }

    #[test]
    fn keeps_a_leaf_ending_in_a_number_from_reading_as_a_differential_count() {
        let records = vec![
            stack_record(b"main;worker 7", 1),
            stack_record(b"main;worker 7", 2),
            stack_record(b"main;sleep  1.5", 3),
            stack_record(b"worker 7;run", 4),
            stack_record(b"main;v2", 5),
            stack_record(b"main; 7", 6),
        ];
        assert_eq!(
            folded(&[trace("a.trace", standard_probes(), records)]),
            "main;_7 1\nmain;sleep__1.5 1\nmain;v2 1\nmain;worker_7 2\nworker 7;run 1\n"
        );
    }

    #[test]
    fn refuses_files_whose_stack_probes_recorded_no_stack() {
        let records = vec![stack_record(b"", 1), hits_record("x", 2)];
        let refused = check(&[trace("a.trace", standard_probes(), records)]).unwrap_err();
        assert_eq!(
            refused,
            "no stacks in a.trace: the stack probes (my_controller_stack:index) recorded none (or none \
             that --probe, --since and --until keep), so there is nothing to fold"
        );
    }
}
