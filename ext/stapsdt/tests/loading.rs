//! Loading generated images into this test process for real.
// Not under Miri: it cannot dlopen, fork, or make the libc calls loading needs.
#![cfg(all(target_os = "linux", not(miri)))]

use stapsdt::elf::ImageSpec;
use stapsdt::image::{host_spec, LoadError, LoadedImage, Reloaded};
use stapsdt::site::ProbeSite;
use stapsdt::stub_dir::{candidates_from, Candidate, ProcessKey, StubDir, StubFileName};
use stapsdt::{Arch, ArgType, ProbeSpec};
use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

struct TempDir(PathBuf);

impl TempDir {
    /// A fresh directory with the given mode; `create: false` leaves it to the loader.
    fn new(mode: u32, create: bool) -> TempDir {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "stapsdt-test-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        ));
        if create {
            fs::create_dir(&path).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        }
        TempDir(path)
    }

    fn candidate(&self) -> Candidate {
        Candidate {
            path: self.0.clone(),
            origin: "test",
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
        let _ = fs::remove_file(&self.0);
    }
}

fn probes(names: &[&str]) -> Vec<ProbeSpec> {
    names
        .iter()
        .map(|name| ProbeSpec::new(name, &[ArgType::Int64, ArgType::String]).unwrap())
        .collect()
}

fn spec<'a>(provider: &'a str, probes: &'a [ProbeSpec]) -> ImageSpec<'a> {
    host_spec(provider, probes).unwrap()
}

fn maps() -> String {
    fs::read_to_string("/proc/self/maps").unwrap()
}

fn mapping_lines(path: &Path) -> Vec<String> {
    let needle = path.display().to_string();
    maps()
        .lines()
        .filter(|line| line.contains(&needle))
        .map(str::to_owned)
        .collect()
}

/// Pokes a byte into this process's memory the way a debugger would, which
/// works on read-only executable pages too.
fn poke(address: usize, byte: u8) {
    let mut mem = fs::OpenOptions::new()
        .write(true)
        .open("/proc/self/mem")
        .unwrap();
    mem.seek(SeekFrom::Start(address as u64)).unwrap();
    mem.write_all(&[byte]).unwrap();
}

fn stub_bytes(site: &ProbeSite) -> &'static [u8] {
    let len = Arch::host().unwrap().stub().len();
    // SAFETY: the image stays loaded for the duration of each test that calls this.
    unsafe { std::slice::from_raw_parts(site.stub as *const u8, len) }
}

#[test]
fn loads_a_real_file_into_a_private_directory_and_fires() {
    let dir = TempDir::new(0, false);
    let probes = probes(&["hello", "bye"]);
    let (image, skipped) = LoadedImage::load(&spec("my_app", &probes), &[dir.candidate()]).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");

    let path = image.path();
    assert_eq!(path.parent().unwrap(), dir.0);
    let name = StubFileName::parse(path.file_name().unwrap().to_str().unwrap()).unwrap();
    assert_eq!(
        (name.provider.as_str(), name.process),
        ("my_app", ProcessKey::current())
    );
    let dir_meta = fs::metadata(&dir.0).unwrap();
    assert_eq!(dir_meta.mode() & 0o777, 0o700, "created private");
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    assert_eq!(fs::metadata(&path).unwrap().len(), image.len());

    let lines = mapping_lines(&path);
    assert!(!lines.is_empty(), "mapped");
    assert!(
        lines.iter().all(|line| !line.ends_with("(deleted)")),
        "{lines:?}"
    );
    assert!(
        lines.iter().all(|line| !line.contains("wx")),
        "never writable and executable: {lines:?}"
    );
    assert!(lines.iter().any(|line| line.contains("r-xp")), "{lines:?}");
    assert!(lines.iter().any(|line| line.contains("rw-p")), "{lines:?}");

    for index in 0..2 {
        let site = image.probe_site(index).unwrap();
        assert_eq!(stub_bytes(&site), Arch::host().unwrap().stub());
        // SAFETY: loaded until the unload below.
        unsafe {
            assert!(!site.is_enabled());
            site.fire(&[1, 2, 3, 4, 5, 6]);
        }
    }
    // SAFETY: no site is used after this.
    unsafe { image.unload() };
    assert!(!path.exists(), "the creator removes its file on unload");
    assert!(mapping_lines(&path).is_empty(), "unmapped");
}

