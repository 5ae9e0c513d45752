//! Output written through a Ruby object's `write` (the command's stdout,
//! whose errors it words, or a file it made): in pieces of 1 MiB, so that a
//! report of millions of records is never one String.

use magnus::{value::ReprValue, Error, Ruby, Value};
use std::io::{self, Write};

const PIECE: usize = 1 << 20;

pub struct RubyWriter<'a> {
    ruby: &'a Ruby,
    out: Value,
    buffer: Vec<u8>,
    /// What `write` raised: the error the call returns.
    raised: Option<Error>,
}

impl<'a> RubyWriter<'a> {
    pub fn new(ruby: &'a Ruby, out: Value) -> RubyWriter<'a> {
        RubyWriter {
            ruby,
            out,
            buffer: Vec::with_capacity(PIECE),
            raised: None,
        }
    }

    /// Writes what is buffered; the Ruby error `write` raised, if it did.
    pub fn finish(mut self) -> Result<(), Error> {
        match self.flush() {
            Ok(()) => Ok(()),
            Err(err) => Err(self.take_error(err)),
        }
    }

    /// The Ruby error behind `err`, or one saying what failed.
    pub fn take_error(&mut self, err: io::Error) -> Error {
        self.raised
            .take()
            .unwrap_or_else(|| Error::new(self.ruby.exception_io_error(), err.to_string()))
    }

    fn send(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let piece = self.ruby.str_from_slice(&self.buffer);
        self.buffer.clear();
        match self.out.funcall::<_, _, Value>("write", (piece,)) {
            Ok(_) => Ok(()),
            Err(err) => {
                self.raised = Some(err);
                Err(io::Error::other("the output's write raised"))
            }
        }
    }
}

impl Write for RubyWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.raised.is_some() {
            return Err(io::Error::other("the output's write raised"));
        }
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= PIECE {
            self.send()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}
