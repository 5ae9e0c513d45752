//! Errors of system calls between Rust and Ruby, by their errno: Ruby's
//! `Errno::*` classes for Rust's `io::Error`, and the other way round for
//! a Ruby object's I/O that a Rust reader goes through.

use magnus::{prelude::*, value::ReprValue, Error, Ruby, TryConvert, Value};
use std::io;

/// `err` as Ruby raises one: the `SystemCallError` of its errno (an
/// `Errno::ENOSPC`...), else an `IOError` with its message.
pub fn ruby_error(ruby: &Ruby, err: &io::Error) -> Error {
    let errno = err.raw_os_error().map(|errno| {
        ruby.exception_system_call_error()
            .new_instance((ruby.qnil(), errno))
    });
    match errno {
        Some(Ok(exception)) => Error::from(exception),
        _ => Error::new(ruby.exception_io_error(), err.to_string()),
    }
}

/// A Ruby exception as the I/O error it stands for: a SystemCallError's
/// errno, or its message.
pub fn io_error(err: Error) -> io::Error {
    let errno = err
        .value()
        .and_then(|exception| exception.funcall::<_, _, Value>("errno", ()).ok())
        .and_then(|errno| i32::try_convert(errno).ok());
    match errno {
        Some(errno) => io::Error::from_raw_os_error(errno),
        None => io::Error::other(err.to_string()),
    }
}
