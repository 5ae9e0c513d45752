//! The sweep removes a file only when no process holds it: not by what its
//! name says about a pid, which means nothing across pid namespaces.
// Not under Miri: it cannot fork or take file locks.
#![cfg(all(target_os = "linux", not(miri)))]

use stapsdt::image::{host_spec, LoadedImage};
use stapsdt::stub_dir::{ProcessKey, StubDir};
use stapsdt::ProbeSpec;
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

mod child;
mod temp_dir;
use child::Child;
use temp_dir::TempDir;

/// A file descriptor held across a fork goes to every child forked then:
/// the tests that fork run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A file named `name` in `dir`, as a process that died left it.
fn write(dir: &TempDir, name: &str) -> PathBuf {
    let path = dir.0.join(name);
    fs::write(&path, b"x").unwrap();
    path
}

/// Holds `path` as a live process holds its files: an open file
/// description with a read lock (`F_OFD_SETLK`).
fn hold(path: &Path) -> File {
    let file = OpenOptions::new().read(true).open(path).unwrap();
    // SAFETY: flock is a plain C struct; all-zero is valid (OFD locks want l_pid 0).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_RDLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: F_OFD_SETLK reads the struct, which outlives the call.
    let locked = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
    assert_eq!(locked, 0);
    file
}

fn dead_pid() -> i32 {
    (1..)
        .map(|n| 4_000_000 - n)
        .find(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        .unwrap()
}

#[test]
fn files_nobody_holds_are_swept_whatever_pid_their_name_says_once_per_process_and_directory() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = TempDir::new("sweep-unheld");
    let namespace = ProcessKey::current().pid_namespace;
    let other = namespace + 1;
    let alive = std::os::unix::process::parent_id();
    let dead = dead_pid();
    let stale = [
        format!("gone-{dead}-{namespace}-3.so"),
        format!("orphan-{alive}-{namespace}-0.so"),
        format!("elsewhere-1-{other}-0.so"),
        format!("{dead}-{namespace}.state"),
        format!("1-{other}.state"),
        format!(".{dead}-{namespace}.state.new"),
    ];
    let unrelated = ["notes.txt", "12abc.state", "old-42-7.so", "a-1-2-3.so.bak"];
    for name in stale.iter().map(String::as_str).chain(unrelated) {
        write(&dir, name);
    }
    let opened = StubDir::open(&dir.0).unwrap();
    assert_eq!(opened.sweep_once(), stale.len());
    let mut left: Vec<String> = fs::read_dir(&dir.0)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    let mut expected = unrelated.map(str::to_owned).to_vec();
    expected.sort();
    assert_eq!(left, expected);

    write(&dir, &stale[0]);
    assert_eq!(opened.sweep_once(), 0, "once per process and directory");
}

#[test]
fn files_a_live_process_holds_are_kept_until_it_is_gone() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = TempDir::new("sweep-held");
    let namespace = ProcessKey::current().pid_namespace;
    let other = namespace + 1;
    let dead = dead_pid();
    // The pid in each name is dead here; the processes holding them are
    // alive, one of them in what the name says is another namespace.
    let names = [
        format!("{dead}-{namespace}.state"),
        format!("mine-{dead}-{namespace}-0.so"),
        format!("{dead}-{other}.state"),
        format!("theirs-{dead}-{other}-0.so"),
    ];
    let held: Vec<File> = names.iter().map(|name| hold(&write(&dir, name))).collect();
    let holder = Child::fork_and_wait();
    drop(held);

    let opened = StubDir::open(&dir.0).unwrap();
    assert_eq!(opened.sweep_once(), 0);
    for name in &names {
        assert!(dir.0.join(name).exists(), "{name} was removed");
        assert!(!opened.remove_if_unheld(name), "{name} was removed");
    }

    drop(holder);
    for name in &names {
        assert!(opened.remove_if_unheld(name), "{name} was kept");
        assert!(!dir.0.join(name).exists());
    }
}

#[test]
fn a_process_never_sweeps_its_own_files_and_a_link_is_nobodys() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = TempDir::new("sweep-own");
    let candidate = stapsdt::stub_dir::Candidate {
        path: dir.0.clone(),
        origin: "test",
    };
    let probes = [ProbeSpec::new("p", &[]).unwrap()];
    let spec = host_spec("own", &probes).unwrap();
    let (image, _) = LoadedImage::load(&spec, std::slice::from_ref(&candidate)).unwrap();
    let path = image.path();
    let name = path.file_name().unwrap().to_str().unwrap();
    let opened = StubDir::open(&dir.0).unwrap();
    assert!(!opened.remove_if_unheld(name), "its creator holds it");
    assert!(path.exists());

    // A symbolic link with a process's file name is nobody's file.
    let link = format!("own-1-{}-0.so", ProcessKey::current().pid_namespace);
    std::os::unix::fs::symlink(&path, dir.0.join(&link)).unwrap();
    assert!(opened.remove_if_unheld(&link));
    assert!(path.exists(), "the link went, not its target");
    // SAFETY: no site is used afterwards.
    unsafe { image.unload() };
    assert!(!path.exists());
}
