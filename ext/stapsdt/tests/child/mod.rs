//! Forked children for the tests that need another process to map an
//! image: one that keeps its inherited mappings, one that execs.
#![allow(dead_code)]

/// A forked child, killed and reaped when dropped. Forking from a
/// multi-threaded test binary is only sound because the child makes nothing
/// but async-signal-safe calls.
pub struct Child(libc::pid_t);

impl Child {
    /// A child that keeps its inherited mappings until killed.
    pub fn fork_and_wait() -> Child {
        // SAFETY: the child only calls pause and _exit.
        match unsafe { libc::fork() } {
            // SAFETY: async-signal-safe calls only, in the forked child.
            0 => unsafe {
                libc::pause();
                libc::_exit(0)
            },
            pid => {
                assert!(pid > 0, "fork failed");
                Child(pid)
            }
        }
    }

    /// A child that replaces itself with `sleep`, as `system` and backticks do.
    pub fn fork_and_exec_sleep() -> Child {
        let program = c"/bin/sleep";
        let argument = c"30";
        let argv = [program.as_ptr(), argument.as_ptr(), std::ptr::null()];
        // SAFETY: the child only calls execv and _exit.
        match unsafe { libc::fork() } {
            // SAFETY: async-signal-safe calls only, in the forked child; argv
            // is NUL-terminated and its strings live until exec.
            0 => unsafe {
                libc::execv(program.as_ptr(), argv.as_ptr());
                libc::_exit(127)
            },
            pid => {
                assert!(pid > 0, "fork failed");
                // The lock of the child goes away with exec; wait until the
                // child's command line says it has exec'd.
                let cmdline = format!("/proc/{pid}/cmdline");
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while !std::fs::read(&cmdline).is_ok_and(|bytes| bytes.starts_with(b"/bin/sleep")) {
                    assert!(std::time::Instant::now() < deadline, "child did not exec");
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Child(pid)
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // SAFETY: plain syscalls on our own child.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
}
