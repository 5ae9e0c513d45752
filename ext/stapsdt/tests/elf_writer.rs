//! The writer's output, parsed back by an independent reader and checked
//! field by field against the spec it was built from.

mod support;

use object::elf;
use stapsdt::elf::{build, BuildError, ImageSpec, Layout, STAPSDT_BASE_ADDRESS};
use stapsdt::{Arch, ArgType, ProbeSpec};
use support::Parsed;

fn probes(count: usize) -> Vec<ProbeSpec> {
    const TYPES: [ArgType; 3] = [ArgType::Int64, ArgType::String, ArgType::Float64];
    (0..count)
        .map(|i| {
            let args: Vec<ArgType> = (0..i % 7).map(|a| TYPES[(i + a) % 3]).collect();
            ProbeSpec::new(&format!("probe_{i}"), &args).unwrap()
        })
        .collect()
}

fn page_sizes(arch: Arch) -> Vec<u64> {
    match arch {
        Arch::X86_64 => vec![4096],
        Arch::Aarch64 => vec![4096, 16384, 65536],
    }
}

/// Every property a tracer and the dynamic loader rely on.
fn check(spec: &ImageSpec<'_>, bytes: &[u8]) {
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
    let pages = |s: &support::Segment| {
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
    let position = |pred: &dyn Fn(&support::Section) -> bool| parsed.sections.iter().position(pred);
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
        let semaphore_symbol = format!("{}_{}_semaphore", spec.provider, probe.name());
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

#[test]
fn images_parse_back_and_agree_with_their_spec() {
    for arch in Arch::ALL {
        for page_size in page_sizes(arch) {
            let per_chunk = Layout::new(arch, page_size, 0).probes_per_chunk();
            for count in [
                0,
                1,
                2,
                7,
                per_chunk - 1,
                per_chunk,
                per_chunk + 1,
                2 * per_chunk + 3,
            ] {
                let probes = probes(count);
                let spec = ImageSpec {
                    provider: "my_app",
                    probes: &probes,
                    arch,
                    page_size,
                };
                let image = build(&spec).unwrap();
                assert_eq!(image.layout, Layout::new(arch, page_size, count));
                check(&spec, &image.bytes);
            }
        }
    }
}

#[test]
fn existing_probes_keep_their_place_when_probes_are_added() {
    for arch in Arch::ALL {
        let page_size = arch.max_page_size();
        let all = probes(Layout::new(arch, page_size, 0).probes_per_chunk() + 5);
        let mut previous: Option<Vec<u8>> = None;
        for count in [1, 2, 3, all.len() - 6, all.len() - 5, all.len()] {
            let spec = ImageSpec {
                provider: "grow",
                probes: &all[..count],
                arch,
                page_size,
            };
            let image = build(&spec).unwrap();
            if let Some(before) = previous {
                let old = Parsed::new(&before);
                let new = Parsed::new(&image.bytes);
                assert_eq!(
                    &new.notes[..old.notes.len()],
                    &old.notes[..],
                    "{arch}: notes of existing probes unchanged"
                );
                for note in &old.notes {
                    let stub = note.pc as usize..note.pc as usize + arch.stub().len();
                    assert_eq!(
                        before[stub.clone()],
                        image.bytes[stub],
                        "stub bytes unchanged"
                    );
                }
                assert!(
                    image.bytes.len() >= before.len(),
                    "an image never shrinks as it grows"
                );
            }
            previous = Some(image.bytes);
        }
    }
}

#[test]
fn stub_sites_are_the_architecture_nop() {
    assert_eq!(Arch::X86_64.stub(), [0x90, 0xc3]);
    let words: Vec<u32> = Arch::Aarch64
        .stub()
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(words, [0xd503_201f, 0xd65f_03c0], "aarch64: nop; ret");
}

#[test]
fn rejects_what_it_cannot_write() {
    let one = probes(1);
    let spec = |provider, page_size| ImageSpec {
        provider,
        probes: &one,
        arch: Arch::X86_64,
        page_size,
    };
    assert!(matches!(
        build(&spec("bad-name", 4096)),
        Err(BuildError::Provider(_))
    ));
    assert_eq!(
        build(&spec("ok", 3000)).unwrap_err(),
        BuildError::PageSize(3000)
    );
    let twice = [one[0].clone(), one[0].clone()];
    let spec = ImageSpec {
        provider: "ok",
        probes: &twice,
        arch: Arch::X86_64,
        page_size: 4096,
    };
    assert_eq!(
        build(&spec).unwrap_err(),
        BuildError::DuplicateProbe("probe_0".into())
    );
}

/// binutils reads the notes the same way.
#[test]
fn readelf_agrees() {
    if std::process::Command::new("readelf")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("readelf not installed: skipping the binutils cross-check");
        return;
    }
    let probes = vec![
        ProbeSpec::new("hello", &[ArgType::Int64, ArgType::String]).unwrap(),
        ProbeSpec::new("bye", &[]).unwrap(),
    ];
    let image = build(&ImageSpec {
        provider: "my_app",
        probes: &probes,
        arch: Arch::X86_64,
        page_size: 4096,
    })
    .unwrap();
    let path = std::env::temp_dir().join(format!("stapsdt-readelf-{}.so", std::process::id()));
    std::fs::write(&path, &image.bytes).unwrap();
    let output = std::process::Command::new("readelf")
        .args(["-W", "-n", "-l", "-S"])
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stderr.trim().is_empty(),
        "readelf complained: {stderr}"
    );
    for expected in [
        "Provider: my_app",
        "Name: hello",
        "Name: bye",
        "Arguments: -8@%rdi 8@%rsi",
        &format!(
            "Location: 0x{:016x}, Base: 0x{:016x}, Semaphore: 0x{:016x}",
            0x1000, 0x40, 0x2000
        ),
        &format!(
            "Location: 0x{:016x}, Base: 0x{:016x}, Semaphore: 0x{:016x}",
            0x1002, 0x40, 0x2002
        ),
        "GNU_STACK",
        ".note.stapsdt",
        ".probes",
    ] {
        assert!(
            text.contains(expected),
            "readelf output lacks {expected:?}:\n{text}"
        );
    }
}

