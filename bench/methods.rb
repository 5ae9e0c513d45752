# frozen_string_literal: true

module Bench
  # What tracing a method costs its callers, for a few parameter shapes
  # (a wrapper's cost depends on how it passes the arguments on), next to
  # the plain method, the least a Ruby wrapper pays, and the TracePoint one
  # would write instead; and what the block forms cost next to a bare
  # yield. Tracing is turned off and on within each round, so the disarmed
  # and armed rows share the round's moments of noise with the plain ones.
  class Methods
    KEY = :methods
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

    # One measured loop: the row it makes, the tracing state it runs in
    # (:off or :on) and the method a TracePoint is enabled on around it.
    Subject = Struct.new(:id, :group, :shape, :path, :loop, :state, :pointed, :skipped, keyword_init: true)

    def initialize(rounds: ROUNDS)
      @rounds = rounds
    end

    def run
      require_relative "subjects"
      @tracepoint = Subjects::LatencyTracePoint.new
      StaticTracing::Provider.load(ATTACHED)
      Bpftrace.attached(Fixtures.count_program(ATTACHED, Subjects::SHAPES.keys),
                        pid: Process.pid, log: File.join(WORK_DIR, "methods-bpftrace.log")) do |tracer|
        measure(subjects(tracer), tracer)
      end
    ensure
      StaticTracing.disable!
      %i[bench_methods bench_blocks].push(ATTACHED).each { |name| StaticTracing.providers[name].unregister }
    end

    private

    def subjects(tracer)
      method_subjects(tracer) + block_subjects
    end

    # Disarmed rows first and armed ones after, so a round turns tracing
    # on once and off once.
    def method_subjects(tracer)
      list = Subjects::SHAPES.keys.flat_map do |shape|
        [method_subject(shape, :plain, Subjects::Plain, :off),
         method_subject(shape, :floor, Subjects::Floor, :off),
         method_subject(shape, :disarmed, Subjects::Traced, :off),
         method_subject(shape, :tracepoint, Subjects::Pointed, :off, pointed: Subjects::Pointed.instance_method(shape)),
         method_subject(shape, :armed, Subjects::Traced, :on),
         method_subject(shape, :attached, Subjects::Attached, :on, skipped: tracer ? nil : Bpftrace.unavailable_reason)]
      end
      list.sort_by.with_index { |subject, index| [subject.state == :off ? 0 : 1, index] }
    end

    def method_subject(shape, path, klass, state, **options)
      label, code, locals = Subjects::SHAPES.fetch(shape)
      loop = CodeLoop.new("#{label} #{PATHS.fetch(path)}", code, receiver: klass.new, **locals) unless options[:skipped]
      Subject.new(id: "#{shape}.#{path}", group: :methods, shape: label, path: PATHS.fetch(path), loop:, state:,
                  **options)
    end

    def block_subjects
      latency = "StaticTracing.latency(name: :block, provider: :bench_blocks) { }"
      custom = "StaticTracing.tracepoint(:bench_blocks, :custom, Integer) { 1 }"
      [block_subject("block.yield", "bare yield", "receiver.with_yield { }", :off, receiver: Subjects::Plain.new),
       block_subject("block.latency_disarmed", "StaticTracing.latency { } disarmed", latency, :off),
       block_subject("block.latency_armed", "StaticTracing.latency { } armed, unattached", latency, :on),
       block_subject("block.tracepoint_unattached", "StaticTracing.tracepoint { } armed, unattached", custom, :on)]
    end

    def block_subject(id, path, code, state, **locals)
      Subject.new(id:, group: :blocks, shape: "block", path:, state:, loop: CodeLoop.new(path, code, **locals))
    end

    def measure(subjects, tracer)
      measured = subjects.select(&:loop)
      @by_label = measured.to_h { |subject| [subject.loop.label, subject] }
      attached_note = tracer && Fixtures.attached_note(StaticTracing.providers[ATTACHED].tracepoints.values)
      samples = Samples.new(measured.map(&:loop), rounds: @rounds, target_ms: SAMPLE_MS, around: method(:around)).run
      allocations = allocations(measured, samples)
      sections = MethodSections.new(subjects, samples, allocations, @rounds)
      sections.notes(attached_note || Fixtures.skipped_note)
      sections.notes(Fixtures.count_note(tracer.finish, attached_calls(subjects))) if tracer
      sections.to_a
    end

    # Method name (the probe's) => calls made through its attached loop.
    def attached_calls(subjects)
      subjects.select { |subject| subject.loop && subject.id.end_with?(".attached") }
              .to_h { |subject| [subject.id.split(".").first, subject.loop.calls] }
    end

    # Puts the process in the state +loop+ is measured in.
    def around(loop, run)
      subject = @by_label.fetch(loop.label)
      if subject.state == :on
        StaticTracing.enable! unless StaticTracing.enabled?
      elsif StaticTracing.enabled?
        StaticTracing.disable!
      end
      subject.pointed ? @tracepoint.around(subject.pointed) { run.call } : run.call
    end

    # Objects per call of every subject, in interleaved rounds of their own.
    def allocations(measured, samples)
      cases = measured.to_h do |subject|
        loop = subject.loop
        calls = [ALLOCATION_CALLS, samples.iterations[loop.label]].min
        [loop.label, -> { objects_per_call(loop, calls) }]
      end
      Bench.interleave(cases, rounds: ALLOCATION_ROUNDS)
    end

    def objects_per_call(loop, calls)
      result = nil
      around(loop, -> { result = loop.objects_per_call(calls) })
      result
    end
  end
end
