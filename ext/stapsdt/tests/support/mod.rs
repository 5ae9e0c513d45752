//! A reader for generated images built on the `object` crate, independent of
//! the writer: tests compare what it finds against what was asked for, and
//! `check` holds what every image must satisfy.
#![allow(dead_code)]

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, Sym};
use object::LittleEndian as LE;
use stapsdt::elf::{ImageSpec, Layout, STAPSDT_BASE_ADDRESS};

pub type Header = elf::FileHeader64<LE>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub pc: u64,
    pub base: u64,
    pub semaphore: u64,
    pub provider: String,
    pub name: String,
    pub args: String,
}

#[derive(Debug, Clone)]
pub struct Segment {
    pub kind: u32,
    pub flags: u32,
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub align: u64,
}

impl Segment {
    pub fn contains(&self, address: u64, len: u64) -> bool {
        address >= self.vaddr && address + len <= self.vaddr + self.memsz
    }
    pub fn readable(&self) -> bool {
        self.flags & elf::PF_R != 0
    }
    pub fn writable(&self) -> bool {
        self.flags & elf::PF_W != 0
    }
    pub fn executable(&self) -> bool {
        self.flags & elf::PF_X != 0
    }
}

#[derive(Debug, Clone)]
pub struct Section {
    pub name: String,
    pub kind: u32,
    pub flags: u64,
    pub address: u64,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
    pub align: u64,
}

#[derive(Debug, Clone)]
pub struct Symbol {
    pub name: String,
    pub value: u64,
    pub size: u64,
    pub kind: u8,
    pub section: u16,
}

pub struct Parsed<'a> {
    pub data: &'a [u8],
    pub header: &'a Header,
    pub segments: Vec<Segment>,
    pub sections: Vec<Section>,
    pub notes: Vec<Note>,
    pub symbols: Vec<Symbol>,
    hash: Vec<u32>,
}

impl<'a> Parsed<'a> {
    pub fn new(data: &'a [u8]) -> Parsed<'a> {
        let header = Header::parse(data).expect("ELF header");
        let endian = header.endian().unwrap();
        let segments = header
            .program_headers(endian, data)
            .expect("program headers")
            .iter()
            .map(|p| Segment {
                kind: p.p_type(endian),
                flags: p.p_flags(endian),
                offset: p.p_offset(endian),
                vaddr: p.p_vaddr(endian),
                filesz: p.p_filesz(endian),
                memsz: p.p_memsz(endian),
                align: p.p_align(endian),
            })
            .collect();
        let table = header.sections(endian, data).expect("section headers");
        let sections: Vec<Section> = table
            .iter()
            .map(|s| Section {
                name: String::from_utf8(table.section_name(endian, s).unwrap().to_vec()).unwrap(),
                kind: s.sh_type(endian),
                flags: s.sh_flags(endian),
                address: s.sh_addr(endian),
                offset: s.sh_offset(endian),
                size: s.sh_size(endian),
                link: s.sh_link(endian),
                align: s.sh_addralign(endian),
            })
            .collect();
        let mut notes = Vec::new();
        for section in table.iter() {
            // The other note, .note.gnu.build-id, is checked on its own.
            if table.section_name(endian, section).unwrap() != b".note.stapsdt" {
                continue;
            }
            let Some(mut iter) = section.notes(endian, data).expect("notes") else {
                continue;
            };
            while let Some(note) = iter.next().expect("note") {
                assert_eq!(note.name(), b"stapsdt", "note owner");
                assert_eq!(note.n_type(endian), 3, "note type NT_STAPSDT");
                notes.push(parse_desc(note.desc()));
            }
        }
        let dynsym = table
            .symbols(endian, data, elf::SHT_DYNSYM)
            .expect("dynsym");
        let symbols = dynsym
            .iter()
            .skip(1)
            .map(|s| Symbol {
                name: String::from_utf8(s.name(endian, dynsym.strings()).unwrap().to_vec())
                    .unwrap(),
                value: s.st_value(endian),
                size: s.st_size(endian),
                kind: s.st_type(),
                section: s.st_shndx(endian),
            })
            .collect();
        let hash = sections
            .iter()
            .find(|s| s.kind == elf::SHT_HASH)
            .map(|hash| {
                data[hash.offset as usize..(hash.offset + hash.size) as usize]
                    .chunks(4)
                    .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                    .collect()
            })
            .unwrap_or_default();
        Parsed {
            data,
            header,
            segments,
            sections,
            notes,
            symbols,
            hash,
        }
    }

    pub fn loads(&self) -> impl Iterator<Item = &Segment> {
        self.segments.iter().filter(|s| s.kind == elf::PT_LOAD)
    }

    pub fn load_containing(&self, address: u64, len: u64) -> Option<&Segment> {
        self.loads().find(|s| s.contains(address, len))
    }

    pub fn sections_named<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s Section> + 's {
        self.sections.iter().filter(move |s| s.name == name)
    }

