//! Lays out and emits one image, in the order of the module docs of
//! [`super`]: the probe chunks, then the tail, each part where
//! [`Tail::place`] puts it.

use super::records::*;
use super::{BuildError, ImageSpec, Layout, SEMAPHORE_SIZE, STAPSDT_BASE_ADDRESS};

const NT_STAPSDT: u32 = 3;
const NT_GNU_BUILD_ID: u32 = 3;
const STAPSDT_OWNER: &[u8] = b"stapsdt\0";
const GNU_OWNER: &[u8] = b"GNU\0";
const BUILD_ID_SIZE: usize = 20;

/// Section indices are fixed by the layout: the null section,
/// `.stapsdt.base`, a `.text` and a `.probes` a chunk, then the tail's, in
/// the order of [`TailSection`].
const BASE_SECTION: usize = 1;
/// Segments: `.stapsdt.base`'s page, a text and a semaphore one a chunk,
/// then these of the tail: read-only metadata, `.dynamic` as loaded and as
/// `PT_DYNAMIC`, the build-id note, `PT_GNU_STACK`.
const TAIL_SEGMENTS: usize = 5;

#[derive(Clone, Copy)]
enum TailSection {
    Hash,
    Dynsym,
    Dynstr,
    BuildId,
    Dynamic,
    ProbeNotes,
    SectionNames,
}

impl TailSection {
    const IN_ORDER: [TailSection; 7] = [
        TailSection::Hash,
        TailSection::Dynsym,
        TailSection::Dynstr,
        TailSection::BuildId,
        TailSection::Dynamic,
        TailSection::ProbeNotes,
        TailSection::SectionNames,
    ];
}

fn text_section(chunk: usize) -> usize {
    BASE_SECTION + 1 + 2 * chunk
}

fn semaphores_section(chunk: usize) -> usize {
    BASE_SECTION + 2 + 2 * chunk
}

fn tail_section(chunks: usize, section: TailSection) -> usize {
    BASE_SECTION + 1 + 2 * chunks + section as usize
}

fn section_count(chunks: usize) -> usize {
    tail_section(chunks, TailSection::SectionNames) + 1
}

fn segment_count(chunks: usize) -> usize {
    1 + 2 * chunks + TAIL_SEGMENTS
}

/// The ELF header's counts, which have 16 bits.
struct HeaderCounts {
    segments: u16,
    sections: u16,
}

impl HeaderCounts {
    fn of(layout: &Layout) -> Result<HeaderCounts, BuildError> {
        let chunks = layout.chunk_count();
        let (segments, sections) = (segment_count(chunks), section_count(chunks));
        if sections >= SHN_LORESERVE || segments >= PN_XNUM {
            return Err(BuildError::TooManyProbes {
                given: layout.probe_count(),
                max: max_probe_count(layout),
            });
        }
        Ok(HeaderCounts {
            segments: narrow(segments as u64, "program header count")?,
            sections: narrow(sections as u64, "section count")?,
        })
    }
}

/// The most probes one image of `layout`'s architecture and page size can
/// hold without extended section numbering.
pub fn max_probe_count(layout: &Layout) -> usize {
    let chunks_by_sections = (SHN_LORESERVE - 1 - section_count(0)) / 2;
    let chunks_by_segments = (PN_XNUM - 1 - segment_count(0)) / 2;
    chunks_by_sections.min(chunks_by_segments) * layout.probes_per_chunk()
}

/// The offsets of the tail's parts, from the first byte after the chunks.
struct Tail {
    program_headers: u64,
    hash: u64,
    dynsym: u64,
    dynstr: u64,
    build_id: u64,
    read_only_end: u64,
    dynamic: u64,
    probe_notes: u64,
    section_names: u64,
    section_headers: u64,
    end: u64,
}

