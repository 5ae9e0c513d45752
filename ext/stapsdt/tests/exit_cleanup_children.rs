//! At exit, a file a forked child still maps is left for the child. Kept in
//! its own test binary: the cleanup is process-wide.
// Not under Miri: it cannot dlopen, fork, or make the libc calls loading needs.
#![cfg(all(target_os = "linux", not(miri)))]

use stapsdt::image::{host_spec, remove_files_at_exit, LoadedImage};
use stapsdt::stub_dir::Candidate;
use stapsdt::ProbeSpec;

mod child;
use child::Child;

#[test]
fn remove_files_at_exit_leaves_the_files_a_child_maps() {
    let dir = std::env::temp_dir().join(format!("stapsdt-exit-children-{}", std::process::id()));
    let candidate = Candidate {
        path: dir.clone(),
        origin: "test",
    };
    let probes = [ProbeSpec::new("p", &[]).unwrap()];
    let spec = host_spec("shared", &probes).unwrap();
    let (image, _) = LoadedImage::load(&spec, std::slice::from_ref(&candidate)).unwrap();
    let path = image.path();

    let child = Child::fork_and_wait();
    assert_eq!(remove_files_at_exit(), 0);
    assert!(path.exists(), "removed from under the child");

    drop(child);
    assert_eq!(remove_files_at_exit(), 1);
    assert!(!path.exists());
    std::fs::remove_dir(&dir).unwrap();
    // SAFETY: no thread is inside the stubs.
    unsafe { image.unload() };
}