    pub fn section_containing(&self, address: u64, len: u64) -> Option<&Section> {
        self.sections.iter().find(|s| {
            s.flags & u64::from(elf::SHF_ALLOC) != 0
                && address >= s.address
                && address + len <= s.address + s.size
        })
    }

    /// Bytes at a loaded address (identity-mapped images only).
    pub fn bytes_at(&self, address: u64, len: usize) -> &[u8] {
        let segment = self
            .load_containing(address, len as u64)
            .expect("address inside a PT_LOAD");
        let offset = (address - segment.vaddr + segment.offset) as usize;
        &self.data[offset..offset + len]
    }

    /// Looks a symbol up through `.hash`, as the dynamic loader would.
    pub fn hash_lookup(&self, name: &str) -> Option<u64> {
        let words = &self.hash;
        let (nbucket, nchain) = (words[0] as usize, words[1] as usize);
        assert_eq!(
            nchain,
            self.symbols.len() + 1,
            "nchain counts every dynamic symbol"
        );
        let mut index = words[2 + elf_hash(name.as_bytes()) as usize % nbucket] as usize;
        while index != 0 {
            let symbol = &self.symbols[index - 1];
            if symbol.name == name {
                return Some(symbol.value);
            }
            index = words[2 + nbucket + index] as usize;
        }
        None
    }

    /// `d_tag => d_val` of `.dynamic`.
    pub fn dynamic(&self) -> Vec<(u64, u64)> {
        let dynamic = self
            .sections
            .iter()
            .find(|s| s.kind == elf::SHT_DYNAMIC)
            .expect(".dynamic");
        self.data[dynamic.offset as usize..(dynamic.offset + dynamic.size) as usize]
            .chunks(16)
            .map(|c| {
                (
                    u64::from_le_bytes(c[..8].try_into().unwrap()),
                    u64::from_le_bytes(c[8..].try_into().unwrap()),
                )
            })
            .collect()
    }
}

