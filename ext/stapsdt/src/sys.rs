//! Every call into libc this crate makes, each behind a safe function (or
//! an `unsafe fn` saying what its caller must guarantee). The other places
//! with `unsafe` are [`crate::site`], which reads and calls a loaded probe,
//! and [`crate::image`]'s `unsafe fn`s, which only pass their caller's
//! guarantee on to [`Library::close`].

pub mod fork_claims;

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, Ordering};

/// A `dlopen` handle. Closing it is explicit ([`Library::close`]) because
/// whether it is safe to unmap depends on the caller: see there.
#[derive(Debug)]
pub struct Library {
    handle: NonNull<libc::c_void>,
    /// The name the loader gave the object, once [`Library::show_as`]
    /// replaced it: freed when the object is closed, as the loader frees
    /// the name it holds then.
    replaced_name: Option<NonNull<libc::c_char>>,
}

// SAFETY: a dlopen handle is a process-wide token; glibc's dl* functions take
// their own lock, so the handle may be used and closed from any thread.
unsafe impl Send for Library {}

/// The public head of glibc's and musl's `struct link_map` (`<link.h>`):
/// what debuggers read from outside the process.
#[cfg(target_os = "linux")]
#[repr(C)]
struct LinkMapHead {
    l_addr: usize,
    l_name: *mut libc::c_char,
}

impl Library {
    /// Loads the shared object at `path` with its symbols kept local.
    pub fn open(path: &Path) -> Result<Library, String> {
        let path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| "path contains a NUL byte".to_owned())?;
        // SAFETY: `path` is a valid C string. The objects loaded here are our
        // own stubs: they have no initializers and no dependencies.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        NonNull::new(handle)
            .map(|handle| Library {
                handle,
                replaced_name: None,
            })
            .ok_or_else(last_dl_error)
    }

    /// Loads the shared object at `path` (see [`Library::open`]) and finds
    /// its load bias: what to add to an address of the file to get the
    /// address in this process. The loader's list of objects names it
    /// `shown_as` (see [`Library::show_as`]).
    pub fn open_located(path: &Path, shown_as: &Path) -> Result<(Library, usize), String> {
        let mut library = Library::open(path)?;
        match library.base() {
            Ok(base) => {
                if path != shown_as {
                    library.show_as(shown_as);
                }
                Ok((library, base))
            }
            Err(err) => {
                // SAFETY: just loaded, and nothing was taken from it: no code
                // of it has run and no pointer into it exists.
                unsafe { library.close() };
                Err(err)
            }
        }
    }

    #[cfg(target_os = "linux")]
    fn link_map(&self) -> Result<*mut LinkMapHead, String> {
        let mut map: *mut LinkMapHead = std::ptr::null_mut();
        // SAFETY: RTLD_DI_LINKMAP stores a `struct link_map *` into `map`; the
        // handle is live, and the link map lives as long as the handle.
        let status = unsafe {
            libc::dlinfo(
                self.handle.as_ptr(),
                libc::RTLD_DI_LINKMAP,
                (&mut map as *mut *mut LinkMapHead).cast(),
            )
        };
        if status != 0 || map.is_null() {
            return Err(format!(
                "dlinfo(RTLD_DI_LINKMAP) failed: {}",
                last_dl_error()
            ));
        }
        Ok(map)
    }

    #[cfg(target_os = "linux")]
    fn base(&self) -> Result<usize, String> {
        let map = self.link_map()?;
        // SAFETY: `map` points at the loader's live link map (see above).
        Ok(unsafe { (*map).l_addr })
    }

    /// Stubs are only loaded on Linux: elsewhere `image` refuses before.
    #[cfg(not(target_os = "linux"))]
    fn base(&self) -> Result<usize, String> {
        Err("stubs are only loaded on Linux".to_owned())
    }

    /// Makes the loader's list of objects (`r_debug`, `dl_iterate_phdr`,
    /// `dladdr`) name the object `name` instead of the path it was opened
    /// by. Debuggers and profilers read that list from outside the process
    /// and open each name themselves: a `/proc/self/fd/N` there is *their*
    /// descriptor N (gdb, attaching, reads its own pipe and hangs with the
    /// process stopped). A name that cannot be set leaves the old one.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn show_as(&mut self, name: &Path) {
        let Ok(name) = CString::new(name.as_os_str().as_bytes()) else {
            return;
        };
        let Ok(map) = self.link_map() else {
            return;
        };
        // SAFETY: `map` is the live link map of this handle (see
        // `link_map`); `l_name` is an aligned `char *` of it.
        let l_name = unsafe { AtomicPtr::from_ptr(std::ptr::addr_of_mut!((*map).l_name)) };
        let current = l_name.load(Ordering::Acquire);
        // SAFETY: the loader's name of a loaded object is a valid C string.
        if !current.is_null() && unsafe { CStr::from_ptr(current) } == name.as_c_str() {
            // Named so already (an object loaded twice is one object).
            return;
        }
        // glibc frees `l_name` when the object is closed: it must come from
        // malloc.
        // SAFETY: `name` is a valid C string.
        let copy = unsafe { libc::strdup(name.as_ptr()) };
        if copy.is_null() {
            return;
        }
        // The store is atomic, so a thread walking the list meanwhile sees
        // the old name or the new one, each a valid string. The old one
        // stays allocated until the object is closed ([`Library::close`]):
        // such a thread may use what it read as long as the object is
        // loaded, as it may the name the loader frees then.
        let replaced = l_name.swap(copy, Ordering::AcqRel);
        self.replaced_name = NonNull::new(replaced);
    }

    /// Elsewhere (musl: untested) the name is left as the object was opened.
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    fn show_as(&mut self, _name: &Path) {}

    /// Unmaps the object.
    ///
    /// # Safety
    /// No thread may be executing, or about to execute, code of this object,
    /// and no pointer into it may be used afterwards.
    pub unsafe fn close(self) {
        // SAFETY: guaranteed by the caller. A failure leaves the object mapped,
        // which is harmless, so the status is not interesting.
        unsafe { libc::dlclose(self.handle.as_ptr()) };
        if let Some(name) = self.replaced_name {
            // SAFETY: the loader's name of the object, which it allocated
            // with malloc and no longer refers to (`show_as` replaced it);
            // the object is closed, so nothing read from the loader's list
            // may use it any more (see `show_as`).
            unsafe { libc::free(name.as_ptr().cast()) };
        }
    }
}

