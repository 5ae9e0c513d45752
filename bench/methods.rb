# frozen_string_literal: true

module Bench
  # What tracing a method costs its callers, for a few parameter shapes
  # (a wrapper's cost depends on how it passes the arguments on), next to
  # the plain method, the least a Ruby wrapper pays, and the TracePoint one
  # would write instead; what the block forms cost next to a bare yield;
  # and the objects each allocates. Tracing is turned off and on within
  # each round, so the disarmed and armed rows share the round's moments
  # of noise with the plain ones.
  class Methods < Group
    ROUNDS = 11
    SAMPLE_MS = 25
    # Calls for an allocation count: enough to see one object every
    # few thousand calls, few enough for microsecond-long attached calls.
    ALLOCATION_CALLS = 50_000
    ALLOCATION_ROUNDS = 3
    TRACER = "bpftrace count()"
    ATTACHED = :bench_methods_attached
    PATHS = {
      plain: "plain",
      floor: "prepend+super floor",
      disarmed: "LatencyTracer disarmed",
      tracepoint: "TracePoint(:call, :return) target:",
      armed: "LatencyTracer armed, unattached",
      attached: "LatencyTracer attached (#{TRACER})"
    }.freeze
    # What a path may allocate per call: the count of that path's row of the
    # same shape (a wrapper passing keywords through super allocates one
    # object on Ruby 3.1, hand-written or not), or 0.
    ALLOCATION_TARGETS = { "disarmed" => "plain", "armed" => "floor", "attached" => "floor",
                           "latency_disarmed" => 0, "latency_armed" => 0, "tracepoint_unattached" => 0,
                           "held_latency_disarmed" => 0, "held_latency_armed" => 0, "held_tracepoint" => 0 }.freeze

    # One measured loop: its row, the tracing state it runs in (:off or
    # :on) and the method a TracePoint is enabled on around it.
    Subject = Struct.new(:id, :group, :shape, :path, :loop, :state, :pointed, :skipped, keyword_init: true) do
      def label = loop.label
    end

    def run
      require_relative "methods/subjects"
      @tracepoint = Subjects::LatencyTracePoint.new
      StaticTracing::Provider.load(ATTACHED)
      Bpftrace.attached(Bpftrace.count_program(ATTACHED, Subjects::SHAPES.keys),
                        pid: Process.pid, log: work_file("methods-bpftrace.log")) do |tracer|
        measure(method_subjects(tracer) + block_subjects, tracer)
      end
    ensure
      StaticTracing.disable!
      %i[bench_methods bench_blocks].push(ATTACHED).each { |name| StaticTracing.providers[name].unregister }
    end

    private

    # Disarmed rows first and armed ones after, so a round turns tracing on once and off once.
    def method_subjects(tracer)
      skipped = tracer ? nil : Bpftrace.unavailable_reason
      subjects = Subjects::SHAPES.keys.flat_map do |shape|
        [method_subject(shape, :plain, Subjects::Plain, :off), method_subject(shape, :floor, Subjects::Floor, :off),
         method_subject(shape, :disarmed, Subjects::Traced, :off),
         method_subject(shape, :tracepoint, Subjects::Pointed, :off, pointed: Subjects::Pointed.instance_method(shape)),
         method_subject(shape, :armed, Subjects::Traced, :on),
         method_subject(shape, :attached, Subjects::Attached, :on, skipped:)]
      end
      subjects.sort_by.with_index { |subject, index| [subject.state == :off ? 0 : 1, index] }
    end

    def method_subject(shape, path, klass, state, **options)
      label, code, locals = Subjects::SHAPES.fetch(shape)
      loop = Loop.new("#{label} #{PATHS.fetch(path)}", code, receiver: klass.new, **locals) unless options[:skipped]
      Subject.new(id: "#{shape}.#{path}", group: :methods, shape: label, path: PATHS.fetch(path), loop:, state:,
                  **options)
    end

    # The block forms, and the same probes held in constants (docs/api.md):
    # Tracepoint#measure and #fire_if_enabled, whose block has had its
    # first, checking, run.
    def block_subjects
      latency = "StaticTracing.latency(name: :block, provider: :bench_blocks) { }"
      custom = "StaticTracing.tracepoint(:bench_blocks, :custom, Integer) { 1 }"
      held = { probe: StaticTracing.latency_probe(:held, provider: :bench_blocks) }
      hit = { probe: StaticTracing::Tracepoint.new(:bench_blocks, :held_custom, Integer) }
      hit[:probe].fire_if_enabled { 1 }
      { "yield" => ["bare yield", "receiver.with_yield { }", :off, { receiver: Subjects::Plain.new }],
        "latency_disarmed" => ["StaticTracing.latency { } disarmed", latency, :off, {}],
        "latency_armed" => ["StaticTracing.latency { } armed, unattached", latency, :on, {}],
        "tracepoint_unattached" => ["StaticTracing.tracepoint { } armed, unattached", custom, :on, {}],
        "held_latency_disarmed" => ["held probe measure { } disarmed", "probe.measure { }", :off, held],
        "held_latency_armed" => ["held probe measure { } armed, unattached", "probe.measure { }", :on, held],
        "held_tracepoint" => ["held probe fire_if_enabled { } unattached", "probe.fire_if_enabled { 1 }", :on, hit] }
        .map do |id, (path, code, state, locals)|
          Subject.new(id: "block.#{id}", group: :blocks, shape: "block", path:, state:,
                      loop: Loop.new(path, code, **locals))
        end
    end

    def measure(subjects, tracer)
      measured = subjects.select(&:loop)
      @by_label = measured.to_h { |subject| [subject.label, subject] }
      @by_id = measured.to_h { |subject| [subject.id, subject] }
      samples = time(measured.map(&:loop), sample_ms: SAMPLE_MS, around: method(:around))
      params = { rounds:, sample_ms: SAMPLE_MS, empty_loop_ns_per_iteration: samples.empty_median.round(3),
                 allocation_rounds: ALLOCATION_ROUNDS, ruby: RUBY_VERSION }
      methods = methods_table(subjects, samples, params)
      attached = StaticTracing.providers[ATTACHED].tracepoints.values
      methods.note(tracer ? Bpftrace.attached_note(attached) : Bpftrace.skipped_note)
      blocks_table(measured, samples, params)
      allocations_table(measured, allocations(measured, samples), params)
      methods.note(Bpftrace.count_note(tracer.finish, attached_calls(measured))) if tracer
    end

    # Puts the process in the state +loop+ is measured in.
    def around(loop, &)
      subject = @by_label.fetch(loop.label)
      if subject.state == :on
        StaticTracing.enable! unless StaticTracing.enabled?
      elsif StaticTracing.enabled?
        StaticTracing.disable!
      end
      subject.pointed ? @tracepoint.around(subject.pointed, &) : yield
    end

    # Method name (the probe's) => calls made through its attached loop.
    def attached_calls(measured)
      measured.select { |subject| subject.id.end_with?(".attached") }
              .to_h { |subject| [subject.id.split(".").first, subject.loop.calls] }
    end

    def label(id) = @by_id.fetch(id).label

    def methods_table(subjects, samples, params)
      table = table(:methods, "Method tracing per call, by parameter shape (median of #{rounds} interleaved rounds)",
                    params:, shape: "shape", path: "path", ns_per_call: ["ns/call", :d1],
                    spread_ns: ["min..max", :r1], over_plain_ns: ["over plain ns", :d1],
                    ratio_to_plain: ["ratio to plain", :x], overhead_vs_floor: ["overhead / floor's", :x])
      # Rows by shape in the order of PATHS, whatever order they were timed in.
      order = PATHS.keys.map(&:to_s)
      subjects.select { |subject| subject.group == :methods }.group_by(&:shape).each_value do |rows|
        rows.sort_by { |subject| order.index(subject.id.split(".").last) }
            .each { |subject| table.row(method_row(subject, samples)) }
      end
      table.note(format("ns/call are net of an empty loop (%<ns>.1f ns/iteration); over plain and ratios are " \
                        "medians of per-round values; overhead / floor's = (path - plain) / (floor - plain)",
                        ns: samples.empty_median))
      table.note("floor: a prepended method with the same parameters calling super with them; TracePoint: " \
                 "enabled with target: on the method only, reading the clock at :call and :return")
    end

    def method_row(subject, samples)
      if subject.skipped
        return { id: subject.id, shape: subject.shape, path: "#{subject.path}: skipped: #{subject.skipped}",
                 skipped: subject.skipped }
      end
      shape, path = subject.id.split(".")
      plain = label("#{shape}.plain")
      floor = label("#{shape}.floor") unless %w[plain floor].include?(path)
      { id: subject.id, shape: subject.shape, path: subject.path, **samples.timing(subject.label),
        over_plain_ns: samples.over(subject.label, plain), ratio_to_plain: samples.ratio(subject.label, plain),
        overhead_vs_floor: floor && samples.overhead_ratio(subject.label, floor, plain) }.compact
    end

    def blocks_table(measured, samples, params)
      table = table(:blocks, "Block probes per call (median of #{rounds} interleaved rounds)",
                    params:, path: "measurement", ns_per_call: ["ns/call", :d1], spread_ns: ["min..max", :r1],
                    over_yield_ns: ["over yield ns", :d1], ratio_to_yield: ["ratio to yield", :x])
      measured.select { |subject| subject.group == :blocks }.each do |subject|
        table.row({ id: subject.id, path: subject.path, **samples.timing(subject.label),
                    over_yield_ns: samples.over(subject.label, label("block.yield")),
                    ratio_to_yield: samples.ratio(subject.label, label("block.yield")) })
      end
      table.note("bare yield: a method that yields, called with an empty block; latency: name: and provider: " \
                 "given; tracepoint: an Integer probe whose block is not run while unattached; held: the same " \
                 "probes in a constant (StaticTracing.latency_probe, Tracepoint#measure, #fire_if_enabled)")
    end

    # Objects per call of every subject, in interleaved rounds of their own.
    def allocations(measured, samples)
      cases = measured.to_h do |subject|
        calls = [ALLOCATION_CALLS, samples.iterations[subject.label]].min
        [subject.label, -> { around(subject.loop) { subject.loop.objects_per_call(calls) } }]
      end
      Bench.interleave(cases, rounds: ALLOCATION_ROUNDS)
    end

    def allocations_table(measured, allocations, params)
      table = table(:method_allocations, "Allocations per call of the methods and blocks above " \
                                         "(GC.stat(:total_allocated_objects), median of #{ALLOCATION_ROUNDS} rounds)",
                    params:, shape: "shape", path: "path", objects_per_call: ["objects/call", :d4],
                    target_objects: ["target objects/call", :d0], target_from: "target from")
      measured.each { |subject| table.row(allocation_row(subject, allocations)) }
      # Said in words, since a rounded count could hide one object every few thousand calls.
      table.rows.select { |row| row[:target_objects] }.each do |row|
        table.note(format("%<what>s allocates at most %<target>d/call: %<verdict>s (rounds: %<samples>s)",
                          what: "#{row[:shape]} #{row[:path]}", target: row[:target_objects],
                          verdict: row[:samples].all? { |count| count <= row[:target_objects] } ? "YES" : "NO",
                          samples: row[:samples].map { |count| count.round(4) }.join(", ")))
      end
    end

    def allocation_row(subject, allocations)
      counts = allocations.fetch(subject.label)
      shape, path = subject.id.split(".")
      target = ALLOCATION_TARGETS[path]
      target_objects = target.is_a?(String) ? Bench.median(allocations.fetch(label("#{shape}.#{target}"))) : target
      { id: subject.id, shape: subject.shape, path: subject.path, objects_per_call: Bench.median(counts),
        samples: counts, target_objects:,
        target_from: target.is_a?(String) ? "#{target} (#{shape})" : target && "none" }.compact
    end
  end
end
