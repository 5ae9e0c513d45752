//! ELF64 little-endian records and tables, as the writer emits them.
//!
//! Each record is encoded by appending its fields in declaration order, so
//! the order of the fields written here is the record's layout: no offset
//! within a record is written by hand. The sizes are checked in the tests.

use super::BuildError;

pub const EHDR_SIZE: u64 = 64;
pub const PHDR_SIZE: u64 = 56;
pub const SHDR_SIZE: u64 = 64;
pub const SYM_SIZE: u64 = 24;
pub const DYN_SIZE: u64 = 16;
/// `namesz`, `descsz` and `type`, before a note's name.
pub const NOTE_HEADER_SIZE: u64 = 12;
/// A hash table's entries are 32-bit words.
pub const HASH_WORD_SIZE: u64 = 4;

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
/// Section indices from here on are reserved: a file with this many
/// sections or more needs extended numbering, which this writer does not do.
pub const SHN_LORESERVE: usize = 0xff00;
/// A program header count of this value means "see section 0".
pub const PN_XNUM: usize = 0xffff;

/// Appends little-endian fields to `out`.
struct Fields<'a>(&'a mut Vec<u8>);

impl Fields<'_> {
    fn u8(&mut self, value: u8) -> &mut Self {
        self.0.push(value);
        self
    }
    fn u16(&mut self, value: u16) -> &mut Self {
        self.bytes(&value.to_le_bytes())
    }
    fn u32(&mut self, value: u32) -> &mut Self {
        self.bytes(&value.to_le_bytes())
    }
    fn u64(&mut self, value: u64) -> &mut Self {
        self.bytes(&value.to_le_bytes())
    }
    fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.extend_from_slice(bytes);
        self
    }
    /// Zeroes up to the next multiple of 4 bytes of `out`, as notes want.
    fn pad_to_4(&mut self) -> &mut Self {
        self.0.resize(self.0.len().next_multiple_of(4), 0);
        self
    }
}

/// `value` in the narrower type a field has, or the error naming the field.
pub fn narrow<T: TryFrom<u64>>(value: u64, field: &'static str) -> Result<T, BuildError> {
    T::try_from(value).map_err(|_| BuildError::TooLarge { field, value })
}

/// The ELF header's fields that vary; the others are constants of this writer.
pub struct FileHeader {
    pub machine: u16,
    pub program_headers_offset: u64,
    pub program_header_count: u16,
    pub section_headers_offset: u64,
    pub section_count: u16,
    /// Index of the section holding the section names.
    pub section_names_index: u16,
}

impl FileHeader {
    pub fn encode(&self, out: &mut Vec<u8>) {
        const ELFCLASS64: u8 = 2;
        const ELFDATA2LSB: u8 = 1;
        const EV_CURRENT: u8 = 1;
        const ET_DYN: u16 = 3;
        const IDENT_PADDING: [u8; 9] = [0; 9];
        Fields(out)
            .bytes(&[0x7f, b'E', b'L', b'F', ELFCLASS64, ELFDATA2LSB, EV_CURRENT])
            .bytes(&IDENT_PADDING)
            .u16(ET_DYN)
            .u16(self.machine)
            .u32(EV_CURRENT.into())
            .u64(0) // e_entry: nothing runs on load
            .u64(self.program_headers_offset)
            .u64(self.section_headers_offset)
            .u32(0) // e_flags
            .u16(EHDR_SIZE as u16)
            .u16(PHDR_SIZE as u16)
            .u16(self.program_header_count)
            .u16(SHDR_SIZE as u16)
            .u16(self.section_count)
            .u16(self.section_names_index);
    }
}

/// A segment; loaded ones are mapped at an address equal to their offset.
pub struct ProgramHeader {
    pub kind: u32,
    pub flags: u32,
    pub offset: u64,
    pub size: u64,
    pub align: u64,
}

impl ProgramHeader {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Fields(out)
            .u32(self.kind)
            .u32(self.flags)
            .u64(self.offset)
            .u64(self.offset) // p_vaddr
            .u64(self.offset) // p_paddr
            .u64(self.size) // p_filesz
            .u64(self.size) // p_memsz
            .u64(self.align);
    }
}

pub struct SectionHeader {
    pub name: u32,
    pub kind: u32,
    pub flags: u64,
    pub address: u64,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
    pub info: u32,
    pub align: u64,
    pub entry_size: u64,
}

impl SectionHeader {
    /// Loaded sections sit at an address equal to their offset; others at 0.
    pub fn new(name: u32, kind: u32, flags: u64, offset: u64, size: u64, align: u64) -> Self {
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

    /// A section holding a table: linked to section `link`, entries of `entry_size`.
    pub fn table(self, link: u32, info: u32, entry_size: u64) -> Self {
        SectionHeader {
            link,
            info,
            entry_size,
            ..self
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        Fields(out)
            .u32(self.name)
            .u32(self.kind)
            .u64(self.flags)
            .u64(self.address)
            .u64(self.offset)
            .u64(self.size)
            .u32(self.link)
            .u32(self.info)
            .u64(self.align)
            .u64(self.entry_size);
    }
}

pub struct Symbol {
    pub name: u32,
    pub info: u8,
    pub section: u16,
    pub value: u64,
    pub size: u64,
}

impl Symbol {
    pub const NULL: Symbol = Symbol {
        name: 0,
        info: 0,
        section: 0,
        value: 0,
        size: 0,
    };

    pub fn encode(&self, out: &mut Vec<u8>) {
        Fields(out)
            .u32(self.name)
            .u8(self.info)
            .u8(0) // st_other: default visibility
            .u16(self.section)
            .u64(self.value)
            .u64(self.size);
    }
}

/// One `.dynamic` entry.
pub struct Dynamic {
    pub tag: u64,
    pub value: u64,
}

impl Dynamic {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Fields(out).u64(self.tag).u64(self.value);
    }
}

/// A note: its owner's name (NUL included) and its descriptor, each padded
/// to 4 bytes.
pub struct Note<'a> {
    pub owner: &'a [u8],
    pub kind: u32,
    pub desc: &'a [u8],
}

