//! `StaticTracing::TraceReader`'s functions: read a file, report on
//! files, dump a live ring. Descriptors come from the command's Ruby code,
//! which opened and checked them and holds them open for the call.

use crate::errors::{cli_error, trace_error};
use crate::output::RubyWriter;
use crate::sources::Source;
use crate::trace::Trace;
use magnus::{prelude::*, Error, RArray, RModule, RString, Ruby, Value};
use stapsdt::ring::follow::{self, Counts, DumpError};
use stapsdt::ring::format::{offset, SLOT_SIZE};
use stapsdt::ring::trace_file::read_thread_names;
use stapsdt::trace_context::parse_trace_id;
use std::cell::{Cell, RefCell};
use std::fs::File;
use std::mem::ManuallyDrop;
use trace_report::report::select::{self, Bound, Selection};
use trace_report::report::{self, Format, Options, ReportError, ThreadNames};
use trace_report::Trace as Read;

/// `TraceReader.read(source, name)`: the file (see `Source::of`), read whole.
fn read(ruby: &Ruby, source: Value, name: String) -> Result<Trace, Error> {
    read_file(ruby, &Source::of(source)?, &name).map(Trace)
}

fn read_file(ruby: &Ruby, source: &Source, name: &str) -> Result<Read, Error> {
    Read::read(source, name).map_err(|err| trace_error(ruby, err))
}

/// Files read for a report: `TraceReader.load(files)` reads every file of
/// `files` (`[[fd, name], ...]`) before anything is written; `select`
/// narrows them to some probes and a window of time; `check` refuses a
/// format it cannot make of them, `report` writes it.
#[magnus::wrap(class = "StaticTracing::TraceReader::Traces", free_immediately, size)]
struct Traces {
    traces: RefCell<Vec<Read>>,
    /// Their threads' names, as the files hold them.
    names: ThreadNames,
    options: Cell<Options>,
}

impl Traces {
    fn load(ruby: &Ruby, files: RArray) -> Result<Traces, Error> {
        let mut traces = Vec::with_capacity(files.len());
        let mut names = ThreadNames::default();
        for file in files.into_iter() {
            let (source, name): (Value, String) = magnus::TryConvert::try_convert(file)?;
            let source = Source::of(source)?;
            let trace = read_file(ruby, &source, &name)?;
            let header = &trace.header;
            for (tid, thread) in read_thread_names(&source, header) {
                names.insert(header.pid, header.pid_namespace, tid, thread);
            }
            traces.push(trace);
        }
        Ok(Traces {
            traces: RefCell::new(traces),
            names,
            options: Cell::new(Options::default()),
        })
    }

    /// `select(patterns, since, until, trace_id)`: keeps the probes the
    /// patterns (`provider:probe` globs, checked by the caller) name, all
    /// of them if none, and the records of the window and of the trace
    /// (nil: any); a bound is nil, `["after_first", ns]` or `["wall", ns
    /// since the epoch]`.
    fn select(
        ruby: &Ruby,
        rb_self: &Self,
        patterns: Vec<String>,
        since: Option<(String, i64)>,
        until: Option<(String, i64)>,
        trace_id: Option<String>,
    ) -> Result<(), Error> {
        let trace_id = trace_id
            .map(|hex| {
                parse_trace_id(hex.as_bytes())
                    .map_err(|err| magnus::Error::new(ruby.exception_arg_error(), err.to_string()))
            })
            .transpose()?;
        let selection = Selection {
            patterns,
            since: since.map(|bound| bound_of(ruby, bound)).transpose()?,
            until: until.map(|bound| bound_of(ruby, bound)).transpose()?,
            trace_id,
        };
        select::select(&mut rb_self.traces.borrow_mut(), &selection)
            .map_err(|message| cli_error(ruby, message))
    }

    /// `slowest=(count)`: how many of each latency probe's slowest calls
    /// the text and JSON reports list.
    fn set_slowest(&self, count: usize) {
        self.options.set(Options { slowest: count });
    }

    /// `check(format)`: raises what `report` would refuse, before any
    /// output is opened.
    fn check(ruby: &Ruby, rb_self: &Self, format: String) -> Result<(), Error> {
        report::check(&rb_self.traces.borrow(), format_named(ruby, &format)?)
            .map_err(|err| report_error(ruby, err))
    }

