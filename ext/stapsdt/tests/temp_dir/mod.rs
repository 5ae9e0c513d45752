//! A private directory (mode 0700) for a test, named after the test and
//! this process, made fresh and removed with the value.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        TempDir::under(&std::env::temp_dir(), name)
    }

    /// One in `/dev/shm`, in memory.
    #[allow(dead_code)]
    pub fn in_memory(name: &str) -> TempDir {
        TempDir::under(std::path::Path::new("/dev/shm"), name)
    }

    /// One in `/var/tmp`, on a disk (where `/tmp` may be in memory).
    #[allow(dead_code)]
    pub fn on_disk(name: &str) -> TempDir {
        TempDir::under(std::path::Path::new("/var/tmp"), name)
    }

    fn under(parent: &std::path::Path, name: &str) -> TempDir {
        let path = parent.join(format!("stapsdt-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::DirBuilder::new().mode(0o700).create(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
