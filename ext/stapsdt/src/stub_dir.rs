//! The private directory stub files are written to.
//!
//! Candidates, in order: `$STATIC_TRACING_DIR`, `$XDG_RUNTIME_DIR/static_tracing`,
//! `/tmp/static_tracing-<uid>`. A candidate is used only if its path holds
//! no control character (see [`control_character_in`]) and it is a real
//! directory (not a symbolic link), owned by this process's user, private
//! (no group or other permissions) and not on a `noexec` mount. Files are
//! created, opened and removed only by name relative to the directory
//! descriptor opened and checked then, so nothing is ever written or
//! removed through a link, even if the path later leads elsewhere.
//!
//! Several processes share a directory, maybe from different pid namespaces
//! (containers sharing a volume), where pids mean nothing. So each file
//! says which process made it (see [`ProcessKey`]), and the process holds
//! a lock on it for life (see [`StubDir::create_locked`]): a file nobody
//! holds a lock on is stale, whoever made it.

use crate::descriptors::PlaceError;
use crate::leftovers;
use crate::names;
use crate::sys;
use std::ffi::OsString;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

/// A directory stubs may go to, and the setting that named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub path: PathBuf,
    pub origin: &'static str,
}

impl Candidate {
    /// The candidate as a warning names it: path and setting, with any
    /// control character in the path escaped.
    pub fn location(&self) -> String {
        let path = if control_character_in(&self.path).is_some() {
            format!("{:?}", self.path)
        } else {
            self.path.display().to_string()
        };
        format!("{path} ({})", self.origin)
    }
}

/// The rule for a stub directory's path, which the `static-tracing` command
/// applies too: it must not hold a control character (a byte 0x00 to 0x1f,
/// or 0x7f). Tracers name a stub by its path, and `/proc/PID/maps`, where
/// they find it, escapes such a byte (a newline shows as `\012`), so no
/// tracer could attach to a stub there. Returns the first such byte.
pub fn control_character_in(path: &Path) -> Option<u8> {
    path.as_os_str()
        .as_bytes()
        .iter()
        .copied()
        .find(|byte| byte.is_ascii_control())
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

/// An opened and checked stub directory. Shared (`Arc`): every file this
/// process keeps in it is removed through this one descriptor.
#[derive(Debug)]
pub struct StubDir {
    path: PathBuf,
    dir: File,
    /// Device and inode: what makes two opened directories the same one.
    identity: (u64, u64),
    /// The file system it is on, where `fstatfs` could tell.
    file_system: Option<sys::FileSystemKind>,
}

/// What a directory is opened for: stubs are loaded from it, so it must not
/// be mounted `noexec`; rings are only mapped, so it may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    Stubs,
    Rings { create: bool },
}

/// The directories opened so far, so that one descriptor serves each.
static OPENED: Mutex<Vec<Weak<StubDir>>> = Mutex::new(Vec::new());

impl StubDir {
    /// Creates the directory if needed (mode 0700), opens it without
    /// following a link, and checks it; the error says why it is unusable,
    /// or that there was no descriptor to open it with.
    pub fn open(path: &Path) -> Result<Arc<StubDir>, PlaceError> {
        StubDir::open_for(path, Purpose::Stubs)
    }

    /// [`StubDir::open`] for a directory that holds rings (see
    /// `crate::ring_dir`): checked alike, but it may be mounted `noexec`
    /// (a container's `/dev/shm` is). Unless `create`, a directory that
    /// does not exist is an error ("No such file" in its reason), not made.
    pub fn open_for_rings(path: &Path, create: bool) -> Result<Arc<StubDir>, PlaceError> {
        StubDir::open_for(path, Purpose::Rings { create })
    }

