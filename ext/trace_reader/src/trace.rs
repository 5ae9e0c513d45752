//! `StaticTracing::TraceReader::Trace`: a file read whole, for the
//! command's TraceFile (lib/static_tracing/cli/trace_file.rb), which shows
//! its records to Ruby only when asked (the reports never do).

use magnus::{prelude::*, Error, IntoValue, RArray, RModule, Ruby, Value};
use stapsdt::ring::format::type_name;
use stapsdt::ring::{Arg, Context, ProbeEntry};
use trace_report::{RecordRef, Records, Trace as Read};

#[magnus::wrap(class = "StaticTracing::TraceReader::Trace", free_immediately, size)]
pub struct Trace(pub Read);

impl Trace {
    fn name(&self) -> String {
        self.0.name.clone()
    }

    fn pid(&self) -> u64 {
        self.0.header.pid
    }

    fn pid_namespace(&self) -> u64 {
        self.0.header.pid_namespace
    }

    fn overwrite(&self) -> bool {
        self.0.header.overwrite()
    }

    fn complete(&self) -> bool {
        self.0.header.complete()
    }

    fn anchor_monotonic_ns(&self) -> u64 {
        self.0.header.anchor_monotonic_ns
    }

    fn anchor_realtime_ns(&self) -> i64 {
        self.0.header.anchor_realtime_ns
    }

    fn max_string(&self) -> u32 {
        self.0.header.max_string
    }

    fn slot_count(&self) -> u64 {
        self.0.header.slot_count
    }

    fn head(&self) -> u64 {
        self.0.counters.head
    }

    fn dropped(&self) -> u64 {
        self.0.counters.dropped
    }

    fn records_total(&self) -> u64 {
        self.0.records_total()
    }

    fn lost(&self) -> u64 {
        self.0.lost()
    }

    fn record_count(&self) -> usize {
        self.0.records.len()
    }

    /// `[[id, provider, name, types, latency_arg, stack_arg], ...]`, types
    /// as "Integer", "Float" or "String".
    fn probes(ruby: &Ruby, rb_self: &Self) -> Result<RArray, Error> {
        let probes = ruby.ary_new_capa(rb_self.0.probes.len());
        for probe in &rb_self.0.probes {
            probes.push(probe_array(ruby, probe)?)?;
        }
        Ok(probes)
    }

    /// `[[seq, time_ns, probe_id, tid, args], ...]`, in sequence order.
    fn records(ruby: &Ruby, rb_self: &Self) -> Result<RArray, Error> {
        record_list(ruby, &rb_self.0.records)
    }
}

pub fn probe_array(ruby: &Ruby, probe: &ProbeEntry) -> Result<RArray, Error> {
    let types = ruby.ary_from_iter(probe.types.iter().map(|&arg| type_name(arg)));
    let entry = ruby.ary_new_capa(6);
    entry.push(probe.id)?;
    entry.push(probe.provider.as_str())?;
    entry.push(probe.name.as_str())?;
    entry.push(types)?;
    entry.push(probe.latency_arg)?;
    entry.push(probe.stack_arg)?;
    Ok(entry)
}

/// Records as `Trace#record_list` gives them.
pub fn record_list(ruby: &Ruby, records: &Records) -> Result<RArray, Error> {
    let list = ruby.ary_new_capa(records.len());
    for record in records {
        list.push(record_array(ruby, record)?)?;
    }
    Ok(list)
}

fn record_array(ruby: &Ruby, record: RecordRef<'_>) -> Result<RArray, Error> {
    let args = ruby.ary_new_capa(record.args().len());
    for arg in record.args() {
        let value: Value = match arg {
            Arg::Int(value) => ruby.integer_from_i64(value).as_value(),
            Arg::Float(value) => ruby.float_from_f64(value).as_value(),
            // As the process fired them: Ruby's Strings, UTF-8 unless they
            // were not (then invalid, as they were).
            Arg::Str(bytes) => ruby.enc_str_new(bytes, ruby.utf8_encoding()).as_value(),
        };
        args.push(value)?;
    }
    let entry = ruby.ary_new_capa(6);
    entry.push(record.seq)?;
    entry.push(record.time_ns)?;
    entry.push(record.probe)?;
    entry.push(record.tid)?;
    entry.push(args)?;
    // Its trace context: nil (none), :unknown, or [trace_id, span_id].
    let context: Value = match record.context {
        Context::None => ruby.qnil().as_value(),
        Context::Unknown => ruby.to_symbol("unknown").as_value(),
        Context::Known(context) => (context.trace_hex(), context.span_hex()).into_value_with(ruby),
    };
    entry.push(context)?;
    Ok(entry)
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let class = module.define_class("Trace", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_method("name", method!(Trace::name, 0))?;
    class.define_method("pid", method!(Trace::pid, 0))?;
    class.define_method("pid_namespace", method!(Trace::pid_namespace, 0))?;
    class.define_method("overwrite?", method!(Trace::overwrite, 0))?;
    class.define_method("complete?", method!(Trace::complete, 0))?;
    class.define_method(
        "anchor_monotonic_ns",
        method!(Trace::anchor_monotonic_ns, 0),
    )?;
    class.define_method("anchor_realtime_ns", method!(Trace::anchor_realtime_ns, 0))?;
    class.define_method("max_string", method!(Trace::max_string, 0))?;
    class.define_method("slot_count", method!(Trace::slot_count, 0))?;
    class.define_method("head", method!(Trace::head, 0))?;
    class.define_method("dropped", method!(Trace::dropped, 0))?;
    class.define_method("records_total", method!(Trace::records_total, 0))?;
    class.define_method("lost", method!(Trace::lost, 0))?;
    class.define_method("record_count", method!(Trace::record_count, 0))?;
    class.define_method("probe_list", method!(Trace::probes, 0))?;
    class.define_method("record_list", method!(Trace::records, 0))?;
    Ok(())
}
