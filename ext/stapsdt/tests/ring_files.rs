//! The recorder's files: the ring, in memory, mapped shared so that what is
//! recorded is in the file at once, and the control FIFO next to the state
//! file; where the ring goes, and how the sweep treats each when its
//! process is gone.
// Not under Miri: it maps files, makes FIFOs and takes file locks.
#![cfg(all(target_os = "linux", not(miri)))]

use stapsdt::leftovers::KEPT_RINGS;
use stapsdt::ring::{parse, Arg, RingConfig, Value};
use stapsdt::ring_dir::{self, SETTING};
use stapsdt::ring_file::{RingFile, RingFileError};
use stapsdt::state_file::publish_state;
use stapsdt::stub_dir::{Candidate, ProcessKey, StubDir};
use stapsdt::{control, ArgType};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

mod temp_dir;
use std::time::{Duration, SystemTime};
use temp_dir::TempDir;

/// The state file's directory is process-wide: the tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

/// Publishes this process's state file in `dir`: its other files follow it.
fn publish_state_in(dir: &TempDir) -> PathBuf {
    let candidate = Candidate {
        path: dir.0.clone(),
        origin: "test",
    };
    publish_state(b"{}", &[candidate]).unwrap()
}

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn dead_key() -> ProcessKey {
    let pid = (1..)
        .map(|n| 4_000_000 - n)
        .find(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        .unwrap();
    ProcessKey {
        pid,
        pid_namespace: ProcessKey::current().pid_namespace,
    }
}

/// A private directory for rings in memory (`/dev/shm`), named by
/// `$STATIC_TRACING_RING_DIR` while the value lives.
struct RingDirSetting(TempDir);

impl RingDirSetting {
    fn new(name: &str) -> RingDirSetting {
        let dir = TempDir::in_memory(name);
        std::env::set_var(SETTING, &dir.0);
        RingDirSetting(dir)
    }

    fn path(&self) -> &Path {
        &self.0 .0
    }
}

impl Drop for RingDirSetting {
    fn drop(&mut self) {
        std::env::remove_var(SETTING);
    }
}

/// The name of the file system `path` is on, as `stat -f` says it.
fn file_system(path: &Path) -> String {
    let out = std::process::Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn the_ring_is_a_private_file_in_memory_holding_what_was_just_recorded() {
    let _serial = serial();
    let dir = TempDir::new("recorder-ring");
    let state = publish_state_in(&dir);
    let config = RingConfig::for_size(64 << 10, false).unwrap();
    let ring = RingFile::create(&config).unwrap();

    let path = ring.path();
    let uid = fs::metadata(&state).unwrap().uid();
    // A stub directory on a disk (as the temporary directory usually is)
    // sends the ring to /dev/shm; one in memory keeps it.
    let expected = if file_system(&dir.0) == "tmpfs" {
        dir.0.clone()
    } else {
        ring_dir::shared_memory_dir(uid)
    };
    assert_eq!(path.parent().unwrap(), expected);
    assert_eq!(file_system(&path), "tmpfs");
    assert_eq!(ring.on_disk(), None);
    assert_eq!(
        path.file_name().unwrap().to_str().unwrap(),
        format!("{}.ring", ProcessKey::current())
    );
    let meta = fs::metadata(&path).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o600);
    assert_eq!(meta.len(), config.file_len());
    assert_eq!(ring.len() as u64, config.file_len());
    assert_eq!(
        meta.blocks() * 512,
        config.file_len(),
        "every page reserved as the ring is made"
    );
    let dir_meta = fs::metadata(path.parent().unwrap()).unwrap();
    assert_eq!(dir_meta.mode() & 0o7777, 0o700);

    let probe = ring
        .ring()
        .add_probe(
            "app",
            "query",
            &[ArgType::Int64, ArgType::String],
            None,
            None,
        )
        .unwrap();
    assert!(ring
        .ring()
        .record(probe, 1_000, 7, &[Arg::Int(42), Arg::Str(b"SELECT 1")]));

    // Read as another process would: from the file, not the mapping.
    let trace = parse(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(trace.probes.len(), 1);
    assert_eq!(trace.records.len(), 1);
    assert_eq!(
        trace.records[0].args,
        [Value::Int(42), Value::Str(b"SELECT 1".to_vec())]
    );

    drop(ring);
    assert!(!path.exists(), "the ring goes with its recording");
}

#[test]
fn a_stub_directory_in_memory_holds_the_ring_itself() {
    let _serial = serial();
    let dir = TempDir::in_memory("recorder-ring-stubs");
    let state = publish_state_in(&dir);
    let ring = RingFile::create(&RingConfig::for_size(64 << 10, true).unwrap()).unwrap();
    assert_eq!(ring.path().parent(), state.parent());
}

#[test]
fn the_setting_names_the_directory_even_on_a_disk_and_says_so() {
    let _serial = serial();
    let stubs = TempDir::in_memory("recorder-named-stubs");
    publish_state_in(&stubs);
    let named = TempDir::on_disk("recorder-named");
    std::env::set_var(SETTING, &named.0);
    let made = RingFile::create(&RingConfig::for_size(64 << 10, true).unwrap());
    std::env::remove_var(SETTING);
    let ring = made.unwrap();
    assert_eq!(ring.path().parent().unwrap(), named.0);
    assert_ne!(file_system(&named.0), "tmpfs", "/var/tmp is on a disk");
    let on_disk = ring.on_disk().expect("a ring on a disk says so");
    assert!(!on_disk.is_empty() && on_disk != "tmpfs", "{on_disk}");
}

#[test]
fn a_named_directory_that_cannot_be_used_is_refused_naming_the_setting() {
    let _serial = serial();
    let stubs = TempDir::new("recorder-bad-named-stubs");
    publish_state_in(&stubs);
    let shared = TempDir::in_memory("recorder-bad-named");
    fs::set_permissions(&shared.0, fs::Permissions::from_mode(0o755)).unwrap();
    std::env::set_var(SETTING, &shared.0);
    let made = RingFile::create(&RingConfig::for_size(64 << 10, true).unwrap());
    std::env::remove_var(SETTING);
    let message = made.err().expect("a directory others may read").to_string();
    assert!(
        message.contains("STATIC_TRACING_RING_DIR") && message.contains("0755"),
        "{message}"
    );
}

#[test]
fn a_second_ring_replaces_nothing_while_the_first_is_held() {
    let _serial = serial();
    let dir = TempDir::new("recorder-twice");
    publish_state_in(&dir);
    let _rings = RingDirSetting::new("recorder-twice-rings");
    let config = RingConfig::for_size(64 << 10, true).unwrap();
    let first = RingFile::create(&config).unwrap();
    match RingFile::create(&config) {
        Err(RingFileError::Io { err, .. }) => {
            assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists)
        }
        other => panic!("expected the name to be taken, got {:?}", other.map(|_| ())),
    }
    assert!(first.path().exists());
}

/// Runs `f` with this process allowed files of `bytes` at most (`ulimit
/// -f`). SIGXFSZ keeps the disposition a real process has: anything that
/// goes past the limit ends this test process, as it would end the user's.
fn with_file_size_limit<R>(bytes: u64, f: impl FnOnce() -> R) -> R {
    let mut saved = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-pointer.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut saved) };
    assert_eq!(got, 0);
    let limited = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: saved.rlim_max,
    };
    // SAFETY: valid pointer; the limit is put back below.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &limited) }, 0);
    let result = f();
    // SAFETY: as above.
    unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &saved) };
    result
}

