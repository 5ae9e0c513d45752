//! The exceptions the reader raises are the command's own, defined by its
//! Ruby code before it loads this library, and looked up when raised.

use magnus::{Error, ExceptionClass, Ruby};
use stapsdt::ring::TraceError;

/// `StaticTracing::CLI::Error`: a failure the command states in one line.
pub fn cli_error(ruby: &Ruby, message: String) -> Error {
    Error::new(class(ruby, &["CLI", "Error"]), message)
}

/// `StaticTracing::CLI::TraceFile::FormatError`: a file breaks the format.
pub fn format_error(ruby: &Ruby, message: String) -> Error {
    Error::new(class(ruby, &["CLI", "TraceFile", "FormatError"]), message)
}

/// `StaticTracing::InternalError`, which a panic at an entry point raises
/// (`ruby_glue::panics::guard`): a bug, said in one line by the command.
pub fn internal_error_class(ruby: &Ruby) -> ExceptionClass {
    class(ruby, &["InternalError"])
}

pub fn trace_error(ruby: &Ruby, err: TraceError) -> Error {
    match err {
        TraceError::Format(message) => format_error(ruby, message),
        err @ TraceError::Io { .. } => cli_error(ruby, err.to_string()),
    }
}

/// The class at `path` under StaticTracing, or RuntimeError if the command
/// did not define it (only a broken install gets there).
fn class(ruby: &Ruby, path: &[&str]) -> ExceptionClass {
    let name = format!("StaticTracing::{}", path.join("::"));
    ruby.eval::<ExceptionClass>(&name)
        .unwrap_or_else(|_| ruby.exception_runtime_error())
}
