//! The one naming rule for providers and probes.
//!
//! Names end up in ELF notes, symbol names, bpftrace probe specs
//! (`usdt:*:provider:probe`) and stub file names, so they are restricted to
//! C identifiers: nothing in a name can be a path separator, a `:` or a `*`.

use std::fmt;

/// Longest provider or probe name, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// The rule, as it is shown to users.
pub const NAME_RULE: &str = "must match /\\A[A-Za-z_][A-Za-z0-9_]*\\z/ and be at most 128 bytes";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    Provider,
    Probe,
}

impl fmt::Display for NameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameKind::Provider => "provider",
            NameKind::Probe => "probe",
        })
    }
}

/// A name that breaks the rule, with what was wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidName {
    pub kind: NameKind,
    pub name: String,
    pub problem: &'static str,
}

/// Longer names are shown cut in messages: a megabyte of input must not
/// make a megabyte of message.
const SHOWN_LEN: usize = 2 * MAX_NAME_LEN;

impl fmt::Display for InvalidName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {} name ", self.kind)?;
        if self.name.len() <= SHOWN_LEN {
            write!(f, "{:?}", self.name)?;
        } else {
            let mut end = MAX_NAME_LEN;
            while !self.name.is_char_boundary(end) {
                end -= 1;
            }
            write!(f, "{:?}... ({} bytes)", &self.name[..end], self.name.len())?;
        }
        write!(f, " ({}): {} names {}", self.problem, self.kind, NAME_RULE)
    }
}

impl std::error::Error for InvalidName {}

pub fn is_valid(name: &str) -> bool {
    problem(name).is_none()
}

pub fn validate(kind: NameKind, name: &str) -> Result<(), InvalidName> {
    match problem(name) {
        None => Ok(()),
        Some(problem) => Err(InvalidName {
            kind,
            name: name.to_owned(),
            problem,
        }),
    }
}

fn problem(name: &str) -> Option<&'static str> {
    let bytes = name.as_bytes();
    let Some(&first) = bytes.first() else {
        return Some("empty");
    };
    if bytes.len() > MAX_NAME_LEN {
        return Some("too long");
    }
    if !(first.is_ascii_alphabetic() || first == b'_') {
        return Some("must start with a letter or underscore");
    }
    if !bytes
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Some("only letters, digits and underscores are allowed");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_identifiers() {
        for name in [
            "a",
            "_",
            "my_app",
            "Foo9",
            "_x_1",
            &"a".repeat(MAX_NAME_LEN),
        ] {
            assert!(is_valid(name), "{name}");
        }
    }

    #[test]
    fn rejects_everything_else_with_the_reason() {
        let cases = [
            ("", "empty"),
            ("9lives", "must start"),
            ("a-b", "only letters"),
            ("a:b", "only letters"),
            ("../x", "must start"),
            ("a/b", "only letters"),
            ("caf\u{e9}", "only letters"),
            ("a b", "only letters"),
            ("a\0", "only letters"),
        ];
        for (name, expected) in cases {
            let err = validate(NameKind::Probe, name).unwrap_err();
            let message = err.to_string();
            assert!(message.contains(expected), "{name:?}: {message}");
            assert!(message.contains("probe names must match"), "{message}");
        }
        let long = "a".repeat(MAX_NAME_LEN + 1);
        assert_eq!(
            validate(NameKind::Provider, &long).unwrap_err().problem,
            "too long"
        );
        let huge = "\u{e9}".repeat(1 << 19);
        let message = validate(NameKind::Probe, &huge).unwrap_err().to_string();
        assert!(message.len() < 1024, "{} bytes", message.len());
        assert!(
            message.contains("... (1048576 bytes) (too long)"),
            "{message}"
        );
    }
}
