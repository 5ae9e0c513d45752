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

use crate::arch::Arch;
use crate::names::{self, InvalidName, NameKind};
use crate::probe::ProbeSpec;
use std::collections::HashSet;
use std::fmt;

/// Where the one-byte `.stapsdt.base` section lives: right after the header.
pub const STAPSDT_BASE_ADDRESS: u64 = EHDR_SIZE;
/// Size of a semaphore: SystemTap's `unsigned short`.
pub const SEMAPHORE_SIZE: u64 = 2;

const EHDR_SIZE: u64 = 64;
const PHDR_SIZE: u64 = 56;
const SHDR_SIZE: u64 = 64;
const SYM_SIZE: u64 = 24;
const DYN_SIZE: u64 = 16;

const NT_STAPSDT: u32 = 3;
const NT_GNU_BUILD_ID: u32 = 3;
const BUILD_ID_SIZE: usize = 20;
const BUILD_ID_NOTE_SIZE: u64 = 16 + BUILD_ID_SIZE as u64;
const NOTE_OWNER: &[u8; 8] = b"stapsdt\0";

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
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Provider(err) => err.fmt(f),
            BuildError::DuplicateProbe(name) => write!(f, "probe {name:?} is declared twice"),
            BuildError::PageSize(size) => {
                write!(f, "page size {size} is not a power of two of at least 4096")
            }
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
    if spec.page_size < 4096 || !spec.page_size.is_power_of_two() {
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
        bytes: Writer::new(spec, layout).write(),
        layout,
    })
}

fn align_up(value: u64, alignment: u64) -> u64 {
    value.div_ceil(alignment) * alignment
}

/// The classic System V symbol hash (`DT_HASH`).
fn elf_hash(name: &[u8]) -> u32 {
    let mut hash: u32 = 0;
    for &byte in name {
        hash = (hash << 4).wrapping_add(byte as u32);
        let high = hash & 0xf000_0000;
        if high != 0 {
            hash ^= high >> 24;
        }
        hash &= !high;
    }
    hash
}

/// A string table under construction.
#[derive(Default)]
struct StringTable {
    bytes: Vec<u8>,
}

impl StringTable {
    fn new() -> StringTable {
        StringTable { bytes: vec![0] }
    }

    fn add(&mut self, parts: &[&str]) -> u32 {
        let offset = self.bytes.len() as u32;
        for part in parts {
            self.bytes.extend_from_slice(part.as_bytes());
        }
        self.bytes.push(0);
        offset
    }

    /// The NUL-terminated string starting at `offset`.
    fn get(&self, offset: u32) -> &[u8] {
        let rest = &self.bytes[offset as usize..];
        &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
    }
}

struct Symbol {
    name: u32,
    info: u8,
    section: u16,
    value: u64,
    size: u64,
}

struct SectionHeader {
    name: u32,
    kind: u32,
    flags: u64,
    address: u64,
    offset: u64,
    size: u64,
    link: u32,
    info: u32,
    align: u64,
    entry_size: u64,
}

impl SectionHeader {
    /// Loaded sections sit at an address equal to their offset; others at 0.
    fn new(name: u32, kind: u32, flags: u64, offset: u64, size: u64, align: u64) -> SectionHeader {
        SectionHeader {
            name,
            kind,
            flags,
            address: if flags & SHF_ALLOC != 0 { offset } else { 0 },
            offset,
            size,
            link: 0,
            info: 0,
            align,
            entry_size: 0,
        }
    }

    fn table(self, link: u32, info: u32, entry_size: u64) -> SectionHeader {
        SectionHeader {
            link,
            info,
            entry_size,
            ..self
        }
    }
}

struct ProgramHeader {
    kind: u32,
    flags: u32,
    offset: u64,
    size: u64,
    align: u64,
}