fn last_dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string that stays valid
    // until the next dl* call on this thread; it is copied at once.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        "unknown dynamic loader error".to_owned()
    } else {
        // SAFETY: non-null, NUL-terminated (see above).
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    }
}

/// An anonymous, sealed-off file in memory (`memfd_create`), executable.
#[cfg(target_os = "linux")]
pub fn memfd(name: &str) -> io::Result<File> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // Kernels with vm.memfd_noexec want MFD_EXEC said out loud; older ones
    // reject the unknown flag, so try both.
    for flags in [libc::MFD_CLOEXEC | libc::MFD_EXEC, libc::MFD_CLOEXEC] {
        // SAFETY: `name` is a valid C string; the returned descriptor is ours.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
        if fd >= 0 {
            // SAFETY: `fd` was just returned by memfd_create and is owned by no one else.
            return Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINVAL) {
            return Err(err);
        }
    }
    Err(io::Error::last_os_error())
}

#[cfg(not(target_os = "linux"))]
pub fn memfd(_name: &str) -> io::Result<File> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Whether the file system holding `fd` is mounted `noexec`.
#[cfg(target_os = "linux")]
pub fn mounted_noexec(fd: &impl AsRawFd) -> io::Result<bool> {
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `stat` is a valid out-pointer; fstatvfs fills it on success.
    if unsafe { libc::fstatvfs(fd.as_raw_fd(), stat.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatvfs succeeded, so `stat` is initialized.
    let stat = unsafe { stat.assume_init() };
    Ok(stat.f_flag & libc::ST_NOEXEC != 0)
}

#[cfg(not(target_os = "linux"))]
pub fn mounted_noexec(_fd: &impl AsRawFd) -> io::Result<bool> {
    Ok(false)
}

/// The kind of file system a file is on, as `fstatfs` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileSystemKind(u64);

impl FileSystemKind {
    /// Kept in memory, with no disk behind it: what is written there is
    /// never written back anywhere (tmpfs, ramfs).
    pub fn is_memory(self) -> bool {
        matches!(self.0, 0x0102_1994 | 0x8584_58f6)
    }

    /// Its usual name, for messages.
    pub fn name(self) -> String {
        let known = match self.0 {
            0x0102_1994 => "tmpfs",
            0x8584_58f6 => "ramfs",
            0xef53 => "ext4",
            0x5846_5342 => "xfs",
            0x9123_683e => "btrfs",
            0x794c_7630 => "overlayfs",
            0x6969 => "nfs",
            0x2fc1_2fc1 => "zfs",
            0xf2f5_2010 => "f2fs",
            0xff53_4d42 | 0xfe53_4d42 => "cifs",
            0x6573_5546 => "fuse",
            _ => return format!("a file system of type {:#x}", self.0),
        };
        known.to_owned()
    }
}

/// The file system `fd` is on.
#[cfg(target_os = "linux")]
pub fn file_system_kind(fd: &impl AsRawFd) -> io::Result<FileSystemKind> {
    let mut stat = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `stat` is a valid out-pointer; fstatfs fills it on success.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), stat.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatfs succeeded, so `stat` is initialized.
    let stat = unsafe { stat.assume_init() };
    // f_type is a signed word on some libcs; the magic numbers are 32-bit.
    #[allow(clippy::unnecessary_cast)]
    Ok(FileSystemKind(stat.f_type as u64 & 0xffff_ffff))
}

#[cfg(not(target_os = "linux"))]
pub fn file_system_kind(_fd: &impl AsRawFd) -> io::Result<FileSystemKind> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

pub fn current_pid() -> libc::pid_t {
    std::process::id() as libc::pid_t
}

pub fn effective_uid() -> libc::uid_t {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as u64
    } else {
        4096
    }
}