#[test]
fn a_probe_past_the_last_has_no_site_and_asking_does_not_panic() {
    let dir = TempDir::new(0o700, true);
    let probes = probes(&["only"]);
    let (image, _) =
        LoadedImage::load(&spec("no_such_probe", &probes), &[dir.candidate()]).unwrap();
    assert!(image.probe_site(0).is_some());
    assert_eq!(image.probe_site(1), None);
    assert_eq!(image.probe_site(usize::MAX), None);
    // SAFETY: no site is used after this.
    unsafe { image.unload() };
}

#[test]
fn a_raised_semaphore_or_a_breakpoint_means_enabled() {
    let dir = TempDir::new(0o700, true);
    let probes = probes(&["a", "b"]);
    let (image, _) =
        LoadedImage::load(&spec("enabled_check", &probes), &[dir.candidate()]).unwrap();
    let (a, b) = (image.probe_site(0).unwrap(), image.probe_site(1).unwrap());
    // SAFETY: loaded until the unload below; the writes mimic a tracer.
    unsafe {
        *(a.semaphore as *mut u16) = 1;
        assert!(a.is_enabled());
        assert!(!b.is_enabled(), "semaphores are per probe");
        *(a.semaphore as *mut u16) = 0;
        assert!(!a.is_enabled());
        poke(b.stub, 0xcc);
        assert!(
            b.is_enabled(),
            "a breakpoint on the site, semaphore untouched"
        );
        assert!(!a.is_enabled());
        image.unload();
    }
}

#[test]
fn growing_a_loaded_image_rewrites_the_same_file_and_keeps_offsets() {
    let dir = TempDir::new(0o700, true);
    let all = probes(&["one", "two", "three"]);
    let (image, _) = LoadedImage::load(&spec("grows", &all[..2]), &[dir.candidate()]).unwrap();
    let path = image.path();
    let inode = fs::metadata(&path).unwrap().ino();
    let before: Vec<usize> = (0..2)
        .map(|i| image.probe_site(i).unwrap().stub - image.probe_site(0).unwrap().stub)
        .collect();
    // SAFETY: the old sites are not used after the reload.
    let reloaded = unsafe { image.reload(&spec("grows", &all), &[dir.candidate()]) };
    let Ok(Reloaded::InPlace(image)) = reloaded else {
        panic!("expected an in-place reload")
    };
    assert_eq!(image.path(), path);
    assert_eq!(
        fs::metadata(&path).unwrap().ino(),
        inode,
        "same inode: attached uprobes survive"
    );
    let after: Vec<usize> = (0..2)
        .map(|i| image.probe_site(i).unwrap().stub - image.probe_site(0).unwrap().stub)
        .collect();
    assert_eq!(before, after);
    assert_eq!(image.layout().probe_count(), 3);
    assert_eq!(
        stub_bytes(&image.probe_site(2).unwrap()),
        Arch::host().unwrap().stub()
    );
    assert_eq!(
        mapping_lines(&path)
            .iter()
            .filter(|l| l.contains("r-xp"))
            .count(),
        1,
        "the old mapping is gone"
    );
    // SAFETY: nothing uses the sites afterwards.
    unsafe {
        image.probe_site(2).unwrap().fire(&[0; 6]);
        image.unload();
    }
}