    fn open_for(path: &Path, purpose: Purpose) -> Result<Arc<StubDir>, PlaceError> {
        if let Some(byte) = control_character_in(path) {
            return Err(PlaceError::Unusable(format!(
                "its path holds the control character {byte:#04x}, and tracers cannot name \
                 a file under such a path (/proc/PID/maps escapes it)"
            )));
        }
        let creates = !matches!(purpose, Purpose::Rings { create: false });
        match creates.then(|| DirBuilder::new().mode(0o700).create(path)) {
            None | Some(Ok(())) => {}
            Some(Err(err)) if err.kind() == io::ErrorKind::AlreadyExists => {}
            Some(Err(err)) => {
                return Err(PlaceError::from_io(err, |err| {
                    format!("cannot create it ({err})")
                }))
            }
        }
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|err| {
                PlaceError::from_io(err, |err| match err.raw_os_error() {
                    // With O_NOFOLLOW a link is refused as ELOOP, or as ENOTDIR
                    // when O_DIRECTORY is checked first.
                    Some(libc::ELOOP | libc::ENOTDIR) if path.is_symlink() => {
                        "it is a symbolic link".to_owned()
                    }
                    Some(libc::ENOTDIR) => "it is not a directory".to_owned(),
                    _ => format!("cannot open it ({err})"),
                })
            })?;
        let unusable = PlaceError::Unusable;
        let metadata = dir
            .metadata()
            .map_err(|err| unusable(format!("cannot stat it ({err})")))?;
        let uid = sys::effective_uid();
        if metadata.uid() != uid {
            return Err(unusable(format!(
                "it is owned by uid {}, not by this process's uid {uid}",
                metadata.uid()
            )));
        }
        let mode = metadata.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(unusable(format!(
                "its mode is {mode:04o}: a stub directory must be private to its user (chmod 700 {})",
                path.display()
            )));
        }
        if purpose == Purpose::Stubs
            && sys::mounted_noexec(&dir)
                .map_err(|err| unusable(format!("cannot statvfs it ({err})")))?
        {
            return Err(unusable("it is on a file system mounted noexec".to_owned()));
        }
        let identity = (metadata.dev(), metadata.ino());
        let file_system = sys::file_system_kind(&dir).ok();
        let mut opened = OPENED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        opened.retain(|known| known.strong_count() > 0);
        let known = opened
            .iter()
            .filter_map(Weak::upgrade)
            .find(|known| known.identity == identity && known.path == path);
        if let Some(known) = known {
            return Ok(known);
        }
        let opened_now = Arc::new(StubDir {
            path: path.to_owned(),
            dir,
            identity,
            file_system,
        });
        opened.push(Arc::downgrade(&opened_now));
        Ok(opened_now)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes an unprivileged user may still write in this directory's file system.
    pub fn available_space(&self) -> io::Result<u64> {
        sys::available_space(&self.dir)
    }

    /// Whether its file system keeps files in memory only (tmpfs): what
    /// is written there is never written to a disk.
    pub fn is_in_memory(&self) -> bool {
        self.file_system.is_some_and(sys::FileSystemKind::is_memory)
    }

    /// Its file system's name (`tmpfs`, `ext4`...), for messages.
    pub fn file_system_name(&self) -> String {
        self.file_system
            .map_or_else(|| "an unknown file system".to_owned(), |kind| kind.name())
    }

    /// Removes the rings of processes that are gone beyond what is kept
    /// of them (see [`crate::leftovers`]); returns how many it removed.
    pub fn bound_leftover_rings(&self) -> usize {
        leftovers::bound(&self.dir, Some(&self.path))
    }

    /// Removes the rings of processes that are gone, oldest first, until
    /// `bytes` fit in the file system (or none is left); returns how many
    /// it removed. A new recording's ring comes before the leftovers of old ones.
    pub fn make_room_for(&self, bytes: u64) -> usize {
        leftovers::make_room(&self.dir, Some(&self.path), bytes)
    }

    /// Whether `other` is this very directory, whatever path led to it.
    pub fn is(&self, other: &StubDir) -> bool {
        self.identity == other.identity
    }

    /// Creates the file `name` (mode 0600) holding `contents`; fails if the
    /// name is taken. The returned description carries a read lock, which
    /// marks the file as this process's until the description is closed
    /// (at exit at the latest, or in a forked child that still holds it).
    ///
    /// The file gets its name only once it is locked and written (it is
    /// made with `O_TMPFILE`, then linked in), so a sweep never sees it
    /// unheld. Where that cannot be done (no `O_TMPFILE` on the file
    /// system, no /proc to link by), see [`StubDir::create_named_locked`].
    pub fn create_locked(&self, name: &str, contents: &[u8]) -> io::Result<File> {
        match sys::create_unnamed(&self.dir, 0o600) {
            Ok(unnamed) => {
                sys::lock_shared(&unnamed)?;
                unnamed.write_all_at(contents, 0)?;
                match sys::link_unnamed(&unnamed, &self.dir, name) {
                    Ok(()) => return self.reopen_locked(name, &unnamed),
                    Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {}
                    Err(err) => return Err(err),
                }
            }
            Err(err)
                if err.kind() == io::ErrorKind::Unsupported
                    || matches!(
                        err.raw_os_error(),
                        Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
                    ) => {}
            Err(err) => return Err(err),
        }
        self.create_named_locked(name, contents)
    }

    /// A description of the file just linked in as `name` that knows that
    /// name: one opened on the unnamed file shows in /proc/PID/maps as
    /// `/dir/#inode (deleted)` for good, where tracers would not find it.
    /// It is locked before `unnamed` (and its lock) goes.
    fn reopen_locked(&self, name: &str, unnamed: &File) -> io::Result<File> {
        let named = sys::open_at(&self.dir, name)?;
        if !sys::names_file(&self.dir, name, unnamed) || !sys::names_file(&self.dir, name, &named) {
            return Err(io::Error::other("it was replaced as it was being created"));
        }
        sys::lock_shared(&named)?;
        Ok(named)
    }

    /// [`StubDir::create_locked`] the old way: the file has its name a
    /// moment before it has its lock. A sweep in that moment that locks it
    /// first removes it; then the lock or the check that the name still
    /// leads to this file fails, and so does this, rather than leave a
    /// nameless file. The window that remains is the sweep's own (see
    /// [`StubDir::remove_if_unheld`]).
    fn create_named_locked(&self, name: &str, contents: &[u8]) -> io::Result<File> {
        let file = sys::create_exclusive(&self.dir, name, 0o600)?;
        let ready = sys::lock_shared(&file)
            .and_then(|()| {
                if sys::names_file(&self.dir, name, &file) {
                    Ok(())
                } else {
                    Err(io::Error::other(
                        "another process removed it as it was being created",
                    ))
                }
            })
            .and_then(|()| file.write_all_at(contents, 0));
        if let Err(err) = ready {
            if sys::names_file(&self.dir, name, &file) {
                let _ = self.remove(name);
            }
            return Err(err);
        }
        Ok(file)
    }

    pub fn remove(&self, name: &str) -> io::Result<()> {
        sys::unlink_at(&self.dir, name)
    }

    /// Replaces the file `name` with one holding `contents` at once: readers
    /// see the old file or the new one, never a partial one. Returns the new
    /// file's locked description (see [`StubDir::create_locked`]); the
    /// caller drops the old one's only after this, so the name never leads
    /// to an unheld file.
    pub fn replace(&self, name: &str, contents: &[u8]) -> io::Result<File> {
        let temporary = temporary_name(name);
        let _ = self.remove(&temporary);
        let file = self.create_locked(&temporary, contents)?;
        if let Err(err) = sys::rename_at(&self.dir, &temporary, name) {
            let _ = self.remove(&temporary);
            return Err(err);
        }
        Ok(file)
    }

    /// Creates the FIFO `name` (mode 0600) and returns it open for reading
    /// and writing, locked as [`StubDir::create_locked`] locks a file: read
    /// and written at once, it never blocks its opener and never sees an
    /// end of file. A FIFO cannot be made unnamed first, so it has its name
    /// a moment before its lock, as in [`StubDir::create_named_locked`].
    pub fn create_fifo_locked(&self, name: &str) -> io::Result<File> {
        sys::create_fifo_at(&self.dir, name)?;
        let ready = sys::open_at(&self.dir, name).and_then(|fifo| {
            sys::lock_shared(&fifo)?;
            if sys::names_file(&self.dir, name, &fifo) {
                Ok(fifo)
            } else {
                Err(io::Error::other(
                    "another process removed it as it was being created",
                ))
            }
        });
        if ready.is_err() {
            let _ = self.remove(name);
        }
        ready
    }

    /// Removes the entry `name` if it is provably stale: no open file
    /// description holds a lock on it, so neither its creator nor a forked
    /// child with a claim on it is alive (see [`StubDir::create_locked`]).
    /// A symbolic link is never a process's file, and goes too.
    ///
    /// The write lock taken here keeps anyone from claiming the file until
    /// it is gone. Between the check that the name still leads to it and
    /// the removal, only a process with the same key could put another
    /// file there: one that reused the pid of the file's dead creator.
    pub fn remove_if_unheld(&self, name: &str) -> bool {
        let file = match sys::open_at(&self.dir, name) {
            Ok(file) => file,
            Err(err) if err.raw_os_error() == Some(libc::ELOOP) => {
                return self.remove(name).is_ok();
            }
            Err(_) => return false,
        };
        file.metadata().is_ok_and(|meta| {
            meta.is_file() || (meta.file_type().is_fifo() && control_file_key(name).is_some())
        }) && sys::try_lock_exclusive(&file).unwrap_or(false)
            && sys::names_file(&self.dir, name, &file)
            && self.remove(name).is_ok()
    }

    /// Removes the files that processes no longer hold (see
    /// [`StubDir::remove_if_unheld`]), once per directory and process.
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

    /// Removes what no process holds any more: every such file, but the
    /// rings of processes that are gone, of which the newest are kept
    /// (see [`crate::leftovers`]).
    fn sweep(&self) -> usize {
        let removed = entry_names(&self.dir, Some(&self.path))
            .iter()
            .filter(|name| {
                made_by_a_process(name)
                    && ring_file_key(name).is_none()
                    && self.remove_if_unheld(name)
            })
            .count();
        removed + self.bound_leftover_rings()
    }
}

