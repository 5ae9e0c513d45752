//! Loading, growing and unloading images thousands of times holds no more
//! heap than once: measured with glibc's count of bytes allocated, which
//! sees a leak of a few bytes a load where the resident size cannot. Its own
//! test binary, with one test: no other test allocates meanwhile.
// Not under Miri (no dlopen); mallinfo2 is glibc's.
#![cfg(all(target_os = "linux", target_env = "gnu", not(miri)))]

use stapsdt::image::{host_spec, LoadedImage, Reloaded};
use stapsdt::stub_dir::Candidate;
use stapsdt::{ArgType, ProbeSpec};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// Bytes the allocator has handed out and not had back.
fn heap_in_use() -> usize {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let info = unsafe { libc::mallinfo2() };
    info.uordblks + info.hblkhd
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn probe(index: usize) -> ProbeSpec {
    ProbeSpec::new(&format!("probe_{index}"), &[ArgType::Int64]).unwrap()
}

/// A load, two in-place reloads and an unload.
fn cycle(candidates: &[Candidate], probes: &mut Vec<ProbeSpec>) {
    probes.truncate(1);
    let (mut image, _) =
        LoadedImage::load(&host_spec("heap", probes).unwrap(), candidates).unwrap();
    for index in 1..3 {
        probes.push(probe(index));
        // SAFETY: no stub of the image runs, and no site of it is kept.
        image = match unsafe { image.reload(&host_spec("heap", probes).unwrap(), candidates) } {
            Ok(Reloaded::InPlace(image)) => image,
            Ok(Reloaded::NewFile { .. }) => panic!("reloaded into a new file"),
            Err(err) => panic!("{}", err.error),
        };
    }
    // SAFETY: as above.
    unsafe { image.unload() };
}

#[test]
fn thousands_of_loads_reloads_and_unloads_hold_no_more_heap() {
    let dir = TempDir(std::env::temp_dir().join(format!("stapsdt-heap-{}", std::process::id())));
    fs::create_dir(&dir.0).unwrap();
    fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o700)).unwrap();
    let candidates = [Candidate {
        path: dir.0.clone(),
        origin: "test",
    }];
    let mut probes = vec![probe(0)];
    // Warm-up: the directory opened and swept, the loader's tables grown.
    for _ in 0..100 {
        cycle(&candidates, &mut probes);
    }
    let before = heap_in_use();
    const CYCLES: usize = 2_000;
    for _ in 0..CYCLES {
        cycle(&candidates, &mut probes);
    }
    let grown = heap_in_use().saturating_sub(before);
    // Three loads a cycle: 6,000. A leak of one small allocation per load
    // (the smallest glibc hands out is 32 bytes) would be 192,000 bytes.
    assert!(
        grown < 16 * 1024,
        "{grown} bytes more after {CYCLES} cycles ({} a load)",
        grown / (3 * CYCLES)
    );
}