#[test]
fn unusable_directories_are_skipped_with_the_reason() {
    let symlink = TempDir::new(0, false);
    let target = TempDir::new(0o700, true);
    std::os::unix::fs::symlink(&target.0, &symlink.0).unwrap();
    let open = TempDir::new(0o755, true);
    let world_writable = TempDir::new(0o777, true);
    let file = TempDir::new(0, false);
    fs::write(&file.0, b"not a directory").unwrap();
    let good = TempDir::new(0o700, true);

    let candidates = [
        symlink.candidate(),
        open.candidate(),
        world_writable.candidate(),
        file.candidate(),
        good.candidate(),
    ];
    let probes = probes(&["p"]);
    let (image, skipped) = LoadedImage::load(&spec("picky", &probes), &candidates).unwrap();
    assert_eq!(image.path().parent().unwrap(), good.0);
    let reasons: Vec<&str> = skipped.iter().map(|s| s.reason.as_str()).collect();
    assert_eq!(skipped.len(), 4, "{skipped:?}");
    assert!(reasons[0].contains("symbolic link"), "{reasons:?}");
    assert!(
        reasons[1].contains("mode is 0755") && reasons[1].contains("chmod 700"),
        "{reasons:?}"
    );
    assert!(reasons[2].contains("mode is 0777"), "{reasons:?}");
    assert!(reasons[3].contains("not a directory"), "{reasons:?}");
    assert!(skipped[0]
        .location
        .contains(&symlink.0.display().to_string()));
    assert_eq!(
        fs::read_dir(&target.0).unwrap().count(),
        0,
        "nothing written through the link"
    );
    // SAFETY: no site is used.
    unsafe { image.unload() };
}

#[test]
fn a_directory_owned_by_someone_else_is_refused() {
    if unsafe_is_root() {
        let dir = TempDir::new(0o700, true);
        std::os::unix::fs::chown(&dir.0, Some(65534), Some(65534)).unwrap();
        let err = StubDir::open(&dir.0).unwrap_err();
        assert!(err.to_string().contains("owned by uid 65534"), "{err}");
    } else {
        let err = StubDir::open(Path::new("/")).unwrap_err();
        assert!(err.to_string().contains("owned by uid 0"), "{err}");
    }
}

fn unsafe_is_root() -> bool {
    fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

#[test]
fn with_no_usable_directory_a_memfd_is_used() {
    let file = TempDir::new(0, false);
    fs::write(&file.0, b"x").unwrap();
    let probes = probes(&["p"]);
    let (image, skipped) =
        LoadedImage::load(&spec("in_memory", &probes), &[file.candidate()]).unwrap();
    assert!(image.is_memfd());
    assert_eq!(skipped.len(), 1);
    let path = image.path();
    assert!(
        path.starts_with(format!("/proc/{}/fd", std::process::id())),
        "{path:?}"
    );
    assert!(maps()
        .lines()
        .any(|line| line.contains("/memfd:static_tracing:in_memory")));
    // SAFETY: loaded until the unload below.
    unsafe {
        image.probe_site(0).unwrap().fire(&[0; 6]);
        image.unload();
    }
}

#[test]
fn candidates_come_from_the_environment_in_order() {
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.into())
    };
    let paths = |list: Vec<Candidate>| list.into_iter().map(|c| c.path).collect::<Vec<_>>();
    assert_eq!(
        paths(candidates_from(env(&[]), 1000)),
        [PathBuf::from("/tmp/static_tracing-1000")]
    );
    assert_eq!(
        paths(candidates_from(
            env(&[
                ("STATIC_TRACING_DIR", "/srv/st"),
                ("XDG_RUNTIME_DIR", "/run/user/7")
            ]),
            7
        )),
        [
            PathBuf::from("/srv/st"),
            PathBuf::from("/run/user/7/static_tracing"),
            PathBuf::from("/tmp/static_tracing-7")
        ]
    );
    assert_eq!(
        paths(candidates_from(
            env(&[("STATIC_TRACING_DIR", ""), ("XDG_RUNTIME_DIR", "relative")]),
            7
        )),
        [PathBuf::from("/tmp/static_tracing-7")],
        "empty and relative settings are ignored"
    );
}

