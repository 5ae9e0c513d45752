//! A ring or trace file read whole: its header, its probes and the
//! records it holds, in sequence order, held compactly ([`Records`]).

use crate::records::Records;
use stapsdt::ring::scan::{self, Pass, ReadAt};
use stapsdt::ring::{Counters, Header, ProbeEntry, TraceError};

/// A file read: what the reports are made of.
#[derive(Clone, Debug)]
pub struct Trace {
    /// The file's name, as messages give it.
    pub name: String,
    pub header: Header,
    /// For a live ring, as of the moment it was read (its cut).
    pub counters: Counters,
    pub probes: Vec<ProbeEntry>,
    /// In sequence order.
    pub records: Records,
}

impl Trace {
    /// Reads the file in `source`, named `name` in messages: a trace file
    /// in one pass, a ring (its process may be writing it) at a cut, in
    /// passes A, B and C.
    pub fn read(source: &(impl ReadAt + ?Sized), name: &str) -> Result<Trace, TraceError> {
        let mut opened = scan::open(source, Pass::Live).map_err(|err| TraceError::of(name, err))?;
        // The table the records were checked against: a live ring's may
        // grow by the time they are all read, never shrink.
        let mut records = Records::new(&opened.probes);
        opened
            .read_all(source, |record, _| records.push(&record))
            .map_err(|err| TraceError::of(name, err))?;
        records.sort();
        Ok(Trace {
            name: name.to_owned(),
            header: opened.header,
            counters: opened.counters,
            probes: opened.probes,
            records,
        })
    }

    /// Records the process reserved (dropped ones not included), at least
    /// those read.
    pub fn records_total(&self) -> u64 {
        self.counters.records.max(self.records_read())
    }

    /// Records read: calls held, and context records.
    pub fn records_read(&self) -> u64 {
        self.records.len() as u64 + self.records.context_records()
    }

    /// Records reserved and not read: dropped (the ring or the probe table
    /// was full), overwritten (flight mode) or being written while read.
    pub fn lost(&self) -> u64 {
        self.counters.dropped + self.unread()
    }

    /// Records reserved and not in the file (overwritten, or being written).
    pub fn unread(&self) -> u64 {
        self.records_total() - self.records_read()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_breaks_the_format_is_named_in_the_error() {
        let mut bytes = vec![0; 8192];
        bytes[..9].copy_from_slice(b"NOTATRACE");
        let err = Trace::read(&bytes[..], "broken.trace")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("broken.trace: not a static_tracing ring or trace file"),
            "{err}"
        );
    }
}
