//! The ELF stub writer: one small shared object per provider.
//!
//! Every loadable byte is mapped at an address equal to its file offset, so
//! the tools that turn note addresses into file offsets (bcc uses the first
//! `.probes` section, perf the section containing the address, the kernel's
//! `ref_ctr_offset` wants a file offset) all agree whatever they do.
//!
//! ```text
//! page 0        ELF header, .stapsdt.base                       R
//! page 1+2k     .text   of chunk k: one `nop; ret` stub a probe  R X
//! page 2+2k     .probes of chunk k: one u16 semaphore a probe    R W
//! tail          program headers, .hash, .dynsym, .dynstr         R
//! tail page     .dynamic                                         R W
//! (not loaded)  .note.stapsdt, .shstrtab, section headers
//! ```
//!
//! Probes are placed in chunks of one text page and one semaphore page, and
//! new probes are only ever appended: a probe keeps its stub and semaphore
//! offsets when its provider grows. That is what lets a provider be rewritten
//! in place while a tracer is attached (the kernel keys uprobes by inode and
//! offset) without losing a single hit.

mod records;
mod writer;

use crate::arch::Arch;
use crate::names::{self, InvalidName, NameKind};
use crate::probe::ProbeSpec;
use std::collections::HashSet;
use std::fmt;

/// Where the one-byte `.stapsdt.base` section lives: right after the header.
pub const STAPSDT_BASE_ADDRESS: u64 = records::EHDR_SIZE;
/// Size of a semaphore: SystemTap's `unsigned short`.
pub const SEMAPHORE_SIZE: u64 = 2;
/// The largest page size an image is laid out for: far above any real one,
/// and low enough that no offset in an image can overflow.
pub const MAX_PAGE_SIZE: u64 = 1 << 30;

/// What to generate: a provider, its probes in declaration order, for which
/// machine, aligned to which page size.
#[derive(Clone, Copy, Debug)]
pub struct ImageSpec<'a> {
    pub provider: &'a str,
    pub probes: &'a [ProbeSpec],
    pub arch: Arch,
    pub page_size: u64,
}

/// A generated shared object and where its probes are in it.
#[derive(Clone, Debug)]
pub struct Image {
    pub bytes: Vec<u8>,
    pub layout: Layout,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    Provider(InvalidName),
    DuplicateProbe(String),
    PageSize(u64),
    /// More probes than one image can count in its 16-bit ELF header fields.
    TooManyProbes {
        given: usize,
        max: usize,
    },
    /// A value of the image does not fit the ELF field that holds it.
    TooLarge {
        field: &'static str,
        value: u64,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Provider(err) => err.fmt(f),
            BuildError::DuplicateProbe(name) => write!(f, "probe {name:?} is declared twice"),
            BuildError::PageSize(size) => write!(
                f,
                "page size {size} is not a power of two from 4096 to {MAX_PAGE_SIZE}"
            ),
            BuildError::TooManyProbes { given, max } => write!(
                f,
                "{given} probes do not fit in one provider's image, which holds at most {max}: \
                 spread them over more providers"
            ),
            BuildError::TooLarge { field, value } => write!(
                f,
                "the image cannot be written: its {field} would be {value}, more than ELF can hold"
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// Where probe `i` of a provider of `probe_count` probes lives. The answer for
/// a probe never depends on how many probes come after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    arch: Arch,
    page_size: u64,
    probe_count: usize,
}

impl Layout {
    pub fn new(arch: Arch, page_size: u64, probe_count: usize) -> Layout {
        Layout {
            arch,
            page_size,
            probe_count,
        }
    }

    pub fn arch(&self) -> Arch {
        self.arch
    }

    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    pub fn probe_count(&self) -> usize {
        self.probe_count
    }

    /// How many probes one text page and one semaphore page hold.
    pub fn probes_per_chunk(&self) -> usize {
        let by_text = self.page_size / self.arch.stub_stride() as u64;
        let by_semaphores = self.page_size / SEMAPHORE_SIZE;
        by_text.min(by_semaphores) as usize
    }

    pub fn chunk_count(&self) -> usize {
        self.probe_count.div_ceil(self.probes_per_chunk())
    }

    fn text_offset(&self, chunk: usize) -> u64 {
        self.page_size * (1 + 2 * chunk as u64)
    }

    fn semaphores_offset(&self, chunk: usize) -> u64 {
        self.page_size * (2 + 2 * chunk as u64)
    }

    fn probes_in_chunk(&self, chunk: usize) -> usize {
        let per_chunk = self.probes_per_chunk();
        (self.probe_count - chunk * per_chunk).min(per_chunk)
    }

    /// Address (relative to the load base) of probe `index`'s stub.
    pub fn stub_address(&self, index: usize) -> u64 {
        let per_chunk = self.probes_per_chunk();
        self.text_offset(index / per_chunk)
            + (index % per_chunk) as u64 * self.arch.stub_stride() as u64
    }

    /// Address (relative to the load base) of probe `index`'s semaphore.
    pub fn semaphore_address(&self, index: usize) -> u64 {
        let per_chunk = self.probes_per_chunk();
        self.semaphores_offset(index / per_chunk) + (index % per_chunk) as u64 * SEMAPHORE_SIZE
    }

    /// First byte after the probe chunks: where the variable metadata starts.
    fn tail_offset(&self) -> u64 {
        self.page_size * (1 + 2 * self.chunk_count() as u64)
    }
}

/// Generates the shared object for `spec`.
pub fn build(spec: &ImageSpec<'_>) -> Result<Image, BuildError> {
    names::validate(NameKind::Provider, spec.provider).map_err(BuildError::Provider)?;
    if !(4096..=MAX_PAGE_SIZE).contains(&spec.page_size) || !spec.page_size.is_power_of_two() {
        return Err(BuildError::PageSize(spec.page_size));
    }
    let mut seen = HashSet::with_capacity(spec.probes.len());
    for probe in spec.probes {
        if !seen.insert(probe.name()) {
            return Err(BuildError::DuplicateProbe(probe.name().to_owned()));
        }
    }
    let layout = Layout::new(spec.arch, spec.page_size, spec.probes.len());
    Ok(Image {
        bytes: writer::write(spec, layout)?,
        layout,
    })
}
