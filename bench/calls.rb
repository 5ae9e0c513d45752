# frozen_string_literal: true

module Bench
  # What a tracepoint call costs on a loaded provider, with no tracer
  # attached and with bpftrace counting its hits, next to an empty native
  # method called with the same arguments: the floor no call into the
  # extension can go under.
  class Calls < Group
    ROUNDS = 11
    SAMPLE_MS = 30
    PATH = "/users/42/edit"
    # probe => [label, types, arguments]
    PROBES = {
      none: ["fire()", [], []],
      int: ["fire(Integer)", [Integer], [42]],
      int6: ["fire(Integer x 6)", [Integer] * 6, [1, 2, 3, 4, 5, 6]],
      string: ["fire(String)", [String], [PATH]],
      int_string: ["fire(Integer, String)", [Integer, String], [42, PATH]]
    }.freeze
    SIGNATURES = PROBES.transform_values { |_, types, _| types }
    ATTACHED = :bench_calls_attached
    TRACER = "bpftrace count()"

    # The floor of a call with +args+: Native.noop(*args), labelled by the probe's label.
    def self.floor(label, args) = Loop.call("noop(#{label[/\((.*)\)/, 1]})", StaticTracing::Native, :noop, *args)

    def run
      with_loaded_provider(:bench_calls, SIGNATURES) do |unattached|
        with_loaded_provider(ATTACHED, SIGNATURES) do |attached|
          program = Bpftrace.count_program(ATTACHED, PROBES.keys)
          Bpftrace.attached(program, pid: Process.pid, log: work_file("calls-bpftrace.log")) do |tracer|
            measure(unattached, tracer && attached, tracer)
          end
        end
      end
    end

    private

    # [row id, tracer, measured loop (its label when bpftrace cannot run), its floor]
    def comparisons(unattached, attached)
      rows = PROBES.flat_map do |probe, (label, _, args)|
        floor = Calls.floor(label, args)
        [["fire_#{probe}.unattached", "none", Loop.call(label, unattached[probe], :fire, *args), floor],
         ["fire_#{probe}.attached", TRACER, attached_loop(attached, "#{label} attached", probe, :fire, *args),
          floor]]
      end
      floor = Calls.floor("()", [])
      rows + [["enabled_p.unattached", "none", Loop.call("enabled?", unattached[:int], :enabled?), floor],
              ["enabled_p.attached", TRACER, attached_loop(attached, "enabled? attached", :int, :enabled?),
               floor]]
    end

    def attached_loop(attached, label, probe, method, *args)
      attached ? Loop.call(label, attached[probe], method, *args) : label
    end

    def measure(unattached, attached, tracer)
      comparisons = comparisons(unattached, attached)
      samples = time(comparisons.flat_map { |*, subject, floor| [subject, floor] }.grep(Loop).uniq(&:label),
                     sample_ms: SAMPLE_MS)
      table = table(samples)
      comparisons.each { |comparison| table.row(row(*comparison, samples)) }
      table.note(attachment_note(unattached.values))
      table.note(attached ? Bpftrace.attached_note(attached.values) : Bpftrace.skipped_note)
      table.note(Bpftrace.count_note(tracer.finish, fired(comparisons))) if tracer
    end

    # Probe => calls made through its attached fire loop.
    def fired(comparisons)
      comparisons.filter_map { |id, _, subject| [id[/\Afire_(\w+)\.attached\z/, 1], subject.calls] }
                 .select(&:first).to_h
    end

    def row(id, tracer, subject, floor, samples)
      if subject.is_a?(String)
        reason = Bpftrace.unavailable_reason
        return { id:, measurement: "#{subject}: skipped: #{reason}", tracer:,
                 floor: floor.label, skipped: reason }
      end
      { id:, measurement: subject.label, tracer:, **samples.timing(subject.label),
        floor: floor.label, floor_ns_per_call: samples.median(floor.label),
        over_floor_ns: samples.over(subject.label, floor.label), ratio: samples.ratio(subject.label, floor.label),
        floor_samples_ns: samples.ns(floor.label).map { |value| value.round(2) } }
    end

    def table(samples)
      super(:calls, "Calls, loaded provider, unattached and attached (median of #{rounds} interleaved rounds)",
            params: { rounds:, sample_ms: SAMPLE_MS, empty_loop_ns_per_iteration: samples.empty_median.round(3) },
            measurement: "measurement", tracer: "tracer", ns_per_call: ["ns/call", :d1], spread_ns: ["min..max", :r1],
            floor: "floor (Native.noop)", floor_ns_per_call: ["floor ns/call", :d1],
            over_floor_ns: ["over floor ns", :d1], ratio: ["ratio to floor", :x])
        .note(format("ns/call are net of an empty loop (%<ns>.1f ns/iteration); each loop runs about %<ms>d ms a " \
                     "sample; ratios are medians of per-round ratios", ns: samples.empty_median, ms: SAMPLE_MS))
    end
  end
end