mod consts {
    pub const PT_LOAD: u32 = 1;
    pub const PT_DYNAMIC: u32 = 2;
    pub const PT_NOTE: u32 = 4;
    pub const PT_GNU_STACK: u32 = 0x6474_e551;
    pub const PF_X: u32 = 1;
    pub const PF_W: u32 = 2;
    pub const PF_R: u32 = 4;
    pub const SHT_PROGBITS: u32 = 1;
    pub const SHT_STRTAB: u32 = 3;
    pub const SHT_HASH: u32 = 5;
    pub const SHT_DYNAMIC: u32 = 6;
    pub const SHT_NOTE: u32 = 7;
    pub const SHT_DYNSYM: u32 = 11;
    pub const SHF_WRITE: u64 = 1;
    pub const SHF_ALLOC: u64 = 2;
    pub const SHF_EXECINSTR: u64 = 4;
    pub const STB_GLOBAL: u8 = 1;
    pub const STT_OBJECT: u8 = 1;
    pub const STT_FUNC: u8 = 2;
    pub const DT_NULL: u64 = 0;
    pub const DT_HASH: u64 = 4;
    pub const DT_STRTAB: u64 = 5;
    pub const DT_SYMTAB: u64 = 6;
    pub const DT_STRSZ: u64 = 10;
    pub const DT_SYMENT: u64 = 11;
}
use consts::*;

/// Lays out and emits one image. Section indices are fixed by the layout:
/// null, `.stapsdt.base`, a `.text` and a `.probes` per chunk, then the tail.
struct Writer<'a> {
    spec: &'a ImageSpec<'a>,
    layout: Layout,
    out: Vec<u8>,
}

