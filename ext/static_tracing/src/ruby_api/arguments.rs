//! Argument types, and Ruby values turned into what a stub's registers hold.

use super::errors::{argument_error, range_error, type_error};
use super::frames::CUT_STACK_ROOT;
use magnus::{
    rb_sys::AsRawValue, value::ReprValue, Error, Float, Integer, RArray, RClass, RString, Ruby,
    Symbol, TryConvert, Value,
};
use stapsdt::ring::{Arg, MAX_STRING};
use stapsdt::{ArgType, MAX_ARGS};

pub fn type_name(arg: ArgType) -> &'static str {
    match arg {
        ArgType::Int64 => "Integer",
        ArgType::String => "String",
        ArgType::Float64 => "Float",
    }
}

pub fn type_class(ruby: &Ruby, arg: ArgType) -> RClass {
    match arg {
        ArgType::Int64 => ruby.class_integer(),
        ArgType::String => ruby.class_string(),
        ArgType::Float64 => ruby.class_float(),
    }
}

/// `(Integer, String)`, for messages.
pub fn signature(types: &[ArgType]) -> String {
    let names: Vec<&str> = types.iter().map(|&arg| type_name(arg)).collect();
    format!("({})", names.join(", "))
}

/// The classes given to `add_tracepoint` as argument types, when there are
/// at most `MAX_ARGS` and each is Integer, String or Float itself (compared
/// by identity, so no Ruby code runs); else None, and `parse_types` says why
/// (or accepts what a class's own `==` makes equal to one of them).
pub fn exact_types(ruby: &Ruby, classes: RArray) -> Option<([ArgType; MAX_ARGS], usize)> {
    // SAFETY: no Ruby code runs while the slice is borrowed.
    let given = unsafe { classes.as_slice() };
    if given.len() > MAX_ARGS {
        return None;
    }
    let [integer, string, float] = [
        ruby.class_integer(),
        ruby.class_string(),
        ruby.class_float(),
    ]
    .map(|class| class.as_raw());
    let mut types = [ArgType::Int64; MAX_ARGS];
    for (slot, class) in types.iter_mut().zip(given) {
        *slot = match class.as_raw() {
            raw if raw == integer => ArgType::Int64,
            raw if raw == string => ArgType::String,
            raw if raw == float => ArgType::Float64,
            _ => return None,
        };
    }
    Some((types, given.len()))
}

/// The classes given to `add_tracepoint`, as argument types.
pub fn parse_types(ruby: &Ruby, probe: &str, classes: RArray) -> Result<Vec<ArgType>, Error> {
    if classes.len() > MAX_ARGS {
        return Err(argument_error(
            ruby,
            format!(
                "{probe} declares {} argument types; at most {MAX_ARGS} are supported (older bpftrace reads only arg0..arg5)",
                classes.len()
            ),
        ));
    }
    let mut types = Vec::with_capacity(classes.len());
    for (index, class) in classes.into_iter().enumerate() {
        let arg = [ArgType::Int64, ArgType::String, ArgType::Float64]
            .into_iter()
            .find(|&arg| class.equal(type_class(ruby, arg)).unwrap_or(false));
        match arg {
            Some(arg) => types.push(arg),
            None => {
                let given = if class.is_kind_of(ruby.class_module()) {
                    class.inspect()
                } else {
                    describe(ruby, class)
                };
                return Err(argument_error(
                    ruby,
                    format!(
                        "{probe} argument {} type must be Integer, String or Float, got {given}",
                        index + 1
                    ),
                ));
            }
        }
    }
    Ok(types)
}

/// A description of a value for messages: its class, and the value itself
/// when it is a short core value (nil, a boolean, a number, a symbol, a
/// string of at most 40 bytes) whose `#inspect` is at most 40 bytes long.
/// That `#inspect` is dispatched as usual, so it is the application's own
/// when it redefined it on a core class or on a String subclass.
pub fn describe(ruby: &Ruby, value: Value) -> String {
    // SAFETY: the class name is copied before any other Ruby call.
    let class = unsafe { value.classname() }.into_owned();
    match short_inspect(ruby, value) {
        Some(shown) if shown != class => format!("{class} ({shown})"),
        _ => class,
    }
}

fn short_inspect(ruby: &Ruby, value: Value) -> Option<String> {
    let core = value.is_nil()
        || value.is_kind_of(ruby.class_true_class())
        || value.is_kind_of(ruby.class_false_class())
        || Integer::from_value(value).is_some()
        || Float::from_value(value).is_some()
        || Symbol::from_value(value).is_some()
        || RString::from_value(value).is_some_and(|string| string.len() <= 40);
    let shown = core.then(|| value.inspect())?;
    (shown.len() <= 40).then_some(shown)
}

/// The register values of one fire. Strings that are not NUL-terminated in
/// Ruby's buffer are copied; the copies live as long as this.
pub struct Registers {
    pub values: [u64; 6],
    /// The byte length of each String argument (the recorder keeps them
    /// whole, where a tracer stops at the first NUL).
    lengths: [usize; 6],
    copies: Vec<Vec<u8>>,
}

impl Registers {
    pub fn new() -> Registers {
        Registers {
            values: [0; 6],
            lengths: [0; 6],
            copies: Vec::new(),
        }
    }

