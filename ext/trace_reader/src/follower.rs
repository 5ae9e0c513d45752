//! `StaticTracing::TraceReader::Follower`: a live ring followed as its
//! process writes it, for `static-tracing record`.

use crate::errors::trace_error;
use crate::reader::{output_file, tuple, write_error};
use crate::sources::Source;
use crate::trace::{probe_array, record_list};
use magnus::{prelude::*, Error, RArray, RModule, Ruby, Value};
use stapsdt::ring::follow;
use std::cell::RefCell;
use std::io::{BufWriter, Write};
use trace_report::Records;

#[magnus::wrap(class = "StaticTracing::TraceReader::Follower", free_immediately, size)]
pub struct Follower(RefCell<follow::Follower>);

impl Follower {
    /// `Follower.new(ring, name)`: follows the ring (see `Source::of`;
    /// open for reading and writing: the read position is stored in it).
    fn new(ruby: &Ruby, ring: Value, name: String) -> Result<Follower, Error> {
        follow::Follower::new(&Source::of(ring)?, &name)
            .map(|follower| Follower(RefCell::new(follower)))
            .map_err(|err| trace_error(ruby, err))
    }

    /// `Follower.from_now(ring, name)`: follows the ring from its head,
    /// reading it only: the records made from now on, and only they are
    /// counted (a flight ring another recording fills).
    fn from_now(ruby: &Ruby, ring: Value, name: String) -> Result<Follower, Error> {
        follow::Follower::from_now(&Source::of(ring)?, &name)
            .map(|follower| Follower(RefCell::new(follower)))
            .map_err(|err| trace_error(ruby, err))
    }

    /// `poll(ring)`: reads what was committed since; how many records.
    fn poll(ruby: &Ruby, rb_self: &Self, ring: Value) -> Result<u64, Error> {
        rb_self
            .0
            .borrow_mut()
            .poll(&Source::of(ring)?)
            .map_err(|err| trace_error(ruby, err))
    }

    /// `finish(ring)`: the last read; how many records it found.
    fn finish(ruby: &Ruby, rb_self: &Self, ring: Value) -> Result<u64, Error> {
        rb_self
            .0
            .borrow_mut()
            .finish(&Source::of(ring)?)
            .map_err(|err| trace_error(ruby, err))
    }

    /// `[records, lost, dropped]` so far.
    fn counts(&self) -> (u64, u64, u64) {
        tuple(self.0.borrow().counts())
    }

    fn position(&self) -> u64 {
        self.0.borrow().position()
    }

    /// The probes of the ring, as `Trace#probe_list` gives them.
    fn probes(ruby: &Ruby, rb_self: &Self) -> Result<RArray, Error> {
        let follower = rb_self.0.borrow();
        let probes = ruby.ary_new_capa(follower.probes().len());
        for probe in follower.probes() {
            probes.push(probe_array(ruby, probe)?)?;
        }
        Ok(probes)
    }

    /// `write(fd)`: what was read, as a trace file written to `fd`.
    fn write(ruby: &Ruby, rb_self: &Self, out: Value) -> Result<(), Error> {
        let file = output_file(ruby, out)?;
        let mut out = BufWriter::with_capacity(1 << 20, &*file);
        rb_self
            .0
            .borrow()
            .write(&mut out)
            .and_then(|()| out.flush())
            .map_err(|err| write_error(ruby, err))
    }

    /// `records_after(bytes)`: the records read after the first `bytes`
    /// bytes of them (`held_bytes` before a read), as `Trace#record_list`
    /// gives records: for scripts and specs; the command only writes them.
    fn records_after(ruby: &Ruby, rb_self: &Self, bytes: usize) -> Result<RArray, Error> {
        let follower = rb_self.0.borrow();
        let mut records = Records::new(follower.probes());
        for (first, payload) in follower.records_after(bytes) {
            records.push_slots(first, &payload);
        }
        record_list(ruby, &records)
    }

    /// Bytes of the records held so far.
    fn held_bytes(&self) -> usize {
        self.0.borrow().held().len()
    }
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let class = module.define_class("Follower", ruby.class_object())?;
    class.define_singleton_method("new", function!(Follower::new, 2))?;
    class.define_singleton_method("from_now", function!(Follower::from_now, 2))?;
    class.define_method("poll", method!(Follower::poll, 1))?;
    class.define_method("finish", method!(Follower::finish, 1))?;
    class.define_method("counts", method!(Follower::counts, 0))?;
    class.define_method("position", method!(Follower::position, 0))?;
    class.define_method("write", method!(Follower::write, 1))?;
    class.define_method("records_after", method!(Follower::records_after, 1))?;
    class.define_method("held_bytes", method!(Follower::held_bytes, 0))?;
    class.define_method("probe_list", method!(Follower::probes, 0))?;
    Ok(())
}