/// perf keys its cache of probed binaries on the GNU build-id.
#[test]
fn images_carry_a_build_id_that_follows_their_content() {
    let build_id = |probes: &[ProbeSpec]| {
        let image = build(&ImageSpec {
            provider: "ids",
            probes,
            arch: Arch::X86_64,
            page_size: 4096,
        })
        .unwrap();
        let parsed = Parsed::new(&image.bytes);
        let section = parsed
            .sections_named(".note.gnu.build-id")
            .next()
            .expect(".note.gnu.build-id")
            .clone();
        assert_eq!(section.kind, elf::SHT_NOTE);
        let note = parsed
            .segments
            .iter()
            .find(|s| s.kind == elf::PT_NOTE)
            .expect("PT_NOTE");
        assert_eq!((note.offset, note.filesz), (section.offset, section.size));
        assert!(parsed
            .load_containing(section.address, section.size)
            .is_some_and(|load| !load.writable()));
        let bytes = &image.bytes[section.offset as usize..(section.offset + section.size) as usize];
        assert_eq!(
            bytes[..16],
            [4, 0, 0, 0, 20, 0, 0, 0, 3, 0, 0, 0, b'G', b'N', b'U', 0],
            "namesz, descsz, NT_GNU_BUILD_ID, owner"
        );
        bytes[16..].to_vec()
    };
    let all = probes(3);
    let id = build_id(&all[..2]);
    assert_ne!(id, vec![0; 20]);
    assert_eq!(build_id(&all[..2]), id, "the same image gets the same id");
    assert_ne!(build_id(&all), id, "another image gets another id");
}