/// The names in the directory `dir`, read through its descriptor (the
/// directory it is, wherever its path leads now), else by `path`. Names
/// that are not UTF-8 are none the gem gives.
pub(crate) fn entry_names(dir: &File, path: Option<&Path>) -> Vec<String> {
    let by_descriptor = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    let entries =
        std::fs::read_dir(&by_descriptor).or_else(|err| path.map_or(Err(err), std::fs::read_dir));
    entries.map_or_else(
        |_| Vec::new(),
        |entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.file_name().into_string().ok())
                .collect()
        },
    )
}

/// Whether `name` is one of the names processes give their files here.
fn made_by_a_process(name: &str) -> bool {
    StubFileName::parse(name).is_some()
        || state_file_key(name).is_some()
        || ring_file_key(name).is_some()
        || control_file_key(name).is_some()
        || name
            .strip_prefix('.')
            .and_then(|name| name.strip_suffix(".new"))
            .and_then(state_file_key)
            .is_some()
}

/// The name a file is written under before it replaces `name`.
fn temporary_name(name: &str) -> String {
    format!(".{name}.new")
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

/// `<pid>-<pidns>.ring`: the recorder's ring (see `crate::ring_file`).
pub fn ring_file_name(key: ProcessKey) -> String {
    format!("{key}.ring")
}

pub(crate) fn ring_file_key(name: &str) -> Option<ProcessKey> {
    ProcessKey::parse(name.strip_suffix(".ring")?)
}

/// `<pid>-<pidns>.control`: the FIFO the `static-tracing` command writes
/// its requests to (see `crate::control`).
pub fn control_file_name(key: ProcessKey) -> String {
    format!("{key}.control")
}

fn control_file_key(name: &str) -> Option<ProcessKey> {
    ProcessKey::parse(name.strip_suffix(".control")?)
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
        // A provider name holds no '-': what follows its first one is the key.
        let (provider, process) = rest.split_once('-')?;
        if !names::is_valid(provider) {
            return None;
        }
        Some(StubFileName {
            provider: provider.to_owned(),
            process: ProcessKey::parse(process)?,
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
