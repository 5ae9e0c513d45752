//! Putting generated images into this process, growing them, taking them out.
//!
//! An image is a real file in a private stub directory (see [`crate::stub_dir`])
//! or, when no directory is usable, a memfd. While a provider is loaded its
//! file stays on disk: newer bpftrace ignores mappings of deleted files.
//!
//! Growing a loaded image rewrites its file in place when only this process
//! maps it: probes keep their offsets (see [`crate::elf`]) and the kernel
//! re-installs attached uprobes, and re-raises their semaphores, when the
//! same inode is mapped again, so a running tracer does not miss a call.
//!
//! A forked child maps its parent's images too, and rewriting a file under
//! another process is not safe. A child holds a claim on each such file for
//! as long as it may map it (see `sys::ForkTables`), so the creator can tell:
//! while a claim is held, a grown image goes to a fresh file instead, and an
//! unloaded one keeps its file until nobody maps it.

use crate::arch::Arch;
use crate::elf::{self, BuildError, ImageSpec, Layout};
use crate::probe::ProbeSpec;
use crate::site::ProbeSite;
use crate::stub_dir::{Candidate, ProcessKey, StubDir, StubFileName};
use crate::sys::{self, Library};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A place an image could not go to, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub location: String,
    pub reason: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.reason)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError {
    Build(BuildError),
    Unsupported,
    NowhereToLoad {
        provider: String,
        tried: Vec<Skipped>,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Build(err) => err.fmt(f),
            LoadError::Unsupported => write!(
                f,
                "USDT probes are supported on Linux x86-64 and aarch64 only"
            ),
            LoadError::NowhereToLoad { provider, tried } => {
                write!(
                    f,
                    "could not load the probes of provider {provider:?}; tried "
                )?;
                for (index, skipped) in tried.iter().enumerate() {
                    let separator = if index == 0 { "" } else { "; " };
                    write!(f, "{separator}{skipped}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for LoadError {}

impl From<BuildError> for LoadError {
    fn from(err: BuildError) -> LoadError {
        LoadError::Build(err)
    }
}

/// Where the image's bytes live.
#[derive(Debug)]
enum Backing {
    Stub { dir: PathBuf, name: String },
    Memfd,
}

/// A file this process created, to be removed when it exits.
struct OwnedFile {
    path: PathBuf,
    creator: libc::pid_t,
    /// No longer loaded here, but kept because another process mapped it.
    retired: bool,
}

/// Every stub file created by this process (or, after a fork, by its
/// ancestors: the creator is recorded so a child never removes those).
static OWNED_FILES: Mutex<Vec<OwnedFile>> = Mutex::new(Vec::new());
static GENERATION: AtomicU64 = AtomicU64::new(0);

fn owned_files() -> std::sync::MutexGuard<'static, Vec<OwnedFile>> {
    OWNED_FILES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Removes every stub file this process created and still has, except the
/// ones a forked child still maps: tracers find a child's probes by the
/// file's name, so it stays until the child is gone too, and the sweep of a
/// later process removes it. Meant for process exit: mappings stay valid,
/// only the names go.
pub fn remove_files_at_exit() -> usize {
    let pid = sys::current_pid();
    let mut files = owned_files();
    let mut removed = 0;
    files.retain(|file| {
        if file.creator != pid {
            return true;
        }
        let in_use =
            File::open(&file.path).is_ok_and(|opened| sys::claimed_by_another_process(&opened));
        if in_use {
            return true;
        }
        removed += usize::from(std::fs::remove_file(&file.path).is_ok());
        false
    });
    removed
}

/// The spec of an image this process can load: for this machine's
/// architecture and page size. None where probes are not supported.
pub fn host_spec<'a>(provider: &'a str, probes: &'a [ProbeSpec]) -> Option<ImageSpec<'a>> {
    Some(ImageSpec {
        provider,
        probes,
        arch: Arch::host()?,
        page_size: sys::page_size(),
    })
}

/// A provider's image, loaded into this process.
#[derive(Debug)]
pub struct LoadedImage {
    library: Library,
    file: File,
    backing: Backing,
    len: u64,
    base: usize,
    layout: Layout,
    creator: libc::pid_t,
    /// Forks seen at load. For a file the fork handlers do not know about
    /// (`tracked` false), any fork since means it may be shared; the second
    /// count does the same for forks after which a child got no claim.
    forks_at_load: (u64, u64),
    tracked: bool,
}

/// An image replaced by a grown one: what became of it.
pub enum Reloaded {
    /// Same file, rewritten: attached tracers keep their probes.
    InPlace(LoadedImage),
    /// A new file; tracers attached to the old one must attach again.
    NewFile {
        image: LoadedImage,
        skipped: Vec<Skipped>,
    },
}

/// A reload that did not happen. `previous` is the old image if it is still
/// loaded, or `None` if it had already been taken out.
pub struct ReloadError {
    pub error: LoadError,
    pub previous: Option<Box<LoadedImage>>,
}

impl LoadedImage {
    /// Generates the image for `spec` and loads it from the first usable
    /// stub directory of `candidates`, or else a memfd. `skipped` lists the
    /// places passed over on the way, for a warning.
    pub fn load(
        spec: &ImageSpec<'_>,
        candidates: &[Candidate],
    ) -> Result<(LoadedImage, Vec<Skipped>), LoadError> {
        let image = build_for_host(spec)?;
        place(spec.provider, &image, candidates)
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Where probe `index` is in this process.
    pub fn site(&self, index: usize) -> ProbeSite {
        assert!(
            index < self.layout.probe_count(),
            "probe {index} is not in this image"
        );
        ProbeSite {
            stub: self.base + self.layout.stub_address(index) as usize,
            semaphore: self.base + self.layout.semaphore_address(index) as usize,
        }
    }

    /// The file a tracer can name (`usdt:PATH:provider:probe`).
    pub fn path(&self) -> PathBuf {
        match &self.backing {
            Backing::Stub { dir, name } => dir.join(name),
            Backing::Memfd => PathBuf::from(format!(
                "/proc/{}/fd/{}",
                sys::current_pid(),
                self.file.as_raw_fd()
            )),
        }
    }

    pub fn is_memfd(&self) -> bool {
        matches!(self.backing, Backing::Memfd)
    }

    /// Size of the image, in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether this process created the file (it was not inherited through fork).
    pub fn created_here(&self) -> bool {
        self.creator == sys::current_pid()
    }

    /// Whether another process may map the file as well.
    fn maybe_shared(&self) -> bool {
        let (forks, unclaimed) = sys::forks_so_far();
        let (forks_then, unclaimed_then) = self.forks_at_load;
        let blind = if self.tracked {
            unclaimed != unclaimed_then
        } else {
            forks != forks_then
        };
        blind || sys::claimed_by_another_process(&self.file)
    }

    /// Replaces the image by the one for `spec`, which must extend the
    /// current one: same probes in the same order, possibly more after them.
    ///
    /// # Safety
    /// No thread may be executing a stub of this image, and no [`ProbeSite`]
    /// of it may be used once this returns: the old mapping may be gone.
    pub unsafe fn reload(
        self,
        spec: &ImageSpec<'_>,
        candidates: &[Candidate],
    ) -> Result<Reloaded, ReloadError> {
        let image = match build_for_host(spec) {
            Ok(image) => image,
            Err(error) => {
                return Err(ReloadError {
                    error,
                    previous: Some(Box::new(self)),
                })
            }
        };
        assert!(
            image.layout.probe_count() >= self.layout.probe_count(),
            "images only grow"
        );
        let new_len = image.bytes.len() as u64;
        let in_place = self.created_here()
            && !self.maybe_shared()
            && new_len >= self.len
            && sys::allocate(&self.file, new_len).is_ok();
        if !in_place {
            return match place(spec.provider, &image, candidates) {
                Ok((image, skipped)) => {
                    // SAFETY: the caller's guarantee.
                    unsafe { self.unload() };
                    Ok(Reloaded::NewFile { image, skipped })
                }
                Err(error) => Err(ReloadError {
                    error,
                    previous: Some(Box::new(self)),
                }),
            };
        }
        let LoadedImage {
            library,
            file,
            backing,
            creator,
            forks_at_load,
            tracked,
            ..
        } = self;
        // SAFETY: the caller's guarantee. The object must be unmapped before
        // it is opened again, or the loader would hand back the old mapping.
        unsafe { library.close() };
        let path = load_path(&backing, &file);
        let reopened = file
            .write_all_at(&image.bytes, 0)
            .map_err(|err| format!("cannot rewrite it ({err})"))
            .and_then(|()| {
                Library::open(&path).map_err(|err| format!("cannot load it again ({err})"))
            });
        match reopened {
            Ok(library) => Ok(Reloaded::InPlace(LoadedImage {
                base: library.base(),
                library,
                file,
                backing,
                len: new_len,
                layout: image.layout,
                creator,
                forks_at_load,
                tracked,
            })),
            Err(reason) => {
                sys::untrack_mapped_file(&file);
                discard(&backing);
                // The rewrite failed half way; a fresh file elsewhere may still work.
                match place(spec.provider, &image, candidates) {
                    Ok((image, skipped)) => Ok(Reloaded::NewFile { image, skipped }),
                    Err(LoadError::NowhereToLoad {
                        provider,
                        mut tried,
                    }) => {
                        tried.insert(
                            0,
                            Skipped {
                                location: path.display().to_string(),
                                reason,
                            },
                        );
                        Err(ReloadError {
                            error: LoadError::NowhereToLoad { provider, tried },
                            previous: None,
                        })
                    }
                    Err(error) => Err(ReloadError {
                        error,
                        previous: None,
                    }),
                }
            }
        }
    }

    /// Takes the image out of this process. Its file is removed if this
    /// process created it and no child can be using it; otherwise it stays
    /// until the creator exits.
    ///
    /// # Safety
    /// As for [`LoadedImage::reload`].
    pub unsafe fn unload(self) {
        let created_here = self.created_here();
        let removable = created_here && !self.maybe_shared();
        // SAFETY: the caller's guarantee.
        unsafe { self.library.close() };
        sys::untrack_mapped_file(&self.file);
        if removable {
            discard(&self.backing);
        } else if created_here {
            retire(&self.backing);
        }
    }
}

fn build_for_host(spec: &ImageSpec<'_>) -> Result<elf::Image, LoadError> {
    if Arch::host() != Some(spec.arch) {
        return Err(LoadError::Unsupported);
    }
    Ok(elf::build(spec)?)
}

/// The name to `dlopen` an image file by: its descriptor, so that what gets
/// loaded is exactly the file written and checked, whatever happens to the
/// path in between (a directory on it swapped for a link, by a user who can
/// write to a parent). Mappings still show the file's real path. The path
/// itself only where /proc is not mounted.
fn load_path(backing: &Backing, file: &File) -> PathBuf {
    let by_descriptor = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    match backing {
        Backing::Stub { dir, name } if !by_descriptor.exists() => dir.join(name),
        _ => by_descriptor,
    }
}

/// Removes a stub file this process created and forgets it.
fn discard(backing: &Backing) {
    if let Backing::Stub { dir, name } = backing {
        let path = dir.join(name);
        // The directory is private to this user, so the name still leads to
        // our file; if it is already gone there is nothing left to do.
        let _ = std::fs::remove_file(&path);
        owned_files().retain(|file| file.path != path);
    }
}

/// Writes `contents` as this process's state file, `<pid>-<pidns>.state`, in the
/// first usable stub directory: where the `static-tracing` command looks for
/// a process's mode and signal. Returns its path, or why no directory would do.
pub fn publish_state(contents: &[u8], candidates: &[Candidate]) -> Result<PathBuf, Vec<Skipped>> {
    let pid = sys::current_pid();
    let name = crate::stub_dir::state_file_name(ProcessKey::current());
    let mut skipped = Vec::new();
    for candidate in candidates {
        let published = StubDir::open(&candidate.path).and_then(|dir| {
            dir.sweep_once();
            dir.replace(&name, contents).map_err(cannot_write)
        });
        match published {
            Ok(()) => {
                let path = candidate.path.join(&name);
                let mut files = owned_files();
                // A copy left in a directory that has become unusable would
                // be found first by readers: it goes.
                files.retain(|file| {
                    let stale = file.creator == pid
                        && file.path != path
                        && file.path.file_name() == path.file_name();
                    if stale {
                        let _ = std::fs::remove_file(&file.path);
                    }
                    !stale
                });
                if !files.iter().any(|file| file.path == path) {
                    files.push(OwnedFile {
                        path: path.clone(),
                        creator: pid,
                        retired: false,
                    });
                }
                return Ok(path);
            }
            Err(reason) => skipped.push(Skipped {
                location: format!("{} ({})", candidate.path.display(), candidate.origin),
                reason,
            }),
        }
    }
    Err(skipped)
}

/// Marks a file another process still maps, to be removed once it is free.
fn retire(backing: &Backing) {
    if let Backing::Stub { dir, name } = backing {
        let path = dir.join(name);
        for file in owned_files().iter_mut().filter(|file| file.path == path) {
            file.retired = true;
        }
    }
}

/// Removes the retired files of this process that nobody maps any more.
fn remove_free_retired_files() {
    let pid = sys::current_pid();
    owned_files().retain(|file| {
        if !file.retired || file.creator != pid {
            return true;
        }
        let in_use =
            File::open(&file.path).is_ok_and(|opened| sys::claimed_by_another_process(&opened));
        if in_use {
            return true;
        }
        let _ = std::fs::remove_file(&file.path);
        false
    });
}

/// Tries each stub directory in turn, then a memfd.
fn place(
    provider: &str,
    image: &elf::Image,
    candidates: &[Candidate],
) -> Result<(LoadedImage, Vec<Skipped>), LoadError> {
    remove_free_retired_files();
    let mut skipped = Vec::new();
    for candidate in candidates {
        let location = candidate.path.display().to_string();
        let placed = StubDir::open(&candidate.path).and_then(|dir| {
            dir.sweep_once();
            place_in_dir(&dir, provider, image)
        });
        match placed {
            Ok(loaded) => return Ok((loaded, skipped)),
            Err(reason) => skipped.push(Skipped {
                location: format!("{location} ({})", candidate.origin),
                reason,
            }),
        }
    }
    match place_in_memfd(provider, image) {
        Ok(loaded) => Ok((loaded, skipped)),
        Err(reason) => {
            skipped.push(Skipped {
                location: "memfd".to_owned(),
                reason,
            });
            Err(LoadError::NowhereToLoad {
                provider: provider.to_owned(),
                tried: skipped,
            })
        }
    }
}

fn place_in_dir(dir: &StubDir, provider: &str, image: &elf::Image) -> Result<LoadedImage, String> {
    let pid = sys::current_pid();
    let name = StubFileName {
        provider: provider.to_owned(),
        process: ProcessKey::current(),
        generation: GENERATION.fetch_add(1, Ordering::Relaxed),
    }
    .to_string();
    let path = dir.path().join(&name);
    let file = match dir.create(&name) {
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            // Our key and generation, but not our file: left by an earlier
            // process that had the same pid in the same namespace. It is stale.
            dir.remove(&name)
                .map_err(|err| format!("cannot remove stale {name} ({err})"))?;
            dir.create(&name)
        }
        other => other,
    }
    .map_err(cannot_write)?;
    owned_files().push(OwnedFile {
        path: path.clone(),
        creator: pid,
        retired: false,
    });
    let backing = Backing::Stub {
        dir: dir.path().to_owned(),
        name,
    };
    let loaded = file
        .write_all_at(&image.bytes, 0)
        .map_err(cannot_write)
        .and_then(|()| {
            Library::open(&load_path(&backing, &file))
                .map_err(|err| format!("cannot load a file from it ({err})"))
        });
    match loaded {
        Ok(library) => Ok(loaded_image(library, file, backing, image)),
        Err(reason) => {
            discard(&backing);
            Err(reason)
        }
    }
}

/// Why a file could not be written in a stub directory. The state file and
/// the stubs say it in the same words, so that one warning covers both.
fn cannot_write(err: io::Error) -> String {
    format!("cannot write a file in it ({err})")
}

fn place_in_memfd(provider: &str, image: &elf::Image) -> Result<LoadedImage, String> {
    let file = sys::memfd(&format!("static_tracing:{provider}"))
        .map_err(|err| format!("cannot create one ({err})"))?;
    file.write_all_at(&image.bytes, 0)
        .map_err(|err| format!("cannot write to it ({err})"))?;
    let library = Library::open(&load_path(&Backing::Memfd, &file))
        .map_err(|err| format!("cannot load it ({err})"))?;
    Ok(loaded_image(library, file, Backing::Memfd, image))
}

fn loaded_image(library: Library, file: File, backing: Backing, image: &elf::Image) -> LoadedImage {
    let tracked = sys::track_mapped_file(&file);
    LoadedImage {
        base: library.base(),
        library,
        file,
        backing,
        len: image.bytes.len() as u64,
        layout: image.layout,
        creator: sys::current_pid(),
        forks_at_load: sys::forks_so_far(),
        tracked,
    }
}