#[test]
fn stub_file_names_round_trip_and_reject_others() {
    let name = StubFileName {
        provider: "my_app".into(),
        process: ProcessKey {
            pid: 42,
            pid_namespace: 4026531836,
        },
        generation: 7,
    };
    assert_eq!(name.to_string(), "my_app-42-4026531836-7.so");
    assert_eq!(StubFileName::parse("my_app-42-4026531836-7.so"), Some(name));
    for other in [
        "my_app-42-7.so",
        "my_app-42.so",
        "-42-1-7.so",
        "a-b-1-7.so",
        "a-42-b-7.so",
        "a-42-1-7.so.bak",
        "../x-1-2-3.so",
        "a-42-1-x.so",
        "a-+42-1-7.so",
    ] {
        assert_eq!(StubFileName::parse(other), None, "{other}");
    }
}

#[test]
fn a_process_is_named_by_its_pid_and_pid_namespace() {
    let key = ProcessKey::current();
    let namespace = fs::read_link("/proc/self/ns/pid").unwrap();
    assert_eq!(
        namespace.to_str().unwrap(),
        format!("pid:[{}]", key.pid_namespace)
    );
    assert_eq!(key.pid, std::process::id() as i32);
    assert_eq!(
        key.to_string(),
        format!("{}-{}", key.pid, key.pid_namespace)
    );
    assert_eq!(ProcessKey::parse(&key.to_string()), Some(key));
    for other in ["42", "42-", "-42", "42-x", "42-1-2", " 42-1"] {
        assert_eq!(ProcessKey::parse(other), None, "{other}");
    }
    assert_eq!(
        stapsdt::stub_dir::state_file_name(key),
        format!("{key}.state")
    );
}

#[test]
fn the_state_file_is_replaced_whole_moved_when_its_directory_goes_and_swept_when_stale() {
    use stapsdt::image::publish_state;
    let first = TempDir::new(0o700, true);
    let second = TempDir::new(0o700, true);
    let dead = (1..)
        .map(|n| 4_000_000 - n)
        .find(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        .unwrap();
    let stale = second.0.join(format!(
        "{dead}-{}.state",
        ProcessKey::current().pid_namespace
    ));
    fs::write(&stale, b"{}").unwrap();
    fs::write(second.0.join("12abc.state"), b"{}").unwrap();
    let candidates = [first.candidate(), second.candidate()];
    let path = publish_state(b"one", &candidates).unwrap();
    assert_eq!(
        path,
        first.0.join(format!("{}.state", ProcessKey::current()))
    );
    assert_eq!(fs::read(&path).unwrap(), b"one");
    assert_eq!(publish_state(b"two", &candidates).unwrap(), path);
    assert_eq!(fs::read(&path).unwrap(), b"two");
    assert_eq!(
        fs::read_dir(&first.0).unwrap().count(),
        1,
        "no temporary file left behind"
    );

    // The first directory becomes unusable: the state moves, and the old copy goes.
    fs::set_permissions(&first.0, fs::Permissions::from_mode(0o755)).unwrap();
    let moved = publish_state(b"three", &candidates).unwrap();
    assert_eq!(moved.parent().unwrap(), second.0);
    assert_eq!(fs::read(&moved).unwrap(), b"three");
    assert!(!path.exists(), "a stale copy would be read first");
    assert!(!stale.exists(), "the state file of a dead process is swept");
    assert!(
        second.0.join("12abc.state").exists(),
        "not a state file name"
    );
    let err = publish_state(b"x", &[first.candidate()]).unwrap_err();
    assert!(err.to_string().contains("mode is 0755"), "{err:?}");
}

/// The name the loader's list of objects gives the object holding `address`:
/// what debuggers read from outside the process and then open themselves.
fn loader_name(address: usize) -> String {
    // SAFETY: an all-zero Dl_info is a valid out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables for a mapped address.
    let found = unsafe { libc::dladdr(address as *const libc::c_void, &mut info) };
    assert_ne!(found, 0);
    // SAFETY: dli_fname is the loader's NUL-terminated name of the object.
    unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }
        .to_str()
        .unwrap()
        .to_owned()
}