/// Every property a tracer and the dynamic loader rely on.
pub fn check(spec: &ImageSpec<'_>, bytes: &[u8]) {
    let parsed = Parsed::new(bytes);
    let endian = object::LittleEndian;
    let header = parsed.header;
    assert_eq!(header.e_ident.class, elf::ELFCLASS64);
    assert_eq!(header.e_ident.data, elf::ELFDATA2LSB);
    assert_eq!(header.e_type.get(endian), elf::ET_DYN);
    assert_eq!(header.e_machine.get(endian), spec.arch.elf_machine());

    // Segments: identity-mapped, page aligned, in address order, never W+X.
    let loads: Vec<_> = parsed.loads().collect();
    assert!(
        loads
            .windows(2)
            .all(|w| w[0].vaddr + w[0].memsz <= w[1].vaddr),
        "PT_LOADs sorted, disjoint"
    );
    for load in &loads {
        assert_eq!(load.vaddr, load.offset, "identity mapping");
        assert_eq!(load.align, spec.page_size);
        assert_eq!(load.vaddr % spec.page_size, 0, "segments start on a page");
        assert!(load.readable());
        assert!(
            !(load.writable() && load.executable()),
            "no writable+executable segment: {load:?}"
        );
        assert!(load.offset + load.filesz <= bytes.len() as u64);
    }
    let pages = |s: &Segment| {
        (
            s.vaddr / spec.page_size,
            (s.vaddr + s.memsz.max(1) - 1) / spec.page_size,
        )
    };
    for pair in loads.windows(2) {
        assert!(
            pages(pair[0]).1 < pages(pair[1]).0,
            "no page shared by two segments"
        );
    }
    let stack = parsed
        .segments
        .iter()
        .find(|s| s.kind == elf::PT_GNU_STACK)
        .expect("PT_GNU_STACK");
    assert!(!stack.executable(), "non-executable stack");
    let dynamic = parsed
        .segments
        .iter()
        .find(|s| s.kind == elf::PT_DYNAMIC)
        .expect("PT_DYNAMIC");
    let dynamic_load = parsed
        .load_containing(dynamic.vaddr, dynamic.memsz)
        .expect(".dynamic is loaded");
    assert!(dynamic_load.writable(), "older loaders write to .dynamic");
    let phdrs = header.e_phoff.get(endian);
    assert!(parsed
        .load_containing(phdrs, u64::from(header.e_phnum.get(endian)) * 56)
        .is_some());

    // .dynamic points at loaded tables that agree with the section headers.
    let tags = parsed.dynamic();
    assert_eq!(tags.last(), Some(&(0, 0)), "DT_NULL terminates .dynamic");
    for (tag, name) in [
        (elf::DT_HASH, ".hash"),
        (elf::DT_SYMTAB, ".dynsym"),
        (elf::DT_STRTAB, ".dynstr"),
    ] {
        let section = parsed.sections_named(name).next().unwrap();
        let value = tags.iter().find(|(t, _)| *t == u64::from(tag)).unwrap().1;
        assert_eq!(value, section.address, "{name}");
        assert!(
            parsed
                .load_containing(section.address, section.size)
                .is_some(),
            "{name} loaded"
        );
    }

    // .stapsdt.base is a loaded section the notes' base field names.
    let base = parsed
        .sections_named(".stapsdt.base")
        .next()
        .expect(".stapsdt.base");
    assert_eq!(base.address, STAPSDT_BASE_ADDRESS);
    assert!(parsed.load_containing(base.address, 1).is_some());

    // Section order bcc's scanner depends on: first exec section, then a
    // `.probes`, then `.note.stapsdt`.
    let position = |pred: &dyn Fn(&Section) -> bool| parsed.sections.iter().position(pred);
    let note_at = position(&|s| s.name == ".note.stapsdt").expect(".note.stapsdt");
    if !spec.probes.is_empty() {
        let text_at = position(&|s| s.flags & u64::from(elf::SHF_EXECINSTR) != 0).unwrap();
        let probes_at = position(&|s| s.name == ".probes").unwrap();
        assert!(text_at < probes_at && probes_at < note_at);
        assert_eq!(parsed.sections[text_at].name, ".text");
    }
    assert_eq!(parsed.sections[note_at].kind, elf::SHT_NOTE);
    assert_eq!(parsed.sections[note_at].align, 4);
    let shstrndx = header.e_shstrndx.get(endian) as usize;
    assert_eq!(parsed.sections[shstrndx].name, ".shstrtab");
    let mut addressed: Vec<_> = parsed.sections.iter().filter(|s| s.address != 0).collect();
    let unsorted = addressed.clone();
    addressed.sort_by_key(|s| s.address);
    assert!(
        addressed
            .iter()
            .zip(&unsorted)
            .all(|(a, b)| a.address == b.address),
        "sections in address order"
    );

    // One note a probe, in declaration order, every field right.
    assert_eq!(parsed.notes.len(), spec.probes.len());
    let layout = Layout::new(spec.arch, spec.page_size, spec.probes.len());
    for (index, (note, probe)) in parsed.notes.iter().zip(spec.probes).enumerate() {
        assert_eq!(note.provider, spec.provider);
        assert_eq!(note.name, probe.name());
        assert_eq!(note.args, probe.arg_spec(spec.arch));
        assert_eq!(note.base, STAPSDT_BASE_ADDRESS);
        assert_eq!(note.pc, layout.stub_address(index));
        assert_eq!(note.semaphore, layout.semaphore_address(index));

        let stub = parsed
            .load_containing(note.pc, spec.arch.stub().len() as u64)
            .expect("pc in a PT_LOAD");
        assert!(stub.executable() && !stub.writable());
        assert_eq!(
            parsed.bytes_at(note.pc, spec.arch.stub().len()),
            spec.arch.stub()
        );
        assert_eq!(parsed.section_containing(note.pc, 1).unwrap().name, ".text");

        assert_eq!(note.semaphore % 2, 0, "semaphore 2-aligned");
        let semaphore = parsed
            .load_containing(note.semaphore, 2)
            .expect("semaphore in a PT_LOAD");
        assert!(semaphore.writable() && !semaphore.executable());
        assert!(
            note.semaphore + 2 <= semaphore.vaddr + semaphore.filesz,
            "semaphore backed by the file"
        );
        let section = parsed.section_containing(note.semaphore, 2).unwrap();
        assert_eq!(section.name, ".probes");
        assert_eq!(section.address - section.offset, 0, "file offset = address");
        assert_eq!(
            parsed.bytes_at(note.semaphore, 2),
            [0, 0],
            "semaphores start at zero"
        );

        let stub_symbol = format!("{}__{}", spec.provider, probe.name());
        let semaphore_symbol = format!("{}__{}.semaphore", spec.provider, probe.name());
        assert_eq!(
            parsed.hash_lookup(&stub_symbol),
            Some(note.pc),
            "{stub_symbol}"
        );
        assert_eq!(
            parsed.hash_lookup(&semaphore_symbol),
            Some(note.semaphore),
            "{semaphore_symbol}"
        );
    }
    let semaphores: std::collections::HashSet<_> =
        parsed.notes.iter().map(|n| n.semaphore).collect();
    assert_eq!(semaphores.len(), spec.probes.len(), "one semaphore a probe");
    assert_eq!(parsed.symbols.len(), 2 * spec.probes.len());
    for symbol in &parsed.symbols {
        let section = &parsed.sections[symbol.section as usize];
        assert!(
            symbol.value >= section.address
                && symbol.value + symbol.size <= section.address + section.size
        );
        let expected = if symbol.kind == elf::STT_FUNC {
            ".text"
        } else {
            ".probes"
        };
        assert_eq!(section.name, expected, "{}", symbol.name);
    }
}

fn parse_desc(desc: &[u8]) -> Note {
    let word = |i: usize| u64::from_le_bytes(desc[i * 8..i * 8 + 8].try_into().unwrap());
    let strings: Vec<String> = desc[24..]
        .split(|&b| b == 0)
        .map(|s| String::from_utf8(s.to_vec()).unwrap())
        .collect();
    assert_eq!(
        strings.len(),
        4,
        "provider, name and args, each NUL-terminated, and nothing after: {strings:?}"
    );
    assert_eq!(strings[3], "");
    Note {
        pc: word(0),
        base: word(1),
        semaphore: word(2),
        provider: strings[0].clone(),
        name: strings[1].clone(),
        args: strings[2].clone(),
    }
}

fn elf_hash(name: &[u8]) -> u32 {
    let mut h: u32 = 0;
    for &c in name {
        h = (h << 4).wrapping_add(u32::from(c));
        let g = h & 0xf000_0000;
        h ^= g >> 24;
        h &= !g;
    }
    h
}