#[test]
fn a_ring_the_file_system_or_a_limit_cannot_hold_is_refused_and_leaves_nothing() {
    let _serial = serial();
    let dir = TempDir::new("recorder-huge");
    publish_state_in(&dir);
    let rings = RingDirSetting::new("recorder-huge-rings");
    let config = RingConfig::for_size(4 << 20, false).unwrap();
    let err = with_file_size_limit(1 << 20, || RingFile::create(&config))
        .err()
        .expect("a ring past the file size limit");
    let message = err.to_string();
    assert!(
        message.contains("ulimit -f") && message.contains("--size"),
        "{message}"
    );
    let leftovers: Vec<_> = fs::read_dir(rings.path())
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name())
        .filter(|name| name.to_string_lossy().ends_with(".ring"))
        .collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
}

#[test]
fn the_control_fifo_takes_what_its_user_writes_and_goes_when_closed() {
    let _serial = serial();
    let dir = TempDir::new("recorder-control");
    let state = publish_state_in(&dir);
    let (mut reader, path) = control::open().unwrap();
    assert_eq!(path.parent(), state.parent());
    assert_eq!(
        path.file_name().unwrap().to_str().unwrap(),
        format!("{}.control", ProcessKey::current())
    );
    let meta = fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_fifo());
    assert_eq!(meta.mode() & 0o7777, 0o600);

    // What the command does: open for writing without waiting, write a line.
    let mut writer = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .unwrap();
    writer.write_all(b"{\"action\":\"stop\"}\n").unwrap();
    let mut line = [0u8; 64];
    let read = reader.read(&mut line).unwrap();
    assert_eq!(&line[..read], b"{\"action\":\"stop\"}\n");

    control::close();
    assert!(!path.exists());
}