impl Tail {
    fn place(
        layout: &Layout,
        counts: &HeaderCounts,
        symbols: &DynamicSymbols,
        probe_notes_size: u64,
        section_names_size: u64,
    ) -> Tail {
        let program_headers = layout.tail_offset();
        let hash = program_headers + u64::from(counts.segments) * PHDR_SIZE;
        let dynsym = align_up(hash + symbols.hash_size(), 8);
        let dynstr = dynsym + symbols.symbols_size();
        let build_id = align_up(dynstr + symbols.names.size(), 4);
        let read_only_end = build_id + build_id_note(&[0; BUILD_ID_SIZE]).size();
        let dynamic = align_up(read_only_end, layout.page_size());
        let probe_notes = align_up(dynamic + DYNAMIC_SIZE, 4);
        let section_names = probe_notes + probe_notes_size;
        let section_headers = align_up(section_names + section_names_size, 8);
        Tail {
            program_headers,
            hash,
            dynsym,
            dynstr,
            build_id,
            read_only_end,
            dynamic,
            probe_notes,
            section_names,
            section_headers,
            end: section_headers + u64::from(counts.sections) * SHDR_SIZE,
        }
    }
}

fn align_up(value: u64, alignment: u64) -> u64 {
    value.div_ceil(alignment) * alignment
}

/// A stub function (`provider__probe`) and a semaphore object
/// (`provider__probe.semaphore`) a probe, their names and their hash table.
/// Names cannot contain a dot, so no stub's symbol can be another probe's
/// semaphore's, as `_x` + `_semaphore` and `x_semaphore` would be with
/// underscores.
struct DynamicSymbols {
    symbols: Vec<Symbol>,
    names: StringTable,
    hash: Vec<u32>,
}

impl DynamicSymbols {
    fn of(spec: &ImageSpec<'_>, layout: &Layout) -> Result<DynamicSymbols, BuildError> {
        let per_chunk = layout.probes_per_chunk();
        let mut names = StringTable::new();
        let mut symbols = Vec::with_capacity(1 + 2 * spec.probes.len());
        symbols.push(Symbol::NULL);
        for (index, probe) in spec.probes.iter().enumerate() {
            let chunk = index / per_chunk;
            symbols.push(Symbol {
                name: names.add(&[spec.provider, "__", probe.name()])?,
                info: (STB_GLOBAL << 4) | STT_FUNC,
                section: narrow(text_section(chunk) as u64, "section index")?,
                value: layout.stub_address(index),
                size: spec.arch.stub().len() as u64,
            });
            symbols.push(Symbol {
                name: names.add(&[spec.provider, "__", probe.name(), ".semaphore"])?,
                info: (STB_GLOBAL << 4) | STT_OBJECT,
                section: narrow(semaphores_section(chunk) as u64, "section index")?,
                value: layout.semaphore_address(index),
                size: SEMAPHORE_SIZE,
            });
        }
        let hash = hash_table(&symbols, &names)?;
        Ok(DynamicSymbols {
            symbols,
            names,
            hash,
        })
    }

    fn hash_size(&self) -> u64 {
        self.hash.len() as u64 * HASH_WORD_SIZE
    }

    fn symbols_size(&self) -> u64 {
        self.symbols.len() as u64 * SYM_SIZE
    }
}

/// The names of the sections, offsets into `.shstrtab`.
struct SectionNames {
    table: StringTable,
    base: u32,
    text: u32,
    probes: u32,
    hash: u32,
    dynsym: u32,
    dynstr: u32,
    dynamic: u32,
    probe_notes: u32,
    build_id: u32,
    section_names: u32,
}

impl SectionNames {
    fn new() -> Result<SectionNames, BuildError> {
        let mut table = StringTable::new();
        Ok(SectionNames {
            base: table.add(&[".stapsdt.base"])?,
            text: table.add(&[".text"])?,
            probes: table.add(&[".probes"])?,
            hash: table.add(&[".hash"])?,
            dynsym: table.add(&[".dynsym"])?,
            dynstr: table.add(&[".dynstr"])?,
            dynamic: table.add(&[".dynamic"])?,
            probe_notes: table.add(&[".note.stapsdt"])?,
            build_id: table.add(&[".note.gnu.build-id"])?,
            section_names: table.add(&[".shstrtab"])?,
            table,
        })
    }
}

