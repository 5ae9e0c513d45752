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
//! as long as it may map it (see [`crate::sys::fork_claims`]), so the creator can tell:
//! while a claim is held, a grown image goes to a fresh file instead, and an
//! unloaded one keeps its file until nobody maps it.

use crate::arch::Arch;
use crate::descriptors::{DescriptorShortage, PlaceError};
use crate::elf::{self, BuildError, ImageSpec, Layout};
use crate::owned_files;
use crate::probe::ProbeSpec;
use crate::site::ProbeSite;
use crate::stub_dir::{Candidate, ProcessKey, StubDir, StubFileName};
use crate::sys::{self, fork_claims, Library};
use crate::tried::{cannot_write, write_tried};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

// Where the binding has always found them.
pub use crate::owned_files::remove_files_at_exit;
pub use crate::state_file::{publish_state, PublishError};
pub use crate::tried::Skipped;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError {
    Build(BuildError),
    Unsupported,
    NowhereToLoad {
        provider: String,
        tried: Vec<Skipped>,
    },
    /// Stopped at `location`: no other place would have done better.
    OutOfDescriptors {
        provider: String,
        location: String,
        shortage: DescriptorShortage,
    },
    /// A reload with fewer probes than the loaded image: images only grow.
    Shrinks {
        provider: String,
        loaded: usize,
        given: usize,
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
                write_tried(f, tried)
            }
            LoadError::OutOfDescriptors {
                provider,
                location,
                shortage,
            } => write!(
                f,
                "could not load the probes of provider {provider:?}: {shortage} (at {location})"
            ),
            LoadError::Shrinks {
                provider,
                loaded,
                given,
            } => write!(
                f,
                "provider {provider:?} has {loaded} probes loaded and cannot be reloaded with \
                 {given}: a loaded image only grows"
            ),
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
    Stub { dir: Arc<StubDir>, name: String },
    Memfd,
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
    file: Arc<File>,
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

    /// Where probe `index` is in this process; None past the last probe.
    pub fn probe_site(&self, index: usize) -> Option<ProbeSite> {
        (index < self.layout.probe_count()).then(|| ProbeSite {
            stub: self.base + self.layout.stub_address(index) as usize,
            semaphore: self.base + self.layout.semaphore_address(index) as usize,
        })
    }

    /// The file a tracer can name (`usdt:PATH:provider:probe`).
    pub fn path(&self) -> PathBuf {
        match &self.backing {
            Backing::Stub { dir, name } => dir.path().join(name),
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
        if !fork_claims::fork_handlers_registered() {
            return true;
        }
        let (forks, unclaimed) = fork_claims::forks_so_far();
        let (forks_then, unclaimed_then) = self.forks_at_load;
        let blind = if self.tracked {
            unclaimed != unclaimed_then
        } else {
            forks != forks_then
        };
        blind || fork_claims::claimed_by_another_process(&self.file)
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
        if image.layout.probe_count() < self.layout.probe_count() {
            return Err(ReloadError {
                error: LoadError::Shrinks {
                    provider: spec.provider.to_owned(),
                    loaded: self.layout.probe_count(),
                    given: image.layout.probe_count(),
                },
                previous: Some(Box::new(self)),
            });
        }
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
        let shown_as = shown_name(&load_path(&backing, &file));
        let reopened = file
            .write_all_at(&image.bytes, 0)
            .map_err(|err| format!("cannot rewrite it ({err})"))
            .and_then(|()| {
                open_library(&backing, &file).map_err(|err| format!("cannot load it again ({err})"))
            });
        match reopened {
            Ok((library, base)) => Ok(Reloaded::InPlace(LoadedImage {
                base,
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
                fork_claims::untrack_mapped_file(&file);
                discard(&backing, &file);
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
                                location: shown_as.display().to_string(),
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
        fork_claims::untrack_mapped_file(&self.file);
        if removable {
            discard(&self.backing, &self.file);
        } else if created_here {
            owned_files::retire(&self.file);
        }
    }
}

fn build_for_host(spec: &ImageSpec<'_>) -> Result<elf::Image, LoadError> {
    if Arch::host() != Some(spec.arch) {
        return Err(LoadError::Unsupported);
    }
    Ok(elf::build(spec)?)
}

/// Loads `file` by [`load_path`]. The loader's list of objects, which
/// debuggers read, names it by where its descriptor leads, as the process's
/// mappings do: the stub's path, or the memfd's name.
fn open_library(backing: &Backing, file: &File) -> Result<(Library, usize), String> {
    let path = load_path(backing, file);
    Library::open_located(&path, &shown_name(&path))
}

/// Where a [`load_path`] leads: the file's own name.
fn shown_name(load_path: &Path) -> PathBuf {
    std::fs::read_link(load_path).unwrap_or_else(|_| load_path.to_owned())
}

/// The name to `dlopen` an image file by: its descriptor, so that what gets
/// loaded is exactly the file written and checked, whatever happens to the
/// path in between (a directory on it swapped for a link, by a user who can
/// write to a parent). Mappings still show the file's real path. The path
/// itself only where /proc is not mounted.
fn load_path(backing: &Backing, file: &File) -> PathBuf {
    let by_descriptor = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    match backing {
        Backing::Stub { dir, name } if !by_descriptor.exists() => dir.path().join(name),
        _ => by_descriptor,
    }
}

/// Removes a stub file this process created and forgets it.
fn discard(backing: &Backing, file: &Arc<File>) {
    if let Backing::Stub { dir, name } = backing {
        // If the name is already gone there is nothing left to do.
        let _ = dir.remove(name);
        owned_files::forget(file);
    }
}

/// Tries each stub directory in turn, then a memfd. Out of descriptors,
/// it stops where that happened: no other place would do better.
fn place(
    provider: &str,
    image: &elf::Image,
    candidates: &[Candidate],
) -> Result<(LoadedImage, Vec<Skipped>), LoadError> {
    owned_files::remove_free_retired_files();
    let mut skipped = Vec::new();
    let out_of_descriptors = |location: String, shortage| LoadError::OutOfDescriptors {
        provider: provider.to_owned(),
        location,
        shortage,
    };
    for candidate in candidates {
        let placed = StubDir::open(&candidate.path).and_then(|dir| {
            dir.sweep_once();
            place_in_dir(&dir, provider, image)
        });
        match placed {
            Ok(loaded) => return Ok((loaded, skipped)),
            Err(PlaceError::Unusable(reason)) => skipped.push(Skipped {
                location: candidate.location(),
                reason,
            }),
            Err(PlaceError::OutOfDescriptors(shortage)) => {
                return Err(out_of_descriptors(candidate.location(), shortage))
            }
        }
    }
    match place_in_memfd(provider, image) {
        Ok(loaded) => Ok((loaded, skipped)),
        Err(PlaceError::OutOfDescriptors(shortage)) => {
            Err(out_of_descriptors("memfd".to_owned(), shortage))
        }
        Err(PlaceError::Unusable(reason)) => {
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

/// How many names `place_in_dir` tries when the ones it picks are taken.
const NAME_ATTEMPTS: usize = 16;

/// Tells apart the stub files of one process.
static GENERATION: AtomicU64 = AtomicU64::new(0);

fn place_in_dir(
    dir: &Arc<StubDir>,
    provider: &str,
    image: &elf::Image,
) -> Result<LoadedImage, PlaceError> {
    let process = ProcessKey::current();
    let mut attempt = 0;
    let (name, file) = loop {
        let name = StubFileName {
            provider: provider.to_owned(),
            process,
            generation: GENERATION.fetch_add(1, Ordering::Relaxed),
        }
        .to_string();
        attempt += 1;
        match dir.create_locked(&name, &image.bytes) {
            Ok(file) => break (name, file),
            // Our key and generation, but not our file: left by an earlier
            // process that had the same pid in this namespace. It goes if
            // provably stale, and otherwise the next generation will do.
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists && attempt < NAME_ATTEMPTS => {
                if dir.remove_if_unheld(&name) {
                    match dir.create_locked(&name, &image.bytes) {
                        Ok(file) => break (name, file),
                        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
                        Err(err) => return Err(PlaceError::from_io(err, cannot_write)),
                    }
                }
            }
            Err(err) => return Err(PlaceError::from_io(err, cannot_write)),
        }
    };
    let file = Arc::new(file);
    owned_files::own(dir, &name, &file);
    let backing = Backing::Stub {
        dir: dir.clone(),
        name,
    };
    match open_library(&backing, &file) {
        Ok(located) => Ok(loaded_image(located, file, backing, image)),
        Err(err) => {
            discard(&backing, &file);
            Err(PlaceError::Unusable(format!(
                "cannot load a file from it ({err})"
            )))
        }
    }
}

fn place_in_memfd(provider: &str, image: &elf::Image) -> Result<LoadedImage, PlaceError> {
    let file = sys::memfd(&format!("static_tracing:{provider}"))
        .map_err(|err| PlaceError::from_io(err, |err| format!("cannot create one ({err})")))?;
    file.write_all_at(&image.bytes, 0)
        .map_err(|err| PlaceError::Unusable(format!("cannot write to it ({err})")))?;
    let file = Arc::new(file);
    let located = open_library(&Backing::Memfd, &file)
        .map_err(|err| PlaceError::Unusable(format!("cannot load it ({err})")))?;
    Ok(loaded_image(located, file, Backing::Memfd, image))
}

fn loaded_image(
    (library, base): (Library, usize),
    file: Arc<File>,
    backing: Backing,
    image: &elf::Image,
) -> LoadedImage {
    let tracked = fork_claims::track_mapped_file(&file);
    LoadedImage {
        base,
        library,
        file,
        backing,
        len: image.bytes.len() as u64,
        layout: image.layout,
        creator: sys::current_pid(),
        forks_at_load: fork_claims::forks_so_far(),
        tracked,
    }
}
