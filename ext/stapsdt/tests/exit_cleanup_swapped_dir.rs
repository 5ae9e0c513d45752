//! Exit cleanup removes this process's files through the directory it
//! created them in, even after that directory's path was made to lead
//! elsewhere (a parent writable by another user). Kept in its own test
//! binary: the cleanup is process-wide.
// Not under Miri: it cannot dlopen or make the libc calls loading needs.
#![cfg(all(target_os = "linux", not(miri)))]

use stapsdt::image::{host_spec, publish_state, remove_files_at_exit, LoadedImage};
use stapsdt::stub_dir::Candidate;
use stapsdt::ProbeSpec;
use std::fs;

#[test]
fn exit_cleanup_removes_its_files_in_the_real_directory_not_through_a_link_at_its_path() {
    let parent = std::env::temp_dir().join(format!("stapsdt-swapped-{}", std::process::id()));
    let _ = fs::remove_dir_all(&parent);
    fs::create_dir(&parent).unwrap();
    let stubs = parent.join("stubs");
    let candidate = Candidate {
        path: stubs.clone(),
        origin: "test",
    };
    let probes = [ProbeSpec::new("p", &[]).unwrap()];
    let spec = host_spec("swapped", &probes).unwrap();
    let (image, _) = LoadedImage::load(&spec, std::slice::from_ref(&candidate)).unwrap();
    let state = publish_state(b"{}", std::slice::from_ref(&candidate)).unwrap();
    let names = [image.path(), state].map(|path| path.file_name().unwrap().to_owned());

    let moved = parent.join("moved");
    let decoy = parent.join("decoy");
    fs::rename(&stubs, &moved).unwrap();
    fs::create_dir(&decoy).unwrap();
    for name in &names {
        fs::write(decoy.join(name), b"decoy").unwrap();
    }
    std::os::unix::fs::symlink(&decoy, &stubs).unwrap();

    assert_eq!(remove_files_at_exit(), 2);
    for name in &names {
        assert!(!moved.join(name).exists(), "{name:?} left behind");
        assert_eq!(fs::read(decoy.join(name)).unwrap(), b"decoy", "{name:?}");
    }
    fs::remove_dir_all(&parent).unwrap();
    // SAFETY: no thread is inside the stubs.
    unsafe { image.unload() };
}