/// One `NT_STAPSDT` note a probe: where its stub, `.stapsdt.base` and its
/// semaphore are, then provider, probe and argument spec as C strings.
fn probe_notes(spec: &ImageSpec<'_>, layout: &Layout) -> Result<Vec<u8>, BuildError> {
    let mut notes = Vec::new();
    for (index, probe) in spec.probes.iter().enumerate() {
        let mut desc = Vec::with_capacity(64);
        desc.extend_from_slice(&layout.stub_address(index).to_le_bytes());
        desc.extend_from_slice(&STAPSDT_BASE_ADDRESS.to_le_bytes());
        desc.extend_from_slice(&layout.semaphore_address(index).to_le_bytes());
        for text in [spec.provider, probe.name(), &probe.arg_spec(spec.arch)] {
            desc.extend_from_slice(text.as_bytes());
            desc.push(0);
        }
        Note {
            owner: STAPSDT_OWNER,
            kind: NT_STAPSDT,
            desc: &desc,
        }
        .encode(&mut notes)?;
    }
    Ok(notes)
}

/// A GNU build-id note, as every linked shared object has: perf keys its
/// cache of probed binaries (`perf buildid-cache`, `sdt_*` events) on it.
fn build_id_note(id: &[u8; BUILD_ID_SIZE]) -> Note<'_> {
    Note {
        owner: GNU_OWNER,
        kind: NT_GNU_BUILD_ID,
        desc: id,
    }
}

/// The size of `.dynamic`: see [`dynamic_entries`].
const DYNAMIC_SIZE: u64 = 6 * DYN_SIZE;

fn dynamic_entries(tail: &Tail, symbols: &DynamicSymbols) -> [Dynamic; 6] {
    [
        (DT_HASH, tail.hash),
        (DT_STRTAB, tail.dynstr),
        (DT_SYMTAB, tail.dynsym),
        (DT_STRSZ, symbols.names.size()),
        (DT_SYMENT, SYM_SIZE),
        (DT_NULL, 0),
    ]
    .map(|(tag, value)| Dynamic { tag, value })
}

/// In address order, as the loader requires.
fn program_headers(layout: &Layout, tail: &Tail) -> Vec<ProgramHeader> {
    let page = layout.page_size();
    let stub_stride = layout.arch().stub_stride() as u64;
    let mut headers = vec![ProgramHeader {
        kind: PT_LOAD,
        flags: PF_R,
        offset: 0,
        size: STAPSDT_BASE_ADDRESS + 1,
        align: page,
    }];
    for chunk in 0..layout.chunk_count() {
        let first = chunk * layout.probes_per_chunk();
        let count = layout.probes_in_chunk(chunk) as u64;
        headers.push(ProgramHeader {
            kind: PT_LOAD,
            flags: PF_R | PF_X,
            offset: layout.stub_address(first),
            size: count * stub_stride,
            align: page,
        });
        headers.push(ProgramHeader {
            kind: PT_LOAD,
            flags: PF_R | PF_W,
            offset: layout.semaphore_address(first),
            size: count * SEMAPHORE_SIZE,
            align: page,
        });
    }
    headers.extend([
        ProgramHeader {
            kind: PT_LOAD,
            flags: PF_R,
            offset: tail.program_headers,
            size: tail.read_only_end - tail.program_headers,
            align: page,
        },
        ProgramHeader {
            kind: PT_LOAD,
            flags: PF_R | PF_W,
            offset: tail.dynamic,
            size: DYNAMIC_SIZE,
            align: page,
        },
        ProgramHeader {
            kind: PT_DYNAMIC,
            flags: PF_R | PF_W,
            offset: tail.dynamic,
            size: DYNAMIC_SIZE,
            align: 8,
        },
        ProgramHeader {
            kind: PT_NOTE,
            flags: PF_R,
            offset: tail.build_id,
            size: tail.read_only_end - tail.build_id,
            align: 4,
        },
        // Without it the loader would assume the stub needs an executable stack.
        ProgramHeader {
            kind: PT_GNU_STACK,
            flags: PF_R | PF_W,
            offset: 0,
            size: 0,
            align: 16,
        },
    ]);
    headers
}