impl<'a> Writer<'a> {
    fn new(spec: &'a ImageSpec<'a>, layout: Layout) -> Writer<'a> {
        Writer {
            spec,
            layout,
            out: Vec::new(),
        }
    }

    fn text_section(chunk: usize) -> u16 {
        (2 + 2 * chunk) as u16
    }

    fn semaphores_section(chunk: usize) -> u16 {
        (3 + 2 * chunk) as u16
    }

    fn write(mut self) -> Vec<u8> {
        let spec = self.spec;
        let layout = self.layout;
        let arch = spec.arch;
        let page = spec.page_size;
        let chunks = layout.chunk_count();
        let per_chunk = layout.probes_per_chunk();

        // Symbols: a stub function (`provider__probe`) and a semaphore object
        // (`provider__probe.semaphore`) per probe. Names cannot contain a
        // dot, so no stub's symbol can be another probe's semaphore's, as
        // `_x` + `_semaphore` and `x_semaphore` would be with underscores.
        let mut dynstr = StringTable::new();
        let mut symbols = Vec::with_capacity(1 + 2 * spec.probes.len());
        symbols.push(Symbol {
            name: 0,
            info: 0,
            section: 0,
            value: 0,
            size: 0,
        });
        for (index, probe) in spec.probes.iter().enumerate() {
            let chunk = index / per_chunk;
            symbols.push(Symbol {
                name: dynstr.add(&[spec.provider, "__", probe.name()]),
                info: (STB_GLOBAL << 4) | STT_FUNC,
                section: Self::text_section(chunk),
                value: layout.stub_address(index),
                size: arch.stub().len() as u64,
            });
            symbols.push(Symbol {
                name: dynstr.add(&[spec.provider, "__", probe.name(), ".semaphore"]),
                info: (STB_GLOBAL << 4) | STT_OBJECT,
                section: Self::semaphores_section(chunk),
                value: layout.semaphore_address(index),
                size: SEMAPHORE_SIZE,
            });
        }
        let hash = Self::hash_table(&symbols, &dynstr);

        let mut shstrtab = StringTable::new();
        let name_base = shstrtab.add(&[".stapsdt.base"]);
        let name_text = shstrtab.add(&[".text"]);
        let name_probes = shstrtab.add(&[".probes"]);
        let name_hash = shstrtab.add(&[".hash"]);
        let name_dynsym = shstrtab.add(&[".dynsym"]);
        let name_dynstr = shstrtab.add(&[".dynstr"]);
        let name_dynamic = shstrtab.add(&[".dynamic"]);
        let name_note = shstrtab.add(&[".note.stapsdt"]);
        let name_build_id = shstrtab.add(&[".note.gnu.build-id"]);
        let name_shstrtab = shstrtab.add(&[".shstrtab"]);

        // The tail: read-only metadata the loader needs, then `.dynamic`.
        let phnum = 1 + 2 * chunks as u64 + 5;
        let phdr_offset = layout.tail_offset();
        let hash_offset = phdr_offset + phnum * PHDR_SIZE;
        let dynsym_offset = align_up(hash_offset + hash.len() as u64 * 4, 8);
        let dynstr_offset = dynsym_offset + symbols.len() as u64 * SYM_SIZE;
        let build_id_offset = align_up(dynstr_offset + dynstr.bytes.len() as u64, 4);
        let tail_ro_end = build_id_offset + BUILD_ID_NOTE_SIZE;
        let dynamic_offset = align_up(tail_ro_end, page);
        let dynamic: [(u64, u64); 6] = [
            (DT_HASH, hash_offset),
            (DT_STRTAB, dynstr_offset),
            (DT_SYMTAB, dynsym_offset),
            (DT_STRSZ, dynstr.bytes.len() as u64),
            (DT_SYMENT, SYM_SIZE),
            (DT_NULL, 0),
        ];
        let dynamic_size = dynamic.len() as u64 * DYN_SIZE;
        let notes = self.notes();
        let note_offset = align_up(dynamic_offset + dynamic_size, 4);
        let shstrtab_offset = note_offset + notes.len() as u64;
        let shdr_offset = align_up(shstrtab_offset + shstrtab.bytes.len() as u64, 8);
        let shnum = 9 + 2 * chunks as u64;
        self.out = vec![0; (shdr_offset + shnum * SHDR_SIZE) as usize];

        // Program headers, in address order as the loader requires.
        let mut phdrs = vec![ProgramHeader {
            kind: PT_LOAD,
            flags: PF_R,
            offset: 0,
            size: STAPSDT_BASE_ADDRESS + 1,
            align: page,
        }];
        let mut sections = vec![
            SectionHeader::new(0, 0, 0, 0, 0, 0),
            SectionHeader::new(
                name_base,
                SHT_PROGBITS,
                SHF_ALLOC,
                STAPSDT_BASE_ADDRESS,
                1,
                1,
            ),
        ];
        for chunk in 0..chunks {
            let count = layout.probes_in_chunk(chunk) as u64;
            let first = chunk * per_chunk;
            let text_size = count * arch.stub_stride() as u64;
            let semaphores_size = count * SEMAPHORE_SIZE;
            let text_offset = layout.stub_address(first);
            let semaphores_offset = layout.semaphore_address(first);
            for index in 0..count {
                self.put(text_offset + index * arch.stub_stride() as u64, arch.stub());
            }
            phdrs.push(ProgramHeader {
                kind: PT_LOAD,
                flags: PF_R | PF_X,
                offset: text_offset,
                size: text_size,
                align: page,
            });
            phdrs.push(ProgramHeader {
                kind: PT_LOAD,
                flags: PF_R | PF_W,
                offset: semaphores_offset,
                size: semaphores_size,
                align: page,
            });
            sections.push(SectionHeader::new(
                name_text,
                SHT_PROGBITS,
                SHF_ALLOC | SHF_EXECINSTR,
                text_offset,
                text_size,
                arch.stub_stride() as u64,
            ));
            sections.push(SectionHeader::new(
                name_probes,
                SHT_PROGBITS,
                SHF_ALLOC | SHF_WRITE,
                semaphores_offset,
                semaphores_size,
                SEMAPHORE_SIZE,
            ));
        }
        let dynsym_index = 3 + 2 * chunks as u32;
        let dynstr_index = dynsym_index + 1;
        phdrs.push(ProgramHeader {
            kind: PT_LOAD,
            flags: PF_R,
            offset: phdr_offset,
            size: tail_ro_end - phdr_offset,
            align: page,
        });
        phdrs.push(ProgramHeader {
            kind: PT_LOAD,
            flags: PF_R | PF_W,
            offset: dynamic_offset,
            size: dynamic_size,
            align: page,
        });
        phdrs.push(ProgramHeader {
            kind: PT_DYNAMIC,
            flags: PF_R | PF_W,
            offset: dynamic_offset,
            size: dynamic_size,
            align: 8,
        });
        phdrs.push(ProgramHeader {
            kind: PT_NOTE,
            flags: PF_R,
            offset: build_id_offset,
            size: BUILD_ID_NOTE_SIZE,
            align: 4,
        });
        // Without it the loader would assume the stub needs an executable stack.
        phdrs.push(ProgramHeader {
            kind: PT_GNU_STACK,
            flags: PF_R | PF_W,
            offset: 0,
            size: 0,
            align: 16,
        });
        debug_assert_eq!(phdrs.len() as u64, phnum);
        let symbols_size = symbols.len() as u64 * SYM_SIZE;
        let dynstr_size = dynstr.bytes.len() as u64;
        sections.extend([
            SectionHeader::new(
                name_hash,
                SHT_HASH,
                SHF_ALLOC,
                hash_offset,
                hash.len() as u64 * 4,
                8,
            )
            .table(dynsym_index, 0, 4),
            SectionHeader::new(
                name_dynsym,
                SHT_DYNSYM,
                SHF_ALLOC,
                dynsym_offset,
                symbols_size,
                8,
            )
            .table(dynstr_index, 1, SYM_SIZE),
            SectionHeader::new(
                name_dynstr,
                SHT_STRTAB,
                SHF_ALLOC,
                dynstr_offset,
                dynstr_size,
                1,
            ),
            SectionHeader::new(
                name_build_id,
                SHT_NOTE,
                SHF_ALLOC,
                build_id_offset,
                BUILD_ID_NOTE_SIZE,
                4,
            ),
            SectionHeader::new(
                name_dynamic,
                SHT_DYNAMIC,
                SHF_ALLOC | SHF_WRITE,
                dynamic_offset,
                dynamic_size,
                8,
            )
            .table(dynstr_index, 0, DYN_SIZE),
            SectionHeader::new(name_note, SHT_NOTE, 0, note_offset, notes.len() as u64, 4),
            SectionHeader::new(
                name_shstrtab,
                SHT_STRTAB,
                0,
                shstrtab_offset,
                shstrtab.bytes.len() as u64,
                1,
            ),
        ]);
        debug_assert_eq!(sections.len() as u64, shnum);

        self.put_header(phdr_offset, phnum, shdr_offset, shnum);
        for (index, phdr) in phdrs.iter().enumerate() {
            self.put_program_header(phdr_offset + index as u64 * PHDR_SIZE, phdr);
        }
        for (index, word) in hash.iter().enumerate() {
            self.put(hash_offset + index as u64 * 4, &word.to_le_bytes());
        }
        for (index, symbol) in symbols.iter().enumerate() {
            self.put_symbol(dynsym_offset + index as u64 * SYM_SIZE, symbol);
        }
        self.put(dynstr_offset, &dynstr.bytes);
        for (index, (tag, value)) in dynamic.iter().enumerate() {
            let at = dynamic_offset + index as u64 * DYN_SIZE;
            self.put(at, &tag.to_le_bytes());
            self.put(at + 8, &value.to_le_bytes());
        }
        self.put(note_offset, &notes);
        self.put(shstrtab_offset, &shstrtab.bytes);
        for (index, section) in sections.iter().enumerate() {
            self.put_section_header(shdr_offset + index as u64 * SHDR_SIZE, section);
        }
        self.put_build_id(build_id_offset);
        self.out
    }

    /// A GNU build-id note, as every linked shared object has: perf keys its
    /// cache of probed binaries (`perf buildid-cache`, `sdt_*` events) on it.
    /// The id is a digest of the rest of the image, so it changes with it.
    fn put_build_id(&mut self, at: u64) {
        self.put(at, &4u32.to_le_bytes());
        self.put(at + 4, &(BUILD_ID_SIZE as u32).to_le_bytes());
        self.put(at + 8, &NT_GNU_BUILD_ID.to_le_bytes());
        self.put(at + 12, b"GNU\0");
        let mut id = [0u8; BUILD_ID_SIZE];
        for (round, chunk) in id.chunks_mut(8).enumerate() {
            let mut hasher = std::hash::DefaultHasher::new();
            std::hash::Hasher::write_usize(&mut hasher, round);
            std::hash::Hasher::write(&mut hasher, &self.out);
            let digest = std::hash::Hasher::finish(&hasher).to_le_bytes();
            chunk.copy_from_slice(&digest[..chunk.len()]);
        }
        self.put(at + 16, &id);
    }

    /// `nbucket`, `nchain`, the buckets, then the chains.
    fn hash_table(symbols: &[Symbol], dynstr: &StringTable) -> Vec<u32> {
        let nchain = symbols.len();
        let nbucket = (nchain / 2).max(1);
        let mut table = vec![0u32; 2 + nbucket + nchain];
        table[0] = nbucket as u32;
        table[1] = nchain as u32;
        for (index, symbol) in symbols.iter().enumerate().skip(1) {
            let bucket = 2 + elf_hash(dynstr.get(symbol.name)) as usize % nbucket;
            table[2 + nbucket + index] = table[bucket];
            table[bucket] = index as u32;
        }
        table
    }

    /// One `NT_STAPSDT` note a probe, each 4-byte aligned.
    fn notes(&self) -> Vec<u8> {
        let spec = self.spec;
        let mut notes = Vec::new();
        for (index, probe) in spec.probes.iter().enumerate() {
            let mut desc = Vec::with_capacity(64);
            desc.extend_from_slice(&self.layout.stub_address(index).to_le_bytes());
            desc.extend_from_slice(&STAPSDT_BASE_ADDRESS.to_le_bytes());
            desc.extend_from_slice(&self.layout.semaphore_address(index).to_le_bytes());
            for text in [spec.provider, probe.name(), &probe.arg_spec(spec.arch)] {
                desc.extend_from_slice(text.as_bytes());
                desc.push(0);
            }
            notes.extend_from_slice(&(NOTE_OWNER.len() as u32).to_le_bytes());
            notes.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            notes.extend_from_slice(&NT_STAPSDT.to_le_bytes());
            notes.extend_from_slice(NOTE_OWNER);
            notes.extend_from_slice(&desc);
            notes.resize(align_up(notes.len() as u64, 4) as usize, 0);
        }
        notes
    }

    fn put(&mut self, offset: u64, bytes: &[u8]) {
        let start = offset as usize;
        self.out[start..start + bytes.len()].copy_from_slice(bytes);
    }

    fn put_header(&mut self, phoff: u64, phnum: u64, shoff: u64, shnum: u64) {
        const ELFCLASS64: u8 = 2;
        const ELFDATA2LSB: u8 = 1;
        const EV_CURRENT: u8 = 1;
        const ET_DYN: u16 = 3;
        self.put(
            0,
            &[0x7f, b'E', b'L', b'F', ELFCLASS64, ELFDATA2LSB, EV_CURRENT],
        );
        self.put(16, &ET_DYN.to_le_bytes());
        self.put(18, &self.spec.arch.elf_machine().to_le_bytes());
        self.put(20, &(EV_CURRENT as u32).to_le_bytes());
        // e_entry stays 0: nothing runs on load.
        self.put(32, &phoff.to_le_bytes());
        self.put(40, &shoff.to_le_bytes());
        self.put(52, &(EHDR_SIZE as u16).to_le_bytes());
        self.put(54, &(PHDR_SIZE as u16).to_le_bytes());
        self.put(56, &(phnum as u16).to_le_bytes());
        self.put(58, &(SHDR_SIZE as u16).to_le_bytes());
        self.put(60, &(shnum as u16).to_le_bytes());
        self.put(62, &((shnum - 1) as u16).to_le_bytes());
    }

    fn put_program_header(&mut self, at: u64, phdr: &ProgramHeader) {
        self.put(at, &phdr.kind.to_le_bytes());
        self.put(at + 4, &phdr.flags.to_le_bytes());
        for (field, value) in [
            phdr.offset,
            phdr.offset,
            phdr.offset,
            phdr.size,
            phdr.size,
            phdr.align,
        ]
        .iter()
        .enumerate()
        {
            self.put(at + 8 + field as u64 * 8, &value.to_le_bytes());
        }
    }

    fn put_symbol(&mut self, at: u64, symbol: &Symbol) {
        self.put(at, &symbol.name.to_le_bytes());
        self.put(at + 4, &[symbol.info, 0]);
        self.put(at + 6, &symbol.section.to_le_bytes());
        self.put(at + 8, &symbol.value.to_le_bytes());
        self.put(at + 16, &symbol.size.to_le_bytes());
    }

    fn put_section_header(&mut self, at: u64, section: &SectionHeader) {
        self.put(at, &section.name.to_le_bytes());
        self.put(at + 4, &section.kind.to_le_bytes());
        self.put(at + 8, &section.flags.to_le_bytes());
        self.put(at + 16, &section.address.to_le_bytes());
        self.put(at + 24, &section.offset.to_le_bytes());
        self.put(at + 32, &section.size.to_le_bytes());
        self.put(at + 40, &section.link.to_le_bytes());
        self.put(at + 44, &section.info.to_le_bytes());
        self.put(at + 48, &section.align.to_le_bytes());
        self.put(at + 56, &section.entry_size.to_le_bytes());
    }
}
