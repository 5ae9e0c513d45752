//! What a probe is: a name and the types of up to six arguments.

use crate::arch::Arch;
use crate::names::{self, InvalidName, NameKind};
use std::fmt;

/// Older bpftrace reads only `arg0`..`arg5`, and six is what fits in the
/// argument registers of both supported calling conventions.
pub const MAX_ARGS: usize = 6;

/// How one argument travels: always as a full 64-bit register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgType {
    /// A signed 64-bit integer.
    Int64,
    /// A pointer to a NUL-terminated string.
    String,
    /// The IEEE-754 bits of a double.
    Float64,
}

impl ArgType {
    /// SystemTap's size prefix: negative for signed values.
    const fn size_prefix(self) -> &'static str {
        match self {
            ArgType::Int64 => "-8",
            ArgType::String | ArgType::Float64 => "8",
        }
    }
}

/// A probe declaration; its name has been checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSpec {
    name: String,
    args: Vec<ArgType>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeSpecError {
    Name(InvalidName),
    TooManyArgs { name: String, given: usize },
}

impl fmt::Display for ProbeSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeSpecError::Name(err) => err.fmt(f),
            ProbeSpecError::TooManyArgs { name, given } => write!(
                f,
                "probe {name:?} declares {given} argument types, at most {MAX_ARGS} are supported"
            ),
        }
    }
}

impl std::error::Error for ProbeSpecError {}

impl ProbeSpec {
    pub fn new(name: &str, args: &[ArgType]) -> Result<ProbeSpec, ProbeSpecError> {
        names::validate(NameKind::Probe, name).map_err(ProbeSpecError::Name)?;
        if args.len() > MAX_ARGS {
            return Err(ProbeSpecError::TooManyArgs {
                name: name.to_owned(),
                given: args.len(),
            });
        }
        Ok(ProbeSpec {
            name: name.to_owned(),
            args: args.to_vec(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn args(&self) -> &[ArgType] {
        &self.args
    }

    /// The argument description stored in the probe's note, e.g.
    /// `-8@%rdi 8@%rsi` on x86-64 or `-8@x0 8@x1` on aarch64.
    pub fn arg_spec(&self, arch: Arch) -> String {
        // Joined by hand: an image of a thousand probes writes a thousand.
        let mut spec = String::with_capacity(8 * self.args.len());
        for (index, (arg, register)) in self.args.iter().zip(arch.argument_registers()).enumerate()
        {
            if index > 0 {
                spec.push(' ');
            }
            spec.push_str(arg.size_prefix());
            spec.push('@');
            spec.push_str(register);
        }
        spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arg_specs_name_full_registers_in_order() {
        let probe =
            ProbeSpec::new("p", &[ArgType::Int64, ArgType::String, ArgType::Float64]).unwrap();
        assert_eq!(probe.arg_spec(Arch::X86_64), "-8@%rdi 8@%rsi 8@%rdx");
        assert_eq!(probe.arg_spec(Arch::Aarch64), "-8@x0 8@x1 8@x2");
        let six = ProbeSpec::new("p", &[ArgType::Int64; 6]).unwrap();
        assert_eq!(
            six.arg_spec(Arch::X86_64),
            "-8@%rdi -8@%rsi -8@%rdx -8@%rcx -8@%r8 -8@%r9"
        );
        assert_eq!(ProbeSpec::new("p", &[]).unwrap().arg_spec(Arch::X86_64), "");
    }

    #[test]
    fn rejects_bad_names_and_too_many_args() {
        assert!(matches!(
            ProbeSpec::new("a-b", &[]),
            Err(ProbeSpecError::Name(_))
        ));
        let err = ProbeSpec::new("p", &[ArgType::Int64; 7]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "probe \"p\" declares 7 argument types, at most 6 are supported"
        );
    }
}
