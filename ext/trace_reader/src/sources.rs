//! Where the files the reader reads are: a descriptor the command's Ruby
//! code opened and checked (the command's case), or any Ruby object that
//! reads like a file (`pread`, `size`, `pwrite`: a script's, or a spec's
//! ring laid out byte by byte).

use magnus::{value::ReprValue, Error, Integer, RString, Ruby, Value};
use ruby_glue::errno::io_error;
use stapsdt::ring::follow::RingSource;
use stapsdt::ring::scan::{FileId, ReadAt};
use std::fs::File;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{FromRawFd, RawFd};

/// A file's descriptor, or an object that reads like a file.
pub enum Source {
    File(ManuallyDrop<File>),
    Object(Value),
}

impl Source {
    /// `value`: a descriptor (Integer) the caller's IO holds open for the
    /// call, or an object with `pread(length, offset)`, `size` and, for a
    /// ring that is followed, `pwrite(string, offset)`.
    pub fn of(value: Value) -> Result<Source, Error> {
        if let Some(fd) = Integer::from_value(value) {
            let fd: RawFd = fd.to_i32()?;
            // SAFETY: the command passes the fileno of an IO it holds open
            // until the native call returns, with the GVL held all along,
            // so no Ruby thread closes it meanwhile; ManuallyDrop never
            // closes it either.
            return Ok(Source::File(ManuallyDrop::new(unsafe {
                File::from_raw_fd(fd)
            })));
        }
        Ok(Source::Object(value))
    }
}

impl ReadAt for Source {
    fn file_len(&self) -> io::Result<u64> {
        match self {
            Source::File(file) => file.file_len(),
            Source::Object(object) => object.funcall("size", ()).map_err(io_error),
        }
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        match self {
            Source::File(file) => ReadAt::read_at(&**file, buf, offset),
            Source::Object(object) => {
                let read: Result<RString, Error> = object.funcall("pread", (buf.len(), offset));
                match read {
                    Ok(string) => {
                        // SAFETY: the bytes are copied out before any Ruby
                        // code runs again (no allocation or call between).
                        let bytes = unsafe { string.as_slice() };
                        let len = bytes.len().min(buf.len());
                        buf[..len].copy_from_slice(&bytes[..len]);
                        Ok(len)
                    }
                    Err(err) if err.is_kind_of(Ruby::get_with(*object).exception_eof_error()) => {
                        Ok(0)
                    }
                    Err(err) => Err(io_error(err)),
                }
            }
        }
    }

    fn file_id(&self) -> io::Result<Option<FileId>> {
        match self {
            Source::File(file) => file.file_id(),
            Source::Object(_) => Ok(None),
        }
    }

    fn data_from(&self, offset: u64) -> io::Result<Option<u64>> {
        match self {
            Source::File(file) => file.data_from(offset),
            Source::Object(_) => Ok(Some(offset)),
        }
    }
}

impl RingSource for Source {
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        match self {
            Source::File(file) => RingSource::write_all_at(&**file, bytes, offset),
            Source::Object(object) => {
                let ruby = Ruby::get_with(*object);
                object
                    .funcall::<_, _, Value>("pwrite", (ruby.str_from_slice(bytes), offset))
                    .map(drop)
                    .map_err(io_error)
            }
        }
    }
}
