//! The writer over random providers, probe lists, architectures and page
//! sizes: every image parses back and agrees with the spec it was built
//! from, and every name the rule refuses is refused wherever a name enters.
//!
//! `PROPTEST_CASES=n` runs more cases of every property (under Miri, pass it
//! through with `MIRIFLAGS=-Zmiri-env-forward=PROPTEST_CASES`). The seed of a
//! failing case is saved to `elf_properties.proptest-regressions` next to
//! this file, and replayed first on every later run: commit it with the fix.

mod proptest_setup;
mod support;

use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::string::{string_regex, RegexGeneratorStrategy};
use proptest_setup::config;
use stapsdt::elf::{build, BuildError, ImageSpec, Layout, SEMAPHORE_SIZE};
use stapsdt::names::{self, InvalidName, NameKind, MAX_NAME_LEN, NAME_RULE};
use stapsdt::probe::ProbeSpecError;
use stapsdt::{Arch, ArgType, ProbeSpec, MAX_ARGS};
use std::collections::HashSet;
use support::{check, Parsed};

/// Sizes for a debug build: a few seconds in all.
#[cfg(not(miri))]
mod limits {
    pub const IMAGE_CASES: u32 = 48;
    pub const NAME_CASES: u32 = 256;
    pub const RANDOM_PROBES: usize = 1200;
    /// Chunk boundaries up to here are aimed at; x86-64's first is at 2048.
    pub const BOUNDARY_PROBES: usize = 2048;
}

/// Miri runs two orders of magnitude slower: small images, fewer cases.
#[cfg(miri)]
mod limits {
    pub const IMAGE_CASES: u32 = 2;
    pub const NAME_CASES: u32 = 8;
    pub const RANDOM_PROBES: usize = 12;
    pub const BOUNDARY_PROBES: usize = 0;
}

/// A string strategy that parses its pattern once: a bare `&str` parses it
/// again for every value, which under Miri takes most of the run.
fn regex(pattern: &str) -> RegexGeneratorStrategy<String> {
    string_regex(pattern).unwrap()
}

/// Every page size each architecture's kernels use.
fn arch_and_page_size() -> impl Strategy<Value = (Arch, u64)> {
    let mut layouts = vec![
        (Arch::X86_64, 4096),
        (Arch::Aarch64, 4096),
        (Arch::Aarch64, 16384),
        (Arch::Aarch64, 65536),
    ];
    // Under Miri every KiB of an image costs about a tenth of a second (the
    // build-id digests all of it); larger pages run the same code with
    // another constant.
    layouts.retain(|&(_, page_size)| !cfg!(miri) || page_size == 4096);
    select(layouts)
}

/// Names the rule accepts, edges included.
fn valid_name() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        4 => regex("[A-Za-z_][A-Za-z0-9_]{0,15}"),
        2 => regex("[A-Za-z_][A-Za-z0-9_]{0,127}"),
        1 => regex("[A-Za-z_]"),
        1 => regex("[A-Za-z_][A-Za-z0-9_]{127}"),
        1 => regex("_{1,3}[A-Za-z0-9_]{0,15}"),
        1 => regex("[A-Za-z_][0-9]{1,15}"),
    ]
}

fn arg_types() -> impl Strategy<Value = Vec<ArgType>> + Clone {
    prop::collection::vec(
        select(vec![ArgType::Int64, ArgType::String, ArgType::Float64]),
        0..=MAX_ARGS,
    )
}

/// Mostly any count up to `RANDOM_PROBES`, sometimes one within two of a
/// chunk boundary.
fn probe_count(per_chunk: usize) -> BoxedStrategy<usize> {
    let random = 0..=limits::RANDOM_PROBES;
    let boundaries: Vec<usize> = [per_chunk, 2 * per_chunk]
        .into_iter()
        .filter(|&boundary| boundary <= limits::BOUNDARY_PROBES)
        .collect();
    if boundaries.is_empty() {
        return random.boxed();
    }
    prop_oneof![
        3 => random,
        1 => (select(boundaries), -2isize..=2)
            .prop_map(|(boundary, delta)| boundary.checked_add_signed(delta).unwrap()),
    ]
    .boxed()
}

