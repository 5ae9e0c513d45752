//! The places passed over on the way to one that worked, or to an error:
//! how both the loading and the state file's errors list them.

use std::fmt;
use std::io;

/// A place an image or a state file could not go to, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub location: String,
    pub reason: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.reason)
    }
}

/// The places passed over, `; `-separated.
pub(crate) fn write_tried(f: &mut fmt::Formatter<'_>, tried: &[Skipped]) -> fmt::Result {
    for (index, skipped) in tried.iter().enumerate() {
        let separator = if index == 0 { "" } else { "; " };
        write!(f, "{separator}{skipped}")?;
    }
    Ok(())
}

/// Why a file could not be written in a stub directory. The state file and
/// the stubs say it in the same words, so that one warning covers both.
pub(crate) fn cannot_write(err: io::Error) -> String {
    format!("cannot write a file in it ({err})")
}
