//! The private directory stub files are written to.
//!
//! Candidates, in order: `$STATIC_TRACING_DIR`, `$XDG_RUNTIME_DIR/static_tracing`,
//! `/tmp/static_tracing-<uid>`. A candidate is used only if it is a real
//! directory (not a symbolic link), owned by this process's user, private
//! (no group or other permissions) and not on a `noexec` mount. Files are
//! created exclusively inside it, by name relative to the opened directory,
//! so nothing is ever written through a link.

use crate::names;
use crate::sys;
use std::ffi::OsString;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A directory stubs may go to, and the setting that named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub path: PathBuf,
    pub origin: &'static str,
}

/// The candidates for this process, from its environment.
pub fn candidates() -> Vec<Candidate> {
    candidates_from(|name| std::env::var_os(name), sys::effective_uid())
}

pub fn candidates_from(env: impl Fn(&str) -> Option<OsString>, uid: u32) -> Vec<Candidate> {
    let set = |name: &str| {
        env(name)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    };
    let mut list = Vec::new();
    if let Some(dir) = set("STATIC_TRACING_DIR") {
        let path = std::path::absolute(&dir).unwrap_or(dir);
        list.push(Candidate {
            path,
            origin: "$STATIC_TRACING_DIR",
        });
    }
    // The XDG spec says to ignore a relative $XDG_RUNTIME_DIR.
    if let Some(runtime) = set("XDG_RUNTIME_DIR").filter(|path| path.is_absolute()) {
        list.push(Candidate {
            path: runtime.join("static_tracing"),
            origin: "$XDG_RUNTIME_DIR",
        });
    }
    list.push(Candidate {
        path: PathBuf::from(format!("/tmp/static_tracing-{uid}")),
        origin: "default",
    });
    list
}

/// An opened and checked stub directory.
#[derive(Debug)]
pub struct StubDir {
    path: PathBuf,
    dir: File,
}

impl StubDir {
    /// Creates the directory if needed (mode 0700), opens it without
    /// following a link, and checks it; the error says why it is unusable.
    pub fn open(path: &Path) -> Result<StubDir, String> {
        match DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err(format!("cannot create it ({err})")),
        }
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|err| match err.raw_os_error() {
                // With O_NOFOLLOW a link is refused as ELOOP, or as ENOTDIR
                // when O_DIRECTORY is checked first.
                Some(libc::ELOOP | libc::ENOTDIR) if path.is_symlink() => {
                    "it is a symbolic link".to_owned()
                }
                Some(libc::ENOTDIR) => "it is not a directory".to_owned(),
                _ => format!("cannot open it ({err})"),
            })?;
        let metadata = dir
            .metadata()
            .map_err(|err| format!("cannot stat it ({err})"))?;
        let uid = sys::effective_uid();
        if metadata.uid() != uid {
            return Err(format!(
                "it is owned by uid {}, not by this process's uid {uid}",
                metadata.uid()
            ));
        }
        let mode = metadata.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(format!(
                "its mode is {mode:04o}: a stub directory must be private to its user (chmod 700 {})",
                path.display()
            ));
        }
        if sys::mounted_noexec(&dir).map_err(|err| format!("cannot statvfs it ({err})"))? {
            return Err("it is on a file system mounted noexec".to_owned());
        }
        Ok(StubDir {
            path: path.to_owned(),
            dir,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates a new, empty file (mode 0600); fails if the name is taken.
    pub fn create(&self, name: &str) -> io::Result<File> {
        sys::create_exclusive(&self.dir, name, 0o600)
    }

    pub fn remove(&self, name: &str) -> io::Result<()> {
        sys::unlink_at(&self.dir, name)
    }

    /// Replaces the file `name` with `contents` at once: readers see the
    /// old file or the new one, never a partial one.
    pub fn replace(&self, name: &str, contents: &[u8]) -> io::Result<()> {
        let temporary = format!(".{name}.new");
        let _ = self.remove(&temporary);
        let file = self.create(&temporary)?;
        let written = std::os::unix::fs::FileExt::write_all_at(&file, contents, 0)
            .and_then(|()| sys::rename_at(&self.dir, &temporary, name));
        if written.is_err() {
            let _ = self.remove(&temporary);
        }
        written
    }

    /// Whether a process still maps the file: children of its (dead)
    /// creator hold claims on it (see `crate::image`).
    fn mapped_by_a_process(&self, name: &str) -> bool {
        sys::open_at(&self.dir, name).is_ok_and(|file| sys::claimed_by_another_process(&file))
    }

    /// Removes the stub files of processes that no longer exist (unless a
    /// surviving child still maps one), once per directory and process.
    /// Returns how many it removed.
    pub fn sweep_once(&self) -> usize {
        static SWEPT: Mutex<Vec<(libc::pid_t, PathBuf)>> = Mutex::new(Vec::new());
        let pid = sys::current_pid();
        {
            let mut swept = SWEPT
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if swept
                .iter()
                .any(|(by, path)| *by == pid && *path == self.path)
            {
                return 0;
            }
            swept.push((pid, self.path.clone()));
        }
        self.sweep()
    }

    fn sweep(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.path) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let stale = if let Some(stub) = StubFileName::parse(name) {
                !sys::process_exists(stub.process.pid) && !self.mapped_by_a_process(name)
            } else if let Some(key) = state_file_key(name) {
                !sys::process_exists(key.pid)
            } else {
                false
            };
            if stale && self.remove(name).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}

/// `<pid>-<pidns>`: how stub and state file names say which process made
/// them. The pid alone is not enough: processes of different pid namespaces
/// (containers sharing a volume, each app being pid 1) share a directory. So
/// the key is the pid as the process sees it (`getpid`) and the inode number
/// of its pid namespace (the `N` of `/proc/self/ns/pid -> pid:[N]`), both
/// in decimal; the namespace is `0` where it cannot be read (no /proc).
/// This is the one place these names are made and read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProcessKey {
    pub pid: libc::pid_t,
    pub pid_namespace: u64,
}

