//! What a reader that reads one live ring again and again (the metrics'
//! tally, a follower) holds each read to: what the reads before found.
//!
//! A ring's writer only appends: once the ring is made its header never
//! changes, an entry of its probe table stays as it was written (the table
//! only grows), and its counters only grow. The file is its process's,
//! which may write anything there; a ring that breaks one of those rules
//! was rewritten, and read on as if it had not been, it would have its
//! reader count records twice (counters that go back), lose the names of
//! the calls it counted (a table that shrinks), or write a trace file that
//! no reader takes (a string limit lowered under records read before). So
//! it is refused: the reader keeps what it read before it and reads it no
//! more (docs/recording.md, "Reading a ring again").
//!
//! A process that records again makes a new ring: another file, whose
//! reads start afresh. A file is told from another by its device and
//! inode where the source has them; else by its process and the time it
//! was made, which its header's anchors say.

use super::checks::{self, FormatError};
use super::format::{
    encode_table, Counters, EntryError, Header, ProbeEntry, HEADER_SIZE, SEQUENCE_BITS,
};
use super::scan::{FileId, Opened};

/// More slots than a writer reserves between two reads (at a slot a
/// nanosecond, 39 hours): a head that leaps as far is rewritten. It
/// matters: a stamp keeps a sequence number's low 48 bits, so a head moved
/// on by 2^48 would have the reader take the records it read before again.
const HEAD_LEAP: u64 = 1 << (SEQUENCE_BITS - 1);

/// What the reads of one ring found so far.
#[derive(Clone, Debug)]
pub struct Continuity {
    file: Option<FileId>,
    header: Header,
    probes: Vec<ProbeEntry>,
    counters: Counters,
}

/// How a read stands to the reads before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// A later read of the same ring, which agrees with the ones before.
    Same,
    /// Another ring: another file, or (where files cannot be told apart)
    /// another header.
    Other,
}

impl Continuity {
    /// What the first read of the ring in `file` found.
    pub fn of(opened: &Opened, file: Option<FileId>) -> Continuity {
        Continuity {
            file,
            header: opened.header,
            probes: opened.probes.clone(),
            counters: opened.counters,
        }
    }

    /// The file the ring is in, if the source tells files apart.
    pub fn file(&self) -> Option<FileId> {
        self.file
    }

    /// The probes of the ring as its reads found them: every entry any
    /// read found, in the order the table holds them.
    pub fn probes(&self) -> &[ProbeEntry] {
        &self.probes
    }

    /// What the reads found, as a ring holds it: its header with the
    /// counters last read ([`HEADER_SIZE`] bytes), then its probe table;
    /// for a reader that hands its reads on to another (the tally the
    /// workers of one server share). [`Continuity::decode`] reads it back.
    /// The file is not in it: it is the caller's to keep.
    pub fn encode(&self) -> Result<Vec<u8>, EntryError> {
        let mut bytes = vec![0; HEADER_SIZE as usize];
        self.header.encode(&mut bytes);
        self.counters.encode(&mut bytes);
        bytes.extend_from_slice(&encode_table(&self.probes)?);
        Ok(bytes)
    }

    /// What [`Continuity::encode`] wrote, of the ring in `file`: checked
    /// as a ring's header and table are, since the bytes were kept where
    /// others could write them.
    pub fn decode(bytes: &[u8], file: Option<FileId>) -> Result<Continuity, FormatError> {
        let split = (HEADER_SIZE as usize).min(bytes.len());
        let (head, table) = bytes.split_at(split);
        let header = checks::header(head, u64::MAX)?;
        let counters = checks::counters(head, &header)?;
        if counters.table_used as usize != table.len() {
            return Err(FormatError::file(format!(
                "a continuity of {} table bytes, its table_used says {}",
                table.len(),
                counters.table_used
            )));
        }
        Ok(Continuity {
            file,
            header,
            probes: checks::table(table)?,
            counters,
        })
    }

    /// Whether `opened`, read from `file`, is the same ring read later or
    /// another ring; an error that says what changed when it is the same
    /// file and contradicts what was read before.
    pub fn next(&self, opened: &Opened, file: Option<FileId>) -> Result<Next, FormatError> {
        let same_file = match (self.file, file) {
            (Some(before), Some(now)) => before == now,
            _ => made_together(&opened.header, &self.header),
        };
        if !same_file {
            return Ok(Next::Other);
        }
        self.agrees(opened).map(|()| Next::Same)
    }

