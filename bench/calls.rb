# frozen_string_literal: true

module Bench
  # What a tracepoint call costs on a loaded provider, with no tracer
  # attached and with bpftrace counting its hits, next to an empty native
  # method called with the same arguments: the floor no call into the
  # extension can go under.
  class Calls
    KEY = :calls
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
    ATTACHED = :bench_calls_attached
    TRACER = "bpftrace count()"
    # Stands for a loop that could not be measured.
    Skipped = Struct.new(:label)

    def initialize(rounds: ROUNDS)
      @rounds = rounds
    end

    def run
      signatures = PROBES.transform_values { |_, types, _| types }
      Fixtures.with_loaded_provider(:bench_calls, signatures) do |unattached|
        Fixtures.with_loaded_provider(ATTACHED, signatures) do |attached|
          Bpftrace.attached(Fixtures.count_program(ATTACHED, PROBES.keys),
                            pid: Process.pid, log: File.join(WORK_DIR, "calls-bpftrace.log")) do |tracer|
            measure(unattached, tracer && attached, tracer)
          end
        end
      end
    end

    private

    # [row id, tracer, measured call, its floor]; the attached call is nil
    # when bpftrace cannot run.
    def comparisons(unattached, attached)
      native = StaticTracing::Native
      rows = PROBES.flat_map do |probe, (label, _, args)|
        floor = CallLoop.new("noop(#{label[/\((.*)\)/, 1]})", native, :noop, *args)
        [[:"fire_#{probe}.unattached", "none", CallLoop.new(label, unattached[probe], :fire, *args), floor],
         [:"fire_#{probe}.attached", TRACER, attached_loop(attached, "#{label} attached", probe, :fire, *args),
          floor]]
      end
      floor = CallLoop.new("noop()", native, :noop)
      rows + [[:"enabled_p.unattached", "none", CallLoop.new("enabled?", unattached[:int], :enabled?), floor],
              [:"enabled_p.attached", TRACER, attached_loop(attached, "enabled? attached", :int, :enabled?), floor]]
    end

    def attached_loop(attached, label, probe, method, *args)
      attached ? CallLoop.new(label, attached[probe], method, *args) : Skipped.new(label)
    end

    def measure(unattached, attached, tracer)
      comparisons = comparisons(unattached, attached)
      loops = comparisons.flat_map { |_, _, subject, floor| [subject, floor] }.grep(CodeLoop).uniq(&:label)
      notes = [Fixtures.attachment_note(unattached.values),
               attached ? Fixtures.attached_note(attached.values) : Fixtures.skipped_note]
      samples = Samples.new(loops, rounds: @rounds, target_ms: SAMPLE_MS).run
      notes << Fixtures.count_note(tracer.finish, fired(comparisons)) if tracer
      section(samples).tap do |section|
        comparisons.each { |id, name, subject, floor| section.row(row(id, name, subject, floor, samples)) }
        notes.each { |note| section.note(note) }
      end
    end

    # Probe name => calls made through the attached fire loops.
    def fired(comparisons)
      comparisons.filter_map do |id, tracer, subject, _|
        probe = id[/\Afire_(\w+)\.attached\z/, 1]
        [probe, subject.calls] if probe && tracer == TRACER
      end.to_h
    end

    def row(id, tracer, subject, floor, samples)
      return skipped_row(id, tracer, subject, floor) if subject.is_a?(Skipped)

      { id: id.to_s, measurement: subject.label, tracer:, **samples.timing(subject.label),
        floor: floor.label, floor_ns_per_call: samples.median(floor.label),
        over_floor_ns: samples.over(subject.label, floor.label),
        ratio: samples.ratio(subject.label, floor.label),
        floor_samples_ns: samples.ns(floor.label).map { |value| value.round(2) } }
    end

    def skipped_row(id, tracer, subject, floor)
      reason = Bpftrace.unavailable_reason
      { id: id.to_s, measurement: "#{subject.label}: skipped: #{reason}", tracer:, floor: floor.label, skipped: reason }
    end

    def section(samples)
      params = { rounds: @rounds, sample_ms: SAMPLE_MS, empty_loop_ns_per_iteration: samples.empty_median.round(3) }
      Section.new(KEY, "Calls, loaded provider, unattached and attached (median of #{@rounds} interleaved rounds)",
                  params:)
             .column(:measurement, "measurement")
             .column(:tracer, "tracer")
             .column(:ns_per_call, "ns/call", Format.decimal(1))
             .column(:spread_ns, "min..max", Format.range(1))
             .column(:floor, "floor (Native.noop)")
             .column(:floor_ns_per_call, "floor ns/call", Format.decimal(1))
             .column(:over_floor_ns, "over floor ns", Format.decimal(1))
             .column(:ratio, "ratio to floor", Format.ratio)
             .note(format("ns/call are net of an empty loop (%<ns>.1f ns/iteration); each loop runs about " \
                          "%<ms>d ms a sample; ratios are medians of per-round ratios",
                          ns: samples.empty_median, ms: SAMPLE_MS))
    end
  end
end