/// Renames repeats (deterministically, so that a case replays) instead of
/// rejecting whole lists for them.
fn unique(declarations: Vec<(String, Vec<ArgType>)>) -> Vec<ProbeSpec> {
    let mut seen = HashSet::new();
    declarations
        .into_iter()
        .map(|(base, args)| {
            let mut name = base.clone();
            let mut attempt = 0;
            while !seen.insert(name.clone()) {
                let suffix = format!("_{attempt}");
                let kept = base.len().min(MAX_NAME_LEN - suffix.len());
                name = format!("{}{suffix}", &base[..kept]);
                attempt += 1;
            }
            ProbeSpec::new(&name, &args).unwrap()
        })
        .collect()
}

#[derive(Clone, Debug)]
struct Case {
    provider: String,
    probes: Vec<ProbeSpec>,
    arch: Arch,
    page_size: u64,
}

impl Case {
    fn spec(&self) -> ImageSpec<'_> {
        ImageSpec {
            provider: &self.provider,
            probes: &self.probes,
            arch: self.arch,
            page_size: self.page_size,
        }
    }
}

fn case() -> impl Strategy<Value = Case> {
    let provider = valid_name();
    let declaration = (valid_name(), arg_types());
    arch_and_page_size().prop_flat_map(move |(arch, page_size)| {
        let per_chunk = Layout::new(arch, page_size, 0).probes_per_chunk();
        let declaration = declaration.clone();
        (provider.clone(), probe_count(per_chunk)).prop_flat_map(move |(provider, count)| {
            prop::collection::vec(declaration.clone(), count).prop_map(move |declarations| Case {
                provider: provider.clone(),
                probes: unique(declarations),
                arch,
                page_size,
            })
        })
    })
}

/// What the argument spec of a probe must be, written out independently of
/// `ProbeSpec::arg_spec`.
fn expected_arg_spec(arch: Arch, args: &[ArgType]) -> String {
    let registers = match arch {
        Arch::X86_64 => ["%rdi", "%rsi", "%rdx", "%rcx", "%r8", "%r9"],
        Arch::Aarch64 => ["x0", "x1", "x2", "x3", "x4", "x5"],
    };
    let specs: Vec<String> = args
        .iter()
        .zip(registers)
        .map(|(arg, register)| match arg {
            ArgType::Int64 => format!("-8@{register}"),
            ArgType::String | ArgType::Float64 => format!("8@{register}"),
        })
        .collect();
    specs.join(" ")
}

/// What `check` leaves to the caller: that the notes, and the symbols, are
/// exactly those of the input.
fn agrees_with_input(case: &Case, parsed: &Parsed<'_>) -> Result<(), TestCaseError> {
    let base = parsed
        .sections_named(".stapsdt.base")
        .next()
        .expect(".stapsdt.base")
        .address;
    prop_assert_eq!(parsed.notes.len(), case.probes.len());
    for (note, probe) in parsed.notes.iter().zip(&case.probes) {
        prop_assert_eq!(&note.provider, &case.provider);
        prop_assert_eq!(&note.name, probe.name());
        prop_assert_eq!(&note.args, &expected_arg_spec(case.arch, probe.args()));
        prop_assert_eq!(note.base, base);
        let stub_end = note.pc + case.arch.stub().len() as u64 - 1;
        prop_assert_eq!(
            note.pc / case.page_size,
            stub_end / case.page_size,
            "a stub never straddles two pages"
        );
    }
    for pair in parsed.notes.windows(2) {
        prop_assert!(pair[0].pc < pair[1].pc, "stubs in declaration order");
        prop_assert!(
            pair[0].semaphore < pair[1].semaphore,
            "semaphores in declaration order"
        );
    }
    let expected: HashSet<String> = case
        .probes
        .iter()
        .flat_map(|probe| {
            [
                format!("{}__{}", case.provider, probe.name()),
                format!("{}__{}.semaphore", case.provider, probe.name()),
            ]
        })
        .collect();
    let found: HashSet<String> = parsed.symbols.iter().map(|s| s.name.clone()).collect();
    prop_assert_eq!(&found, &expected);
    let absent = format!("{}__", case.provider);
    prop_assert_eq!(parsed.hash_lookup(&absent), None);
    Ok(())
}