    /// That `opened`, a later read of the same ring, agrees with the reads
    /// before: an error that says what changed if it does not.
    pub fn agrees(&self, opened: &Opened) -> Result<(), FormatError> {
        self.contradiction(opened)
            .map_or(Ok(()), |what| Err(changed(&what)))
    }

    /// Takes in what a read that agreed found: the counters it read, the
    /// entries the table grew by.
    pub fn advance(&mut self, opened: &Opened) {
        self.counters = opened.counters;
        if opened.probes.len() > self.probes.len() {
            self.probes
                .extend_from_slice(&opened.probes[self.probes.len()..]);
        }
    }

    /// What `opened` contradicts of the reads before, said as a message.
    fn contradiction(&self, opened: &Opened) -> Option<String> {
        let (before, now) = (&self.header, &opened.header);
        if before != now {
            return Some(header_change(before, now));
        }
        if opened.probes.len() < self.probes.len() {
            return Some(format!(
                "its probe table shrank from {} entries to {} (a table only grows)",
                self.probes.len(),
                opened.probes.len()
            ));
        }
        if let Some(id) = (0..self.probes.len()).find(|&id| opened.probes[id] != self.probes[id]) {
            return Some(format!(
                "its probe table entry {id} changed from {} to {} (an entry stays as it was \
                 written)",
                self.probes[id].described(),
                opened.probes[id].described()
            ));
        }
        let counters = [
            ("head", self.counters.head, opened.counters.head),
            ("records", self.counters.records, opened.counters.records),
            ("dropped", self.counters.dropped, opened.counters.dropped),
        ];
        if let Some((name, before, now)) = counters.iter().find(|(_, before, now)| now < before) {
            return Some(format!(
                "its counter {name} went back from {before} to {now} (counters only grow)"
            ));
        }
        let (before, now) = (self.counters.head, opened.counters.head);
        (now - before >= HEAD_LEAP).then(|| {
            format!(
                "its counter head leapt from {before} to {now} (more slots than a writer \
                 reserves between two reads)"
            )
        })
    }
}

/// Whether two headers are of one ring, as far as a header tells: a ring
/// is made by a process at a time, which its anchors say.
fn made_together(one: &Header, other: &Header) -> bool {
    (one.pid, one.anchor_monotonic_ns, one.anchor_realtime_ns)
        == (
            other.pid,
            other.anchor_monotonic_ns,
            other.anchor_realtime_ns,
        )
}

/// The first header field that differs, as a message.
fn header_change(before: &Header, now: &Header) -> String {
    let fields: [(&str, i128, i128); 10] = [
        ("version", before.version.into(), now.version.into()),
        (
            "anchor_monotonic_ns",
            before.anchor_monotonic_ns.into(),
            now.anchor_monotonic_ns.into(),
        ),
        (
            "anchor_realtime_ns",
            before.anchor_realtime_ns.into(),
            now.anchor_realtime_ns.into(),
        ),
        (
            "max_string",
            before.max_string.into(),
            now.max_string.into(),
        ),
        (
            "slot_count",
            before.slot_count.into(),
            now.slot_count.into(),
        ),
        ("flags", before.flags.into(), now.flags.into()),
        (
            "table_capacity",
            before.table_capacity.into(),
            now.table_capacity.into(),
        ),
        (
            "ring_offset",
            before.ring_offset.into(),
            now.ring_offset.into(),
        ),
        ("pid", before.pid.into(), now.pid.into()),
        (
            "pid_namespace",
            before.pid_namespace.into(),
            now.pid_namespace.into(),
        ),
    ];
    let (name, was, is) = fields
        .into_iter()
        .find(|(_, was, is)| was != is)
        .unwrap_or(("header", 0, 0));
    format!("its header field {name} changed from {was} to {is} (a ring's header never changes)")
}

fn changed(what: &str) -> FormatError {
    FormatError::file(format!(
        "the ring was rewritten since it was last read: {what}; it is read no more"
    ))
}