/// In index order: see [`text_section`] and [`TailSection`].
fn section_headers(
    layout: &Layout,
    tail: &Tail,
    names: &SectionNames,
    symbols: &DynamicSymbols,
    probe_notes_size: u64,
) -> Result<Vec<SectionHeader>, BuildError> {
    let stub_stride = layout.arch().stub_stride() as u64;
    let chunks = layout.chunk_count();
    let index = |section| narrow::<u32>(tail_section(chunks, section) as u64, "section index");
    let (dynsym, dynstr) = (index(TailSection::Dynsym)?, index(TailSection::Dynstr)?);
    let mut sections = vec![
        SectionHeader::new(0, 0, 0, 0, 0, 0),
        SectionHeader::new(
            names.base,
            SHT_PROGBITS,
            SHF_ALLOC,
            STAPSDT_BASE_ADDRESS,
            1,
            1,
        ),
    ];
    for chunk in 0..chunks {
        let first = chunk * layout.probes_per_chunk();
        let count = layout.probes_in_chunk(chunk) as u64;
        sections.push(SectionHeader::new(
            names.text,
            SHT_PROGBITS,
            SHF_ALLOC | SHF_EXECINSTR,
            layout.stub_address(first),
            count * stub_stride,
            stub_stride,
        ));
        sections.push(SectionHeader::new(
            names.probes,
            SHT_PROGBITS,
            SHF_ALLOC | SHF_WRITE,
            layout.semaphore_address(first),
            count * SEMAPHORE_SIZE,
            SEMAPHORE_SIZE,
        ));
    }
    for section in TailSection::IN_ORDER {
        sections.push(match section {
            TailSection::Hash => SectionHeader::new(
                names.hash,
                SHT_HASH,
                SHF_ALLOC,
                tail.hash,
                symbols.hash_size(),
                8,
            )
            .table(dynsym, 0, HASH_WORD_SIZE),
            // One local symbol: the null one.
            TailSection::Dynsym => SectionHeader::new(
                names.dynsym,
                SHT_DYNSYM,
                SHF_ALLOC,
                tail.dynsym,
                symbols.symbols_size(),
                8,
            )
            .table(dynstr, 1, SYM_SIZE),
            TailSection::Dynstr => SectionHeader::new(
                names.dynstr,
                SHT_STRTAB,
                SHF_ALLOC,
                tail.dynstr,
                symbols.names.size(),
                1,
            ),
            TailSection::BuildId => SectionHeader::new(
                names.build_id,
                SHT_NOTE,
                SHF_ALLOC,
                tail.build_id,
                tail.read_only_end - tail.build_id,
                4,
            ),
            TailSection::Dynamic => SectionHeader::new(
                names.dynamic,
                SHT_DYNAMIC,
                SHF_ALLOC | SHF_WRITE,
                tail.dynamic,
                DYNAMIC_SIZE,
                8,
            )
            .table(dynstr, 0, DYN_SIZE),
            TailSection::ProbeNotes => SectionHeader::new(
                names.probe_notes,
                SHT_NOTE,
                0,
                tail.probe_notes,
                probe_notes_size,
                4,
            ),
            TailSection::SectionNames => SectionHeader::new(
                names.section_names,
                SHT_STRTAB,
                0,
                tail.section_names,
                names.table.size(),
                1,
            ),
        });
    }
    Ok(sections)
}

/// The image's bytes, zeroed where nothing is put.
struct Output(Vec<u8>);

impl Output {
    fn put(&mut self, offset: u64, bytes: &[u8]) {
        let start = offset as usize;
        self.0[start..start + bytes.len()].copy_from_slice(bytes);
    }

    /// Puts the records of a table one after the other from `offset`.
    fn put_table<T>(&mut self, offset: u64, records: &[T], encode: impl Fn(&T, &mut Vec<u8>)) {
        let mut bytes = Vec::new();
        for record in records {
            encode(record, &mut bytes);
        }
        self.put(offset, &bytes);
    }

    fn put_stubs(&mut self, spec: &ImageSpec<'_>, layout: &Layout) {
        for index in 0..spec.probes.len() {
            self.put(layout.stub_address(index), spec.arch.stub());
        }
    }