    /// The arguments as the recorder takes them, for a fire with `types`.
    ///
    /// # Safety
    /// The Ruby strings given to `set` must not have changed or been
    /// collected since (no Ruby code has run): the String arguments borrow
    /// their bytes.
    pub unsafe fn recorded(&self, types: &[ArgType]) -> RecordedArgs<'_> {
        let mut args = [Arg::Int(0); MAX_ARGS];
        for (index, &arg) in types.iter().enumerate() {
            let value = self.values[index];
            args[index] = match arg {
                ArgType::Int64 => Arg::Int(value as i64),
                ArgType::Float64 => Arg::Float(f64::from_bits(value)),
                // SAFETY: `value` points to `lengths[index]` bytes of a live
                // string or of one of `copies` (see `string_pointer`), kept
                // as they are by the caller's guarantee.
                ArgType::String => Arg::Str(unsafe {
                    std::slice::from_raw_parts(
                        std::ptr::with_exposed_provenance::<u8>(value as usize),
                        self.lengths[index],
                    )
                }),
            };
        }
        RecordedArgs {
            args,
            len: types.len(),
        }
    }

    /// Checks `value` against the declared `arg` at `index`; the register
    /// value is stored only when `fire` is true (it costs more for strings).
    pub fn set(
        &mut self,
        ruby: &Ruby,
        probe: &str,
        index: usize,
        arg: ArgType,
        value: Value,
        fire: bool,
    ) -> Result<(), Error> {
        let register = match arg {
            ArgType::Int64 => match Integer::from_value(value) {
                Some(integer) => integer.to_i64().map_err(|_| {
                    range_error(
                        ruby,
                        format!(
                            "{probe} argument {}: {} is outside the signed 64-bit range",
                            index + 1,
                            short_inspect(ruby, value).unwrap_or_else(|| "the Integer".to_owned())
                        ),
                    )
                })? as u64,
                None => return Err(mismatch(ruby, probe, index, arg, value)),
            },
            ArgType::Float64 => {
                let float = if let Some(float) = Float::from_value(value) {
                    float.to_f64()
                } else if Integer::from_value(value).is_some() {
                    f64::try_convert(value)?
                } else {
                    return Err(mismatch(ruby, probe, index, arg, value));
                };
                float.to_bits()
            }
            ArgType::String => {
                let Some(string) = RString::from_value(value) else {
                    return Err(mismatch(ruby, probe, index, arg, value));
                };
                if fire {
                    self.lengths[index] = string.len();
                    self.string_pointer(string)
                } else {
                    0
                }
            }
        };
        self.values[index] = register;
        Ok(())
    }

    /// A pointer to the string's bytes followed by a NUL, valid until the
    /// fire is over: Ruby's own buffer when it is terminated (the usual
    /// case), else a copy. Embedded NULs end the string for the tracer.
    fn string_pointer(&mut self, string: RString) -> u64 {
        // SAFETY: nothing between here and the stub call allocates Ruby
        // objects, so the GC cannot move or free the buffer meanwhile; the
        // string itself is kept alive by the caller's argument list. Ruby
        // keeps a terminator slot after every string's bytes, so reading
        // `len` bytes past the start is in bounds.
        let (ptr, terminated) = unsafe {
            let bytes = string.as_slice();
            (bytes.as_ptr(), *bytes.as_ptr().add(bytes.len()) == 0)
        };
        if terminated {
            return ptr.expose_provenance() as u64;
        }
        // SAFETY: as above.
        let mut copy = unsafe { string.as_slice() }.to_vec();
        copy.push(0);
        let address = copy.as_ptr().expose_provenance() as u64;
        self.copies.push(copy);
        address
    }
}

/// Up to six recorded arguments, on the stack.
pub struct RecordedArgs<'a> {
    args: [Arg<'a>; MAX_ARGS],
    len: usize,
}

impl<'a> RecordedArgs<'a> {
    /// A folded stack (root first) longer than the ring keeps is cut to
    /// its end, from the start of a frame, and gets the root that says so
    /// (`frames::CUT_STACK_ROOT`), written into `scratch`: its innermost
    /// frames are what a flame graph needs, where any other String keeps
    /// its first bytes.
    pub fn keep_stack_end(&mut self, index: usize, scratch: &'a mut Vec<u8>) {
        let Some(Arg::Str(stack)) = self.args.get_mut(index) else {
            return;
        };
        if stack.len() <= MAX_STRING as usize {
            return;
        }
        let keep = MAX_STRING as usize - CUT_STACK_ROOT.len() - 1;
        let tail = &stack[stack.len() - keep..];
        let from = tail
            .iter()
            .position(|&byte| byte == b';')
            .map_or(0, |at| at + 1);
        scratch.clear();
        scratch.extend_from_slice(CUT_STACK_ROOT);
        scratch.push(b';');
        scratch.extend_from_slice(&tail[from..]);
        let scratch: &'a Vec<u8> = scratch;
        *stack = scratch;
    }
}

impl<'a> std::ops::Deref for RecordedArgs<'a> {
    type Target = [Arg<'a>];

    fn deref(&self) -> &[Arg<'a>] {
        &self.args[..self.len]
    }
}

fn mismatch(ruby: &Ruby, probe: &str, index: usize, expected: ArgType, value: Value) -> Error {
    type_error(
        ruby,
        format!(
            "{probe} argument {} must be {} {}, got {}",
            index + 1,
            if expected == ArgType::Int64 {
                "an"
            } else {
                "a"
            },
            type_name(expected),
            describe(ruby, value)
        ),
    )
}
