//! The writer's output, parsed back by an independent reader and checked
//! field by field against the spec it was built from.

mod support;

use object::elf;
use stapsdt::elf::{build, BuildError, ImageSpec, Layout, MAX_PAGE_SIZE};
use stapsdt::{Arch, ArgType, ProbeSpec};
use support::{check, Parsed};

fn probes(count: usize) -> Vec<ProbeSpec> {
    const TYPES: [ArgType; 3] = [ArgType::Int64, ArgType::String, ArgType::Float64];
    (0..count)
        .map(|i| {
            let args: Vec<ArgType> = (0..i % 7).map(|a| TYPES[(i + a) % 3]).collect();
            ProbeSpec::new(&format!("probe_{i}"), &args).unwrap()
        })
        .collect()
}

/// Whether tests fill chunks and cross into the next. Under Miri every KiB
/// of an image costs about a tenth of a second (the build-id digests all of
/// it), so there images keep to one chunk of 4 KiB pages: the code is the
/// same for every page size and chunk, and the native run covers them.
const CROSS_CHUNKS: bool = !cfg!(miri);

fn page_sizes(arch: Arch) -> Vec<u64> {
    if !CROSS_CHUNKS {
        return vec![4096];
    }
    match arch {
        Arch::X86_64 => vec![4096],
        Arch::Aarch64 => vec![4096, 16384, 65536],
    }
}

#[test]
fn images_parse_back_and_agree_with_their_spec() {
    for arch in Arch::ALL {
        for page_size in page_sizes(arch) {
            let per_chunk = Layout::new(arch, page_size, 0).probes_per_chunk();
            let mut counts = vec![0, 1, 2, 7];
            if CROSS_CHUNKS {
                counts.extend([per_chunk - 1, per_chunk, per_chunk + 1, 2 * per_chunk + 3]);
            }
            for count in counts {
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
        let (page_size, total) = if CROSS_CHUNKS {
            let page_size = arch.max_page_size();
            (
                page_size,
                Layout::new(arch, page_size, 0).probes_per_chunk() + 5,
            )
        } else {
            (4096, 7)
        };
        let all = probes(total);
        let mut counts = vec![1, 2, 3, total - 6, total - 5, total];
        counts.sort_unstable();
        counts.dedup();
        let mut previous: Option<Vec<u8>> = None;
        for count in counts {
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
    assert_eq!(
        Arch::X86_64.stub(),
        [0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3],
        "x86-64: the 5-byte nop the kernel can optimize; ret"
    );
    assert_eq!(Arch::X86_64.nop(), &Arch::X86_64.stub()[..5]);
    for arch in Arch::ALL {
        assert!(arch.stub_stride().is_power_of_two() && arch.stub_stride() >= arch.stub().len());
    }
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
    // A page size so large that offsets would overflow: refused, no panic.
    for huge in [MAX_PAGE_SIZE * 2, 1 << 62] {
        assert_eq!(
            build(&spec("ok", huge)).unwrap_err(),
            BuildError::PageSize(huge)
        );
    }
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
#[cfg_attr(miri, ignore = "runs readelf, and Miri cannot start processes")]
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
            0x1000 + Arch::X86_64.stub_stride(),
            0x40,
            0x2002
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

/// With underscores as the only separator, probe `_x`'s semaphore and probe
/// `x_semaphore`'s stub would both be `p__x_semaphore`.
#[test]
fn every_symbol_name_is_unique() {
    let probes = [
        ProbeSpec::new("_x", &[]).unwrap(),
        ProbeSpec::new("x_semaphore", &[]).unwrap(),
    ];
    let image = build(&ImageSpec {
        provider: "p",
        probes: &probes,
        arch: Arch::X86_64,
        page_size: 4096,
    })
    .unwrap();
    let parsed = Parsed::new(&image.bytes);
    let mut names: Vec<&str> = parsed
        .symbols
        .iter()
        .map(|symbol| symbol.name.as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "p___x",
            "p___x.semaphore",
            "p__x_semaphore",
            "p__x_semaphore.semaphore"
        ]
    );
}