    /// `report(format, out)`: the report written to `out` (anything with
    /// `write`), in pieces.
    fn report(ruby: &Ruby, rb_self: &Self, format: String, out: Value) -> Result<(), Error> {
        let format = format_named(ruby, &format)?;
        let mut writer = RubyWriter::new(ruby, out);
        let traces = rb_self.traces.borrow();
        match report::write(
            &traces,
            &rb_self.names,
            format,
            &rb_self.options.get(),
            &mut writer,
        ) {
            Ok(()) => writer.finish(),
            Err(ReportError::Io(err)) => Err(writer.take_error(err)),
            Err(err) => Err(report_error(ruby, err)),
        }
    }
}

fn bound_of(ruby: &Ruby, (kind, nanoseconds): (String, i64)) -> Result<Bound, Error> {
    match kind.as_str() {
        "after_first" => Ok(Bound::FromFirst(nanoseconds)),
        "wall" => Ok(Bound::Wall(nanoseconds)),
        _ => Err(cli_error(ruby, format!("unknown kind of time {kind:?}"))),
    }
}

fn format_named(ruby: &Ruby, name: &str) -> Result<Format, Error> {
    Format::named(name).ok_or_else(|| cli_error(ruby, format!("unknown report format {name:?}")))
}

fn report_error(ruby: &Ruby, err: ReportError) -> Error {
    match err {
        ReportError::Refused(message) => cli_error(ruby, message),
        ReportError::Io(err) => Error::new(ruby.exception_io_error(), err.to_string()),
    }
}

/// `TraceReader.dump(ring_fd, name, out_fd)`: the records the ring holds
/// now, as a trace file written to `out_fd`; `[records, lost, dropped]`.
fn dump(ruby: &Ruby, ring: Value, name: String, out: Value) -> Result<(u64, u64, u64), Error> {
    let out = output_file(ruby, out)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, &*out);
    let counts = follow::dump(&Source::of(ring)?, &name, &mut out).map_err(|err| match err {
        DumpError::Read(err) => trace_error(ruby, err),
        DumpError::Write(err) => write_error(ruby, err),
    })?;
    out.into_inner()
        .map_err(|err| write_error(ruby, err.into_error()))?;
    Ok(tuple(counts))
}

/// A failed write as Ruby raises one (an Errno), for the command's
/// OutputFile to word with the file's name.
pub fn write_error(ruby: &Ruby, err: std::io::Error) -> Error {
    ruby_glue::errno::ruby_error(ruby, &err)
}

/// The file a trace file is written to: a descriptor (see `Source::of`).
pub fn output_file(ruby: &Ruby, out: Value) -> Result<ManuallyDrop<File>, Error> {
    match Source::of(out)? {
        Source::File(file) => Ok(file),
        Source::Object(_) => Err(cli_error(
            ruby,
            "a trace file is written to a descriptor".into(),
        )),
    }
}

pub fn tuple(counts: Counts) -> (u64, u64, u64) {
    (counts.records, counts.lost, counts.dropped)
}

/// `TraceReader.trace_id_problem(text)`: nil for a W3C trace id (32
/// lowercase hex digits, not all zero), else what is wrong with it and the
/// form expected.
fn trace_id_problem(text: RString) -> Option<String> {
    // SAFETY: the bytes are read before any Ruby code runs.
    unsafe { parse_trace_id(text.as_slice()) }
        .err()
        .map(|err| err.to_string())
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<(), Error> {
    // The format's constants that the gem's Ruby code, its benchmarks and
    // its specs need, from the format's owner rather than known there.
    module.const_set("SLOT_SIZE", SLOT_SIZE)?;
    module.const_set("HEAD_OFFSET", offset::HEAD)?;
    module.define_singleton_method("read", function!(read, 2))?;
    module.define_singleton_method("load", function!(Traces::load, 1))?;
    module.define_singleton_method("dump", function!(dump, 3))?;
    module.define_singleton_method("trace_id_problem", function!(trace_id_problem, 1))?;
    let traces = module.define_class("Traces", ruby.class_object())?;
    traces.undef_default_alloc_func();
    traces.define_method("select", method!(Traces::select, 4))?;
    traces.define_method("slowest=", method!(Traces::set_slowest, 1))?;
    traces.define_method("check", method!(Traces::check, 1))?;
    traces.define_method("report", method!(Traces::report, 2))?;
    Ok(())
}
