//! An image a forked child still maps is never rewritten or removed under
//! it; one whose children exec'd or exited is treated as this process's own.
// Not under Miri: it cannot dlopen, fork, or make the libc calls loading needs.
#![cfg(all(target_os = "linux", not(miri)))]

use stapsdt::elf::ImageSpec;
use stapsdt::image::{host_spec, LoadedImage, Reloaded};
use stapsdt::stub_dir::Candidate;
use stapsdt::ProbeSpec;
use std::path::PathBuf;
use std::sync::Mutex;

mod child;
use child::Child;

/// Forking from a multi-threaded test binary is only sound when the child
/// does nothing but async-signal-safe calls; the tests also run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn dir(name: &str) -> (Candidate, PathBuf) {
    let path = std::env::temp_dir().join(format!("stapsdt-sharing-{}-{name}", std::process::id()));
    (
        Candidate {
            path: path.clone(),
            origin: "test",
        },
        path,
    )
}

fn spec<'a>(provider: &'a str, probes: &'a [ProbeSpec]) -> ImageSpec<'a> {
    host_spec(provider, probes).unwrap()
}

fn probes() -> Vec<ProbeSpec> {
    ["a", "b"]
        .iter()
        .map(|name| ProbeSpec::new(name, &[]).unwrap())
        .collect()
}

#[test]
fn a_child_that_maps_the_file_forces_a_fresh_file_and_keeps_the_old_one() {
    let _serial = SERIAL.lock().unwrap();
    let (candidate, path) = dir("mapped");
    let probes = probes();
    let (image, _) = LoadedImage::load(
        &spec("shared", &probes[..1]),
        std::slice::from_ref(&candidate),
    )
    .unwrap();
    let first = image.path();
    let child = Child::fork_and_wait();

    // SAFETY: no site of the old image is used afterwards.
    let reloaded =
        unsafe { image.reload(&spec("shared", &probes), std::slice::from_ref(&candidate)) };
    let Ok(Reloaded::NewFile { image, .. }) = reloaded else {
        panic!("rewrote a file a child maps")
    };
    assert_ne!(image.path(), first);
    assert!(
        first.exists(),
        "the child's file stays while the child maps it"
    );

    drop(child);
    // The next load removes the old file, now that nobody maps it.
    let (other, _) =
        LoadedImage::load(&spec("other", &probes), std::slice::from_ref(&candidate)).unwrap();
    assert!(!first.exists(), "a retired file is removed once free");
    // SAFETY: no site is used afterwards.
    unsafe {
        image.unload();
        other.unload();
    }
    std::fs::remove_dir(path).unwrap();
}

#[test]
fn unloading_while_a_child_maps_the_file_keeps_it_for_the_child() {
    let _serial = SERIAL.lock().unwrap();
    let (candidate, path) = dir("unload");
    let probes = probes();
    let (image, _) =
        LoadedImage::load(&spec("kept", &probes), std::slice::from_ref(&candidate)).unwrap();
    let file = image.path();
    let child = Child::fork_and_wait();
    // SAFETY: no site is used afterwards.
    unsafe { image.unload() };
    assert!(file.exists(), "never remove a file another process maps");
    drop(child);
    let (other, _) =
        LoadedImage::load(&spec("other", &probes), std::slice::from_ref(&candidate)).unwrap();
    assert!(!file.exists());
    // SAFETY: no site is used afterwards.
    unsafe { other.unload() };
    std::fs::remove_dir(path).unwrap();
}

#[test]
fn children_that_exec_do_not_count() {
    let _serial = SERIAL.lock().unwrap();
    let (candidate, path) = dir("exec");
    let probes = probes();
    let (image, _) =
        LoadedImage::load(&spec("own", &probes[..1]), std::slice::from_ref(&candidate)).unwrap();
    let first = image.path();
    let _child = Child::fork_and_exec_sleep();
    // SAFETY: no site of the old image is used afterwards.
    let reloaded = unsafe { image.reload(&spec("own", &probes), std::slice::from_ref(&candidate)) };
    let Ok(Reloaded::InPlace(image)) = reloaded else {
        panic!("an exec'd child made the file look shared")
    };
    assert_eq!(image.path(), first);
    // SAFETY: no site is used afterwards.
    unsafe { image.unload() };
    assert!(!first.exists());
    std::fs::remove_dir(path).unwrap();
}
