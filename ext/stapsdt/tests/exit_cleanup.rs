//! Files are removed at exit by the process that created them. Kept in its
//! own test binary: the cleanup is process-wide.
// Not under Miri: it cannot dlopen, fork, or make the libc calls loading needs.
#![cfg(all(target_os = "linux", not(miri)))]

use stapsdt::image::{host_spec, remove_files_at_exit, LoadedImage};
use stapsdt::stub_dir::Candidate;
use stapsdt::ProbeSpec;

#[test]
fn remove_files_at_exit_removes_what_this_process_created() {
    let dir = std::env::temp_dir().join(format!("stapsdt-exit-{}", std::process::id()));
    let candidate = Candidate {
        path: dir.clone(),
        origin: "test",
    };
    let probes = [ProbeSpec::new("p", &[]).unwrap()];
    let spec = |provider| host_spec(provider, &probes).unwrap();
    let (first, _) = LoadedImage::load(&spec("first"), std::slice::from_ref(&candidate)).unwrap();
    let (second, _) = LoadedImage::load(&spec("second"), std::slice::from_ref(&candidate)).unwrap();
    let paths = [first.path(), second.path()];
    assert!(paths.iter().all(|path| path.exists()));

    assert_eq!(remove_files_at_exit(), 2);
    assert!(paths.iter().all(|path| !path.exists()));
    assert_eq!(remove_files_at_exit(), 0, "each file is removed once");
    std::fs::remove_dir(&dir).unwrap();
    // The mappings outlive the names, as they do at exit.
    // SAFETY: no thread is inside the stubs; the sites are not used again.
    unsafe {
        first.probe_site(0).unwrap().fire(&[0; 6]);
        first.unload();
        second.unload();
    }
}