/// A provider grown from `before` keeps every old probe where it was.
fn grows_in_place(before: &[u8], after: &[u8], arch: Arch) -> Result<(), TestCaseError> {
    let old = Parsed::new(before);
    let new = Parsed::new(after);
    prop_assert!(new.notes.len() >= old.notes.len());
    prop_assert_eq!(&new.notes[..old.notes.len()], &old.notes[..]);
    for note in &old.notes {
        let stub = arch.stub().len();
        prop_assert_eq!(old.bytes_at(note.pc, stub), new.bytes_at(note.pc, stub));
        let semaphore = SEMAPHORE_SIZE as usize;
        prop_assert_eq!(
            old.bytes_at(note.semaphore, semaphore),
            new.bytes_at(note.semaphore, semaphore)
        );
    }
    prop_assert!(after.len() >= before.len(), "an image never shrinks");
    Ok(())
}

/// Which of the rule's clauses `name` breaks first, stated independently of
/// `names.rs`, in the order its messages promise.
fn problem_of(name: &str) -> Option<&'static str> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let Some(first) = name.chars().next() else {
        return Some("empty");
    };
    if name.len() > MAX_NAME_LEN {
        Some("too long")
    } else if !(first.is_ascii_alphabetic() || first == '_') {
        Some("must start with a letter or underscore")
    } else if !name.chars().all(allowed) {
        Some("only letters, digits and underscores are allowed")
    } else {
        None
    }
}

/// A character no name may contain, dangerous ones (path separators, NUL,
/// a bpftrace separator, look-alike letters and digits) among them.
fn forbidden_char() -> impl Strategy<Value = char> {
    prop_oneof![
        select(vec![
            '/', '.', '-', ':', '*', '\0', ' ', '\n', '\\', '$', 'é', 'ß', '٣', '\u{202e}', 'İ'
        ]),
        any::<char>().prop_filter("outside [A-Za-z0-9_]", |&c| {
            !(c.is_ascii_alphanumeric() || c == '_')
        }),
    ]
}

/// Names that break exactly one of the rule's clauses first, with the
/// problem `names::validate` must report.
fn invalid_name() -> impl Strategy<Value = (String, &'static str)> {
    prop_oneof![
        Just((String::new(), "empty")),
        regex("[A-Za-z_][A-Za-z0-9_]{128,200}").prop_map(|name| (name, "too long")),
        regex(".{129,160}").prop_map(|name| (name, "too long")),
        (
            prop_oneof![Just('0'), Just('9'), forbidden_char()],
            regex("[A-Za-z0-9_]{0,100}")
        )
            .prop_map(|(first, rest)| (
                format!("{first}{rest}"),
                "must start with a letter or underscore"
            )),
        (
            regex("[A-Za-z_][A-Za-z0-9_]{0,60}"),
            forbidden_char(),
            regex(".{0,15}")
        )
            .prop_map(|(head, bad, tail)| (
                format!("{head}{bad}{tail}"),
                "only letters, digits and underscores are allowed"
            )),
    ]
}

/// Anything: unicode at random, printable ASCII, and near misses.
fn any_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(any::<char>(), 0..40).prop_map(String::from_iter),
        regex("[ -~]{0,140}"),
        regex("[A-Za-z0-9_./-]{0,140}"),
        valid_name(),
        invalid_name().prop_map(|(name, _)| name),
    ]
}