/// A ring a process that died left in `dir`, made `age` ago.
fn leftover_ring(dir: &Path, key: ProcessKey, age: Duration) -> PathBuf {
    let path = dir.join(format!("{key}.ring"));
    fs::write(&path, b"ring").unwrap();
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(SystemTime::now() - age)
        .unwrap();
    path
}

#[test]
fn the_sweep_removes_an_unheld_fifo_and_keeps_only_the_newest_unheld_rings() {
    let _serial = serial();
    let dir = TempDir::new("recorder-sweep");
    let key = dead_key();
    let fifo = dir.0.join(format!("{key}.control"));
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    // Twelve rings of dead processes, the first the newest; one of a live
    // process, the oldest of all.
    let rings: Vec<PathBuf> = (0..12)
        .map(|n| {
            let key = ProcessKey {
                pid: key.pid - n,
                ..key
            };
            leftover_ring(&dir.0, key, Duration::from_secs(60 * (n as u64 + 1)))
        })
        .collect();
    let live = leftover_ring(&dir.0, ProcessKey::current(), Duration::from_secs(86_400));
    let _held = hold(&live);
    let link_key = ProcessKey {
        pid: key.pid - 100,
        ..key
    };
    let link = dir.0.join(format!("{link_key}.ring"));
    std::os::unix::fs::symlink(&live, &link).unwrap();

    let swept = StubDir::open(&dir.0).unwrap().sweep_once();

    assert_eq!(swept, 1 + 12 - KEPT_RINGS);
    assert!(!fifo.exists(), "an unheld control FIFO is stale");
    for (index, ring) in rings.iter().enumerate() {
        assert_eq!(
            ring.exists(),
            index < KEPT_RINGS,
            "{} (the {index}th newest)",
            ring.display()
        );
    }
    assert!(live.exists(), "a ring its process holds is never swept");
    assert!(
        fs::symlink_metadata(&link).is_err(),
        "a link named as a ring is no process's ring"
    );
}

/// Holds `path` as a live process holds its files: an open file
/// description with a read lock (`F_OFD_SETLK`).
fn hold(path: &Path) -> File {
    use std::os::fd::AsRawFd;
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

#[test]
fn a_process_starting_a_recording_bounds_the_leftovers_where_its_ring_goes() {
    let _serial = serial();
    let stubs = TempDir::new("recorder-bound-stubs");
    publish_state_in(&stubs);
    let rings = RingDirSetting::new("recorder-bound");
    let key = dead_key();
    for n in 0..20 {
        let key = ProcessKey {
            pid: key.pid - n,
            ..key
        };
        leftover_ring(rings.path(), key, Duration::from_secs(n as u64 + 1));
    }
    let ring = RingFile::create(&RingConfig::for_size(64 << 10, true).unwrap()).unwrap();
    let names: Vec<String> = fs::read_dir(rings.path())
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), KEPT_RINGS + 1, "{names:?}");
    assert!(ring.path().exists());
}
