//! What differs between the architectures a stub can be generated for.

use std::fmt;

/// A CPU architecture the ELF writer knows how to emit probe stubs for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The architecture this library was compiled for, if stubs can be loaded here.
    pub const fn host() -> Option<Arch> {
        if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
            Some(Arch::X86_64)
        } else if cfg!(all(target_os = "linux", target_arch = "aarch64")) {
            Some(Arch::Aarch64)
        } else {
            None
        }
    }

    /// `e_machine` of the generated ELF file.
    pub const fn elf_machine(self) -> u16 {
        match self {
            Arch::X86_64 => 62,   // EM_X86_64
            Arch::Aarch64 => 183, // EM_AARCH64
        }
    }

    /// The instruction a tracer replaces with a breakpoint: the probe site.
    ///
    /// On x86-64 the 5-byte NOP, `nopl 0x0(%rax,%rax,1)`: kernels that
    /// optimize uprobes (x86-64, Linux 6.18 and later) turn a uprobe on it
    /// into a call to a trampoline that enters the kernel by syscall, which
    /// costs less than the int3 trap every other probe site takes. Older
    /// kernels put an int3 on its first byte, as on a 1-byte `nop`.
    pub const fn nop(self) -> &'static [u8] {
        match self {
            Arch::X86_64 => &[0x0f, 0x1f, 0x44, 0x00, 0x00],
            Arch::Aarch64 => &[0x1f, 0x20, 0x03, 0xd5], // d503201f
        }
    }

    /// A whole stub function: the probe site followed by a return.
    pub const fn stub(self) -> &'static [u8] {
        match self {
            Arch::X86_64 => &[0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3],
            Arch::Aarch64 => &[0x1f, 0x20, 0x03, 0xd5, 0xc0, 0x03, 0x5f, 0xd6], // d65f03c0
        }
    }

    /// Distance between two consecutive stubs in the text pages: a power of
    /// two at least as long as a stub, so that stubs are aligned and a probe
    /// site never straddles a page (the kernel optimizes only a NOP it can
    /// rewrite within one page).
    pub const fn stub_stride(self) -> usize {
        self.stub().len().next_power_of_two()
    }

    /// The six integer argument registers of the C calling convention, named
    /// as SystemTap argument specs name them.
    pub const fn argument_registers(self) -> [&'static str; 6] {
        match self {
            Arch::X86_64 => ["%rdi", "%rsi", "%rdx", "%rcx", "%r8", "%r9"],
            Arch::Aarch64 => ["x0", "x1", "x2", "x3", "x4", "x5"],
        }
    }

    /// The largest page size a kernel for this architecture may use; the
    /// segment alignment to use when the running kernel's is not known.
    pub const fn max_page_size(self) -> u64 {
        match self {
            Arch::X86_64 => 0x1000,
            Arch::Aarch64 => 0x10000,
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        })
    }
}