/// Anything but a power of two from 4096 on: small powers of two and
/// neighbours of large ones among them.
fn invalid_page_size() -> impl Strategy<Value = u64> {
    let near_power = (12..64u32, select(vec![-1i64, 1]))
        .prop_map(|(shift, delta)| (1u64 << shift).wrapping_add_signed(delta));
    prop_oneof![
        any::<u64>(),
        (0..12u32).prop_map(|shift| 1u64 << shift),
        near_power,
    ]
    .prop_filter("a valid page size", |&size| {
        size < 4096 || !size.is_power_of_two()
    })
}

proptest! {
    #![proptest_config(config(limits::IMAGE_CASES))]

    #[test]
    fn every_image_parses_back_and_agrees_with_its_spec(case in case(), cut in any::<Index>()) {
        let spec = case.spec();
        let image = build(&spec).expect("a valid spec builds");
        prop_assert_eq!(
            image.layout,
            Layout::new(case.arch, case.page_size, case.probes.len())
        );
        check(&spec, &image.bytes);
        agrees_with_input(&case, &Parsed::new(&image.bytes))?;
        prop_assert!(build(&spec).unwrap().bytes == image.bytes, "deterministic");

        let prefix = ImageSpec {
            probes: &case.probes[..cut.index(case.probes.len() + 1)],
            ..spec
        };
        let smaller = build(&prefix).expect("a prefix builds");
        check(&prefix, &smaller.bytes);
        grows_in_place(&smaller.bytes, &image.bytes, case.arch)?;
    }
}

proptest! {
    #![proptest_config(config(limits::NAME_CASES))]

    #[test]
    fn the_rule_decides_every_name(name in any_name()) {
        let expected = problem_of(&name);
        prop_assert_eq!(names::is_valid(&name), expected.is_none());
        for kind in [NameKind::Provider, NameKind::Probe] {
            let result = names::validate(kind, &name);
            prop_assert_eq!(result.as_ref().err().map(|err| err.problem), expected);
        }
    }

    #[test]
    fn invalid_names_are_refused_everywhere_with_the_reason(
        (name, problem) in invalid_name(),
        args in arg_types(),
        (arch, page_size) in arch_and_page_size(),
    ) {
        let refusal = |kind| InvalidName { kind, name: name.clone(), problem };
        prop_assert_eq!(problem_of(&name), Some(problem));
        for kind in [NameKind::Provider, NameKind::Probe] {
            let err = names::validate(kind, &name).unwrap_err();
            prop_assert_eq!(&err, &refusal(kind));
            let message = err.to_string();
            prop_assert!(message.contains(problem) && message.contains(NAME_RULE), "{}", message);
        }
        prop_assert_eq!(
            ProbeSpec::new(&name, &args),
            Err(ProbeSpecError::Name(refusal(NameKind::Probe)))
        );
        let too_many = [ArgType::Int64; MAX_ARGS + 1];
        prop_assert_eq!(
            ProbeSpec::new(&name, &too_many),
            Err(ProbeSpecError::Name(refusal(NameKind::Probe))),
            "the name is checked first"
        );
        let probes = [ProbeSpec::new("p", &args).unwrap()];
        let spec = ImageSpec { provider: &name, probes: &probes, arch, page_size };
        prop_assert_eq!(
            build(&spec).unwrap_err(),
            BuildError::Provider(refusal(NameKind::Provider))
        );
    }

    #[test]
    fn probes_with_too_many_args_are_refused(name in valid_name(), extra in 1..=10usize) {
        let args = vec![ArgType::String; MAX_ARGS + extra];
        prop_assert_eq!(
            ProbeSpec::new(&name, &args),
            Err(ProbeSpecError::TooManyArgs { name: name.clone(), given: MAX_ARGS + extra })
        );
    }

    #[test]
    fn a_repeated_probe_name_is_refused(
        declarations in prop::collection::vec((valid_name(), arg_types()), 1..=5),
        original in any::<Index>(),
        at in any::<Index>(),
        args in arg_types(),
        (arch, page_size) in arch_and_page_size(),
    ) {
        let mut probes = unique(declarations);
        let repeated = probes[original.index(probes.len())].name().to_owned();
        let position = at.index(probes.len() + 1);
        probes.insert(position, ProbeSpec::new(&repeated, &args).unwrap());
        let spec = ImageSpec { provider: "p", probes: &probes, arch, page_size };
        prop_assert_eq!(build(&spec).unwrap_err(), BuildError::DuplicateProbe(repeated));
    }

    #[test]
    fn page_sizes_other_than_powers_of_two_from_4096_are_refused(
        page_size in invalid_page_size(),
        arch in select(Arch::ALL.to_vec()),
    ) {
        let spec = ImageSpec { provider: "p", probes: &[], arch, page_size };
        prop_assert_eq!(build(&spec).unwrap_err(), BuildError::PageSize(page_size));
    }
}

