//! The recorder's files next to the state file: the ring, mapped shared so
//! that what is recorded is in the file at once, and the control FIFO; and
//! how the sweep treats each when its process is gone.
// Not under Miri: it maps files, makes FIFOs and takes file locks.
#![cfg(all(target_os = "linux", not(miri)))]

use stapsdt::ring::{parse, Arg, RingConfig, Value};
use stapsdt::ring_file::{RingFile, RingFileError};
use stapsdt::state_file::publish_state;
use stapsdt::stub_dir::{Candidate, ProcessKey, StubDir, STALE_RING_KEPT};
use stapsdt::{control, ArgType};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
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

#[test]
fn the_ring_is_a_private_file_next_to_the_state_file_holding_what_was_just_recorded() {
    let _serial = serial();
    let dir = TempDir::new("recorder-ring");
    let state = publish_state_in(&dir);
    let config = RingConfig::for_size(64 << 10, false).unwrap();
    let ring = RingFile::create(&config).unwrap();

    let path = ring.path();
    assert_eq!(path.parent(), state.parent());
    assert_eq!(
        path.file_name().unwrap().to_str().unwrap(),
        format!("{}.ring", ProcessKey::current())
    );
    let meta = fs::metadata(&path).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o600);
    assert_eq!(meta.len(), config.file_len());
    assert_eq!(ring.len() as u64, config.file_len());

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
fn a_second_ring_replaces_nothing_while_the_first_is_held() {
    let _serial = serial();
    let dir = TempDir::new("recorder-twice");
    publish_state_in(&dir);
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
    let config = RingConfig::for_size(4 << 20, false).unwrap();
    let err = with_file_size_limit(1 << 20, || RingFile::create(&config))
        .err()
        .expect("a ring past the file size limit");
    let message = err.to_string();
    assert!(
        message.contains("ulimit -f") && message.contains("--size"),
        "{message}"
    );
    let leftovers: Vec<_> = fs::read_dir(&dir.0)
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

#[test]
fn the_sweep_removes_an_unheld_fifo_and_an_old_unheld_ring_and_keeps_a_recent_ring() {
    let _serial = serial();
    let dir = TempDir::new("recorder-sweep");
    let key = dead_key();
    let fifo = dir.0.join(format!("{key}.control"));
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let recent = dir.0.join(format!("{key}.ring"));
    fs::write(&recent, b"ring").unwrap();
    let old_key = ProcessKey {
        pid: key.pid - 1,
        ..key
    };
    let old = dir.0.join(format!("{old_key}.ring"));
    fs::write(&old, b"ring").unwrap();
    let long_ago = SystemTime::now() - STALE_RING_KEPT - Duration::from_secs(60);
    File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(long_ago)
        .unwrap();

    let swept = StubDir::open(&dir.0).unwrap().sweep_once();

    assert_eq!(swept, 2);
    assert!(!fifo.exists(), "an unheld control FIFO is stale");
    assert!(
        !old.exists(),
        "an unheld ring older than the grace period goes"
    );
    assert!(
        recent.exists(),
        "the ring of a process that just died stays, to be read"
    );
}