#[cfg(target_os = "linux")]
fn whole_file_lock(kind: libc::c_short) -> libc::flock {
    // SAFETY: flock is a plain C struct; all-zero is a valid value (and
    // OFD locks require l_pid to be 0).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock
}

/// Takes a lock of `kind` on the whole file behind `fd`, for as long as its
/// open file description lives (`F_OFD_SETLK`), without waiting. Only
/// fcntl: safe to call from the fork handlers.
#[cfg(target_os = "linux")]
fn set_whole_file_lock(fd: RawFd, kind: libc::c_int) -> io::Result<()> {
    let lock = whole_file_lock(kind as libc::c_short);
    // SAFETY: F_OFD_SETLK only reads the struct.
    if unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &lock) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Creates `name` inside the directory `dir`, failing if anything (a file,
/// a symbolic link) already has that name.
pub fn create_exclusive(dir: &File, name: &str, mode: libc::mode_t) -> io::Result<File> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: valid directory descriptor and C string; the new descriptor is ours.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags,
            libc::c_uint::from(mode),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by no one else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Opens the file `name` of `dir` for reading and writing (a write lock
/// needs both), never through a link and never waiting on a FIFO.
pub fn open_at(dir: &File, name: &str) -> io::Result<File> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let flags = libc::O_RDWR | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: valid directory descriptor and C string; the new descriptor is ours.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by no one else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Creates a file in the directory `dir` that has no name yet (`O_TMPFILE`):
/// it gets one with [`link_unnamed`]. Fails with `EOPNOTSUPP`, `EISDIR` or
/// `EINVAL` where the file system or kernel cannot do that.
#[cfg(target_os = "linux")]
pub fn create_unnamed(dir: &File, mode: libc::mode_t) -> io::Result<File> {
    let flags = libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC;
    // SAFETY: valid directory descriptor and C string; the new descriptor is ours.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c".".as_ptr(),
            flags,
            libc::c_uint::from(mode),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by no one else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

#[cfg(not(target_os = "linux"))]
pub fn create_unnamed(_dir: &File, _mode: libc::mode_t) -> io::Result<File> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Gives the unnamed `file` (see [`create_unnamed`]) the name `name` in
/// `dir`; fails with `EEXIST` if the name is taken, and with `ENOENT`
/// where /proc is not mounted.
#[cfg(target_os = "linux")]
pub fn link_unnamed(file: &File, dir: &File, name: &str) -> io::Result<()> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let source = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: valid descriptors and C strings.
    let status = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            source.as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if status != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub fn link_unnamed(_file: &File, _dir: &File, _name: &str) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Read-locks the whole of `file` for as long as its open file description
/// lives (`F_OFD_SETLK`): the mark of a file some live process holds.
#[cfg(target_os = "linux")]
pub fn lock_shared(file: &File) -> io::Result<()> {
    set_whole_file_lock(file.as_raw_fd(), libc::F_RDLCK)
}

/// Without open file description locks no file is marked as held, and
/// [`try_lock_exclusive`] never succeeds: nothing is ever swept.
#[cfg(not(target_os = "linux"))]
pub fn lock_shared(_file: &File) -> io::Result<()> {
    Ok(())
}

/// Write-locks the whole of `file` if no other open file description holds
/// a lock on it, without waiting. Ok(false) when one does.
#[cfg(target_os = "linux")]
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    match set_whole_file_lock(file.as_raw_fd(), libc::F_WRLCK) {
        Ok(()) => Ok(true),
        Err(err) if matches!(err.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => Ok(false),
        Err(err) => Err(err),
    }
}

#[cfg(not(target_os = "linux"))]
pub fn try_lock_exclusive(_file: &File) -> io::Result<bool> {
    Ok(false)
}

/// Whether the entry `name` of `dir` is `file` itself (not a link to it).
pub fn names_file(dir: &File, name: &str, file: &File) -> bool {
    let Ok(name) = CString::new(name) else {
        return false;
    };
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: valid directory descriptor, C string and out-pointer.
    let status = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            stat.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if status != 0 {
        return false;
    }
    // SAFETY: fstatat succeeded, so `stat` is initialized.
    let stat = unsafe { stat.assume_init() };
    // dev_t and ino_t are not u64 on every Unix.
    #[allow(clippy::unnecessary_cast)]
    file.metadata()
        .is_ok_and(|meta| meta.dev() == stat.st_dev as u64 && meta.ino() == stat.st_ino as u64)
}

/// Whether `path` (a link itself, not followed) names the file `file` is.
pub fn same_file(path: &Path, file: &File) -> bool {
    match (std::fs::symlink_metadata(path), file.metadata()) {
        (Ok(named), Ok(held)) => named.dev() == held.dev() && named.ino() == held.ino(),
        _ => false,
    }
}

/// This process's limit on open files (`ulimit -n`), if it has one.
pub fn open_files_limit() -> Option<u64> {
    soft_limit(libc::RLIMIT_NOFILE)
}

/// The largest file this process may make (`ulimit -f`), if it has a
/// limit: a write or `fallocate` past it raises SIGXFSZ, which ends the
/// process, so whatever the gem makes is checked against it first.
pub fn file_size_limit() -> Option<u64> {
    soft_limit(libc::RLIMIT_FSIZE)
}

/// What `getrlimit` names a resource by: glibc has a type of its own.
#[cfg(target_env = "gnu")]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_env = "gnu"))]
type Resource = libc::c_int;

/// The soft limit on `resource` (`getrlimit`), if there is one.
fn soft_limit(resource: Resource) -> Option<u64> {
    let mut limit = std::mem::MaybeUninit::<libc::rlimit>::uninit();
    // SAFETY: valid out-pointer; getrlimit fills it on success.
    if unsafe { libc::getrlimit(resource, limit.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: getrlimit succeeded, so `limit` is initialized.
    let limit = unsafe { limit.assume_init() };
    // rlim_t is not u64 on every Unix.
    #[allow(clippy::unnecessary_cast)]
    (limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur as u64)
}

/// Refuses, with `EFBIG`, a file of `len` bytes that this process may not
/// make: the kernel would answer it with SIGXFSZ rather than an error.
pub fn check_file_size(len: u64) -> io::Result<()> {
    match file_size_limit() {
        Some(limit) if len > limit => Err(io::Error::from_raw_os_error(libc::EFBIG)),
        _ => Ok(()),
    }
}

/// Bytes an unprivileged user may still write on the file system of `file`.
#[cfg(target_os = "linux")]
pub fn available_space(file: &File) -> io::Result<u64> {
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: valid descriptor and out-pointer; fstatvfs fills it on success.
    if unsafe { libc::fstatvfs(file.as_raw_fd(), stat.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatvfs succeeded, so `stat` is initialized.
    let stat = unsafe { stat.assume_init() };
    // fsblkcnt_t and c_ulong are u64 here, not on every Unix.
    #[allow(clippy::unnecessary_cast)]
    Ok((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

#[cfg(not(target_os = "linux"))]
pub fn available_space(_file: &File) -> io::Result<u64> {
    Ok(u64::MAX)
}

/// Removes the directory entry `name` of `dir` (a link itself, never its target).
pub fn unlink_at(dir: &File, name: &str) -> io::Result<()> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: valid directory descriptor and C string.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Renames `from` to `to` inside `dir`, replacing `to`.
pub fn rename_at(dir: &File, from: &str, to: &str) -> io::Result<()> {
    let from = CString::new(from).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let to = CString::new(to).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: valid directory descriptor and C strings.
    if unsafe { libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr()) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reserves the blocks of `file` up to `len` bytes, so that writing them
/// later cannot fail for lack of space.
#[cfg(target_os = "linux")]
pub fn allocate(file: &File, len: u64) -> io::Result<()> {
    // SAFETY: plain syscall on a descriptor we own.
    let status = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
    match status {
        0 => Ok(()),
        // Some file systems cannot preallocate; then the write may still fail
        // later, and that is handled there.
        libc::EOPNOTSUPP => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

#[cfg(not(target_os = "linux"))]
pub fn allocate(_file: &File, _len: u64) -> io::Result<()> {
    Ok(())
}

/// Creates the FIFO `name` (mode 0600) inside the directory `dir`, failing
/// if anything already has that name.
pub fn create_fifo_at(dir: &File, name: &str) -> io::Result<()> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: valid directory descriptor and C string.
    if unsafe { libc::mkfifoat(dir.as_raw_fd(), name.as_ptr(), 0o600) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Takes `flock`'s exclusive lock on `file` (a directory too: it needs no
/// write access, unlike a record lock) if no other open file description
/// holds it, without waiting: Ok(false) when one does. It lasts until the
/// descriptor is closed.
pub fn try_flock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: plain syscall on a descriptor the caller holds open.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(err),
    }
}

/// Private memory of a mapping of its own, zeroed, handed back to the
/// kernel when dropped: a large copy (a snapshot of a ring) made here
/// leaves nothing behind, where malloc's arenas keep much of what they
/// were once given (glibc raises its mapping threshold to the size of the
/// last large block freed, so the next one comes from an arena and stays).
/// Its pages take memory only once written.
#[cfg(not(miri))]
#[derive(Debug)]
pub struct AnonymousMemory {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is this value's alone; references to its bytes are
// handed out through `&self`/`&mut self` as a Vec's would be.
#[cfg(not(miri))]
unsafe impl Send for AnonymousMemory {}
// SAFETY: as above.
#[cfg(not(miri))]
unsafe impl Sync for AnonymousMemory {}

#[cfg(not(miri))]
impl AnonymousMemory {
    /// `len` bytes of zeroes (none: no mapping at all).
    pub fn new(len: usize) -> io::Result<AnonymousMemory> {
        if len == 0 {
            return Ok(AnonymousMemory {
                base: NonNull::dangling(),
                len,
            });
        }
        // SAFETY: a fresh private mapping chosen by the kernel overlaps
        // nothing of ours.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(base.cast::<u8>()).ok_or_else(|| io::Error::other("mmap at 0"))?;
        Ok(AnonymousMemory { base, len })
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes mapped readable by `new` (or none, from a
        // dangling, aligned pointer), alive while `self` is, and written
        // only through `as_mut_slice`, which borrows `self` mutably.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr(), self.len) }
    }
}

#[cfg(not(miri))]
impl Drop for AnonymousMemory {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: mapped by `new`, unmapped once; no reference to its
            // bytes outlives `self`.
            unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
        }
    }
}

/// Under Miri, which maps no memory of its own: a Vec.
#[cfg(miri)]
#[derive(Debug)]
pub struct AnonymousMemory(Vec<u8>);

#[cfg(miri)]
impl AnonymousMemory {
    pub fn new(len: usize) -> io::Result<AnonymousMemory> {
        Ok(AnonymousMemory(vec![0; len]))
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

/// A shared, writable mapping of the first `len` bytes of a file, unmapped
/// when dropped. Whoever maps the file sees the same bytes: this process's
/// writes are another process's reads, with no copy in between.
#[derive(Debug)]
pub struct SharedMapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is process-wide memory, not tied to a thread; what is
// read and written through it is the user's to synchronize.
unsafe impl Send for SharedMapping {}
// SAFETY: as above.
unsafe impl Sync for SharedMapping {}

/// Pages populated at once: the process's memory map stays locked only
/// this long, not for the whole of a ring of gigabytes, so that its other
/// threads' `mmap` and `mprotect` (malloc growing an arena) go on.
const POPULATE_PIECE: usize = 16 << 20;

/// How a new mapping's pages are faulted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Populate {
    /// Writable at once: the first write to a page costs what a later one
    /// does. For a file kept in memory (tmpfs), where a page written is
    /// written nowhere else.
    ForWriting,
    /// Readable: a file system that writes dirty pages back to a disk
    /// would otherwise write the whole file out at once. Its first write
    /// to each page still faults (the file system tracks which are dirty).
    ForReading,
}

impl SharedMapping {
    /// Maps `len` bytes of `file` from offset 0, readable and writable, its
    /// pages faulted in now as `populate` says (in pieces, see
    /// `POPULATE_PIECE`) rather than one by one on first use, in a recorded
    /// call. The file must already be that long: a page past its end is a
    /// SIGBUS.
    pub fn new(file: &File, len: usize, populate: Populate) -> io::Result<SharedMapping> {
        let map = |flags| {
            // SAFETY: a fresh mapping chosen by the kernel overlaps nothing
            // of ours; the descriptor is valid for the call.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | flags,
                    file.as_raw_fd(),
                    0,
                )
            }
        };
        let base = map(0);
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(base.cast::<u8>()).ok_or_else(|| io::Error::other("mmap at 0"))?;
        let mapping = SharedMapping { base, len };
        if !mapping.populate_in_pieces(populate) {
            // A kernel before 5.14: populated whole, as mmap does it.
            drop(mapping);
            let base = map(libc::MAP_POPULATE);
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let base =
                NonNull::new(base.cast::<u8>()).ok_or_else(|| io::Error::other("mmap at 0"))?;
            return Ok(SharedMapping { base, len });
        }
        Ok(mapping)
    }

    /// Faults every page in, a piece at a time; false where the kernel
    /// cannot (no MADV_POPULATE_READ or _WRITE: before 5.14).
    #[cfg(target_os = "linux")]
    fn populate_in_pieces(&self, populate: Populate) -> bool {
        let advice = match populate {
            Populate::ForWriting => libc::MADV_POPULATE_WRITE,
            Populate::ForReading => libc::MADV_POPULATE_READ,
        };
        let mut at = 0;
        while at < self.len {
            let piece = POPULATE_PIECE.min(self.len - at);
            // SAFETY: the range is inside this mapping (page-aligned: the
            // mapping is, and POPULATE_PIECE is a multiple of any page
            // size; the last piece ends where the mapping does).
            let done = unsafe { libc::madvise(self.base.as_ptr().add(at).cast(), piece, advice) };
            if done != 0 {
                // EINVAL: not supported. Anything else (ENOMEM, EFAULT) is
                // left to the first write, as without populating.
                return io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) || at > 0;
            }
            at += piece;
        }
        true
    }

    #[cfg(not(target_os = "linux"))]
    fn populate_in_pieces(&self, _populate: Populate) -> bool {
        false
    }

    /// The first byte: page-aligned.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by `new` and is unmapped once; the
        // owner of this mapping guarantees nothing reads it any more.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}