// Images are opened through their descriptor (/proc/self/fd/N), but a
// debugger reading that name from outside would open its own descriptor N:
// gdb hung so, reading its own pipe, with the process stopped.
#[test]
fn images_are_named_by_their_file_in_the_loaders_list_as_in_the_mappings() {
    let dir = TempDir::new(0o700, true);
    let probes = probes(&["p"]);
    let (image, _) = LoadedImage::load(&spec("by_fd", &probes), &[dir.candidate()]).unwrap();
    let stub = image.probe_site(0).unwrap().stub;
    assert_eq!(PathBuf::from(loader_name(stub)), image.path());
    assert!(
        !mapping_lines(&image.path()).is_empty(),
        "maps show the real path for tracers"
    );

    // Reloaded in place: opened again, named again.
    let more = self::probes(&["p", "q"]);
    // SAFETY: no site of the old layout is used afterwards.
    let image = match unsafe { image.reload(&spec("by_fd", &more), &[dir.candidate()]) } {
        Ok(Reloaded::InPlace(image)) => image,
        Ok(Reloaded::NewFile { .. }) => panic!("expected a reload in place"),
        Err(err) => panic!("reload failed: {}", err.error),
    };
    let stub = image.probe_site(1).unwrap().stub;
    assert_eq!(PathBuf::from(loader_name(stub)), image.path());
    // SAFETY: no site is used afterwards.
    unsafe { image.unload() };

    let unusable = TempDir::new(0, false);
    fs::write(&unusable.0, b"x").unwrap();
    let (image, _) =
        LoadedImage::load(&spec("in_memory_named", &probes), &[unusable.candidate()]).unwrap();
    assert!(image.is_memfd());
    let name = loader_name(image.probe_site(0).unwrap().stub);
    assert!(
        name.starts_with("/memfd:static_tracing:in_memory_named"),
        "{name}"
    );
    // SAFETY: no site is used afterwards.
    unsafe { image.unload() };
}

#[test]
fn a_directory_whose_path_holds_a_control_character_is_refused_and_named_escaped() {
    use stapsdt::stub_dir::control_character_in;
    assert_eq!(control_character_in(Path::new("/tmp/a\nb")), Some(b'\n'));
    assert_eq!(control_character_in(Path::new("/tmp/a\x7fb")), Some(0x7f));
    assert_eq!(
        control_character_in(Path::new("/tmp/a\tb\x01")),
        Some(b'\t')
    );
    assert_eq!(control_character_in(Path::new("/tmp/é b~")), None);

    let dir = TempDir::new(0o700, false);
    let bad = dir.0.join("new\nline");
    let err = StubDir::open(&bad).unwrap_err();
    assert!(err.to_string().contains("control character 0x0a"), "{err}");
    assert!(!bad.exists(), "refused before it is created");
    let candidate = Candidate {
        path: bad,
        origin: "$STATIC_TRACING_DIR",
    };
    assert!(
        candidate
            .location()
            .ends_with("new\\nline\" ($STATIC_TRACING_DIR)"),
        "{}",
        candidate.location()
    );
}

#[test]
fn a_reload_with_fewer_probes_is_an_error_and_keeps_the_loaded_image() {
    let dir = TempDir::new(0o700, true);
    let probes = probes(&["a", "b"]);
    let (image, _) = LoadedImage::load(&spec("shrinks", &probes), &[dir.candidate()]).unwrap();
    let path = image.path();
    // SAFETY: no site is used while the reload runs.
    let Err(failed) = (unsafe { image.reload(&spec("shrinks", &probes[..1]), &[dir.candidate()]) })
    else {
        panic!("a loaded image was shrunk")
    };
    assert_eq!(
        failed.error,
        LoadError::Shrinks {
            provider: "shrinks".into(),
            loaded: 2,
            given: 1
        }
    );
    assert!(failed.error.to_string().contains("only grows"));
    let image = failed.previous.expect("the loaded image is handed back");
    assert_eq!((image.path(), image.layout().probe_count()), (path, 2));
    // SAFETY: no site is used afterwards.
    unsafe { image.unload() };
}