#[cfg(target_os = "linux")]
mod stub_files {
    use super::*;
    use stapsdt::image::{LoadError, LoadedImage};
    use stapsdt::stub_dir::{Candidate, ProcessKey, StubFileName};
    use std::path::{Component, Path};

    proptest! {
        #![proptest_config(config(limits::NAME_CASES))]

        /// A stub file is named after its provider: only a valid name makes a
        /// name, that name is one plain entry of the directory, and it reads
        /// back as what made it.
        #[test]
        fn only_valid_providers_name_files_and_those_stay_in_the_directory(
            provider in any_name(),
            pid in 0..=i32::MAX,
            pid_namespace in any::<u64>(),
            generation in any::<u64>(),
        ) {
            let valid = names::is_valid(&provider);
            let spec = ImageSpec {
                provider: &provider,
                probes: &[],
                arch: Arch::X86_64,
                page_size: 4096,
            };
            prop_assert_eq!(build(&spec).is_ok(), valid);
            let process = ProcessKey { pid, pid_namespace };
            let made = StubFileName { provider: provider.clone(), process, generation };
            let file = made.to_string();
            let parsed = StubFileName::parse(&file);
            if valid {
                let components: Vec<Component<'_>> = Path::new(&file).components().collect();
                prop_assert_eq!(components, vec![Component::Normal(file.as_ref())]);
                let dir = Path::new("/run/user/1000/static_tracing");
                let path = dir.join(&file);
                prop_assert_eq!(path.parent(), Some(dir));
                prop_assert!(!file.contains('\0'));
                prop_assert_eq!(parsed, Some(made));
            } else {
                prop_assert_eq!(parsed, None, "the sweep never takes it for a stub file");
            }
        }

        #[test]
        fn whatever_parses_as_a_stub_file_name_is_one(name in prop_oneof![
            any_name(),
            (any_name(), regex("[0-9]{1,12}"), regex("[0-9]{1,22}"), regex("[0-9]{1,22}"))
                .prop_map(|(provider, pid, pidns, serial)| format!("{provider}-{pid}-{pidns}-{serial}.so")),
        ]) {
            if let Some(parsed) = StubFileName::parse(&name) {
                prop_assert!(names::is_valid(&parsed.provider));
                prop_assert!(!name.contains('/'));
                prop_assert_eq!(StubFileName::parse(&parsed.to_string()), Some(parsed));
            }
        }

        /// The name is refused before any directory is touched.
        #[test]
        fn loading_refuses_an_invalid_provider_before_touching_a_directory(
            (provider, problem) in invalid_name(),
        ) {
            let Some(arch) = Arch::host() else {
                return Ok(());
            };
            let dir = std::env::temp_dir().join(format!("stapsdt-never-{}", std::process::id()));
            let candidate = Candidate { path: dir.clone(), origin: "test" };
            let spec = ImageSpec { provider: &provider, probes: &[], arch, page_size: 4096 };
            let err = LoadedImage::load(&spec, &[candidate]).unwrap_err();
            match err {
                LoadError::Build(BuildError::Provider(invalid)) => {
                    prop_assert_eq!(invalid.problem, problem)
                }
                other => prop_assert!(false, "{}", other),
            }
            // Miri's isolation refuses the check itself.
            #[cfg(not(miri))]
            prop_assert!(!dir.exists());
        }
    }
}