impl Note<'_> {
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), BuildError> {
        let owner_size = narrow(self.owner.len() as u64, "note name size")?;
        let desc_size = narrow(self.desc.len() as u64, "note descriptor size")?;
        Fields(out)
            .u32(owner_size)
            .u32(desc_size)
            .u32(self.kind)
            .bytes(self.owner)
            .pad_to_4()
            .bytes(self.desc)
            .pad_to_4();
        Ok(())
    }

    /// Where the descriptor starts, from the start of the note.
    pub fn desc_offset(&self) -> u64 {
        NOTE_HEADER_SIZE + (self.owner.len() as u64).next_multiple_of(4)
    }

    pub fn size(&self) -> u64 {
        self.desc_offset() + (self.desc.len() as u64).next_multiple_of(4)
    }
}

/// A string table under construction.
pub struct StringTable {
    bytes: Vec<u8>,
}

impl StringTable {
    pub fn new() -> StringTable {
        StringTable { bytes: vec![0] }
    }

    /// Adds the concatenation of `parts`; returns its offset.
    pub fn add(&mut self, parts: &[&str]) -> Result<u32, BuildError> {
        let offset = narrow(self.bytes.len() as u64, "string table offset")?;
        for part in parts {
            self.bytes.extend_from_slice(part.as_bytes());
        }
        self.bytes.push(0);
        Ok(offset)
    }

    /// The NUL-terminated string starting at `offset`.
    pub fn get(&self, offset: u32) -> &[u8] {
        let rest = self.bytes.get(offset as usize..).unwrap_or_default();
        &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn size(&self) -> u64 {
        self.bytes.len() as u64
    }
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

/// The `DT_HASH` table of `symbols`: `nbucket`, `nchain`, the buckets,
/// then the chains.
pub fn hash_table(symbols: &[Symbol], names: &StringTable) -> Result<Vec<u32>, BuildError> {
    let nchain = symbols.len();
    let nbucket = (nchain / 2).max(1);
    let mut table = vec![0u32; 2 + nbucket + nchain];
    table[0] = narrow(nbucket as u64, "hash bucket count")?;
    table[1] = narrow(nchain as u64, "hash chain count")?;
    for (index, symbol) in symbols.iter().enumerate().skip(1) {
        let bucket = 2 + elf_hash(names.get(symbol.name)) as usize % nbucket;
        table[2 + nbucket + index] = table[bucket];
        table[bucket] = narrow(index as u64, "symbol index")?;
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(encode: impl FnOnce(&mut Vec<u8>)) -> u64 {
        let mut out = Vec::new();
        encode(&mut out);
        out.len() as u64
    }

    #[test]
    fn records_are_as_long_as_elf64_says() {
        let header = FileHeader {
            machine: 62,
            program_headers_offset: 0,
            program_header_count: 1,
            section_headers_offset: 0,
            section_count: 1,
            section_names_index: 0,
        };
        assert_eq!(encoded(|out| header.encode(out)), EHDR_SIZE);
        let segment = ProgramHeader {
            kind: PT_LOAD,
            flags: PF_R,
            offset: 0,
            size: 0,
            align: 1,
        };
        assert_eq!(encoded(|out| segment.encode(out)), PHDR_SIZE);
        let section = SectionHeader::new(0, 0, 0, 0, 0, 0);
        assert_eq!(encoded(|out| section.encode(out)), SHDR_SIZE);
        assert_eq!(encoded(|out| Symbol::NULL.encode(out)), SYM_SIZE);
        let entry = Dynamic { tag: 0, value: 0 };
        assert_eq!(encoded(|out| entry.encode(out)), DYN_SIZE);
        let note = Note {
            owner: b"stapsdt\0",
            kind: 3,
            desc: b"12345",
        };
        assert_eq!(encoded(|out| note.encode(out).unwrap()), note.size());
        assert_eq!(note.desc_offset(), NOTE_HEADER_SIZE + 8);
    }

    #[test]
    fn a_value_too_wide_for_its_field_is_an_error_naming_the_field() {
        assert_eq!(narrow::<u16>(65_535, "x"), Ok(65_535));
        assert_eq!(
            narrow::<u16>(65_536, "section count"),
            Err(BuildError::TooLarge {
                field: "section count",
                value: 65_536
            })
        );
        assert!(narrow::<u32>(u64::from(u32::MAX) + 1, "string table offset").is_err());
    }
}