    /// The build id is a digest of the rest of the image (with the note's
    /// header in place), so it changes with it. The image is read once (it
    /// is most of a load's work otherwise): each 8 bytes of the id digest
    /// that digest with their index.
    fn put_build_id(&mut self, offset: u64) -> Result<(), BuildError> {
        use std::hash::{DefaultHasher, Hasher};

        let mut note = Vec::new();
        build_id_note(&[0; BUILD_ID_SIZE]).encode(&mut note)?;
        self.put(offset, &note);
        let mut image = DefaultHasher::new();
        image.write(&self.0);
        let image = image.finish();
        let mut id = [0u8; BUILD_ID_SIZE];
        for (round, chunk) in id.chunks_mut(8).enumerate() {
            let mut hasher = DefaultHasher::new();
            hasher.write_usize(round);
            hasher.write_u64(image);
            let digest = hasher.finish().to_le_bytes();
            chunk.copy_from_slice(&digest[..chunk.len()]);
        }
        self.put(offset + build_id_note(&id).desc_offset(), &id);
        Ok(())
    }
}

pub fn write(spec: &ImageSpec<'_>, layout: Layout) -> Result<Vec<u8>, BuildError> {
    let counts = HeaderCounts::of(&layout)?;
    let symbols = DynamicSymbols::of(spec, &layout)?;
    let names = SectionNames::new()?;
    let notes = probe_notes(spec, &layout)?;
    let notes_size = notes.len() as u64;
    let tail = Tail::place(&layout, &counts, &symbols, notes_size, names.table.size());

    let mut out = Output(vec![0; narrow::<usize>(tail.end, "image size")?]);
    out.put_stubs(spec, &layout);
    let mut header = Vec::new();
    FileHeader {
        machine: spec.arch.elf_machine(),
        program_headers_offset: tail.program_headers,
        program_header_count: counts.segments,
        section_headers_offset: tail.section_headers,
        section_count: counts.sections,
        section_names_index: narrow(
            tail_section(layout.chunk_count(), TailSection::SectionNames) as u64,
            "section index",
        )?,
    }
    .encode(&mut header);
    out.put(0, &header);
    out.put_table(
        tail.program_headers,
        &program_headers(&layout, &tail),
        ProgramHeader::encode,
    );
    let hash: Vec<u8> = symbols
        .hash
        .iter()
        .flat_map(|word| word.to_le_bytes())
        .collect();
    out.put(tail.hash, &hash);
    out.put_table(tail.dynsym, &symbols.symbols, Symbol::encode);
    out.put(tail.dynstr, symbols.names.bytes());
    out.put_table(
        tail.dynamic,
        &dynamic_entries(&tail, &symbols),
        Dynamic::encode,
    );
    out.put(tail.probe_notes, &notes);
    out.put(tail.section_names, names.table.bytes());
    out.put_table(
        tail.section_headers,
        &section_headers(&layout, &tail, &names, &symbols, notes_size)?,
        SectionHeader::encode,
    );
    out.put_build_id(tail.build_id)?;
    Ok(out.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Arch;

    #[test]
    fn header_counts_past_what_elf_holds_are_an_error_not_a_truncation() {
        for arch in Arch::ALL {
            let fits = Layout::new(arch, 4096, 0);
            let max = max_probe_count(&fits);
            let at_max = Layout::new(arch, 4096, max);
            let counts = HeaderCounts::of(&at_max).unwrap();
            assert_eq!(
                usize::from(counts.sections),
                section_count(at_max.chunk_count())
            );
            assert!(usize::from(counts.sections) < SHN_LORESERVE);
            match HeaderCounts::of(&Layout::new(arch, 4096, max + 1)) {
                Err(BuildError::TooManyProbes { given, max: said }) => {
                    assert_eq!((given, said), (max + 1, max))
                }
                _ => panic!("{arch}: {} probes must not fit", max + 1),
            }
            let message = BuildError::TooManyProbes {
                given: max + 1,
                max,
            }
            .to_string();
            assert!(message.contains(&(max + 1).to_string()), "{message}");
            assert!(message.contains(&max.to_string()), "{message}");
        }
    }

    #[test]
    fn section_indices_follow_the_layout() {
        for (position, section) in TailSection::IN_ORDER.into_iter().enumerate() {
            assert_eq!(section as usize, position);
        }
        assert_eq!(text_section(0), 2);
        assert_eq!(semaphores_section(0), 3);
        assert_eq!(tail_section(1, TailSection::Hash), 4);
        assert_eq!(section_count(1), 11);
        assert_eq!(segment_count(1), 8);
    }
}