impl ProcessKey {
    /// This process's key. Computed each time: a forked child has a pid of
    /// its own, and may be in another pid namespace than its parent.
    pub fn current() -> ProcessKey {
        ProcessKey {
            pid: sys::current_pid(),
            pid_namespace: std::fs::metadata("/proc/self/ns/pid").map_or(0, |meta| meta.ino()),
        }
    }

    pub fn parse(key: &str) -> Option<ProcessKey> {
        let (pid, pid_namespace) = key.split_once('-')?;
        Some(ProcessKey {
            pid: parse_decimal(pid)?,
            pid_namespace: parse_decimal(pid_namespace)?,
        })
    }
}

impl std::fmt::Display for ProcessKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.pid, self.pid_namespace)
    }
}

/// Plain decimal digits only: no sign, no space, no empty string.
fn parse_decimal<T: std::str::FromStr>(digits: &str) -> Option<T> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `<pid>-<pidns>.state` (see [`ProcessKey`]): what a process publishes
/// about itself (see `crate::image::publish_state`), read by the
/// `static-tracing` command.
pub fn state_file_name(key: ProcessKey) -> String {
    format!("{key}.state")
}

fn state_file_key(name: &str) -> Option<ProcessKey> {
    ProcessKey::parse(name.strip_suffix(".state")?)
}

/// `<provider>-<pid>-<pidns>-<generation>.so`: the creating process (see
/// [`ProcessKey`]) is part of the name so that no two processes pick the
/// same name, and stale files can be recognized and removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StubFileName {
    pub provider: String,
    pub process: ProcessKey,
    pub generation: u64,
}

impl StubFileName {
    pub fn parse(name: &str) -> Option<StubFileName> {
        let stem = name.strip_suffix(".so")?;
        let (rest, generation) = stem.rsplit_once('-')?;
        let (rest, pid_namespace) = rest.rsplit_once('-')?;
        let (provider, pid) = rest.rsplit_once('-')?;
        if !names::is_valid(provider) {
            return None;
        }
        Some(StubFileName {
            provider: provider.to_owned(),
            process: ProcessKey {
                pid: parse_decimal(pid)?,
                pid_namespace: parse_decimal(pid_namespace)?,
            },
            generation: parse_decimal(generation)?,
        })
    }
}

impl std::fmt::Display for StubFileName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}-{}-{}.so",
            self.provider, self.process, self.generation
        )
    }
}
