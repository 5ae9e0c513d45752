# frozen_string_literal: true

module Bench
  class Recorder
    # What every path costs while nothing records, in two phases: before
    # this process's first recording (the recorder group times it first,
    # and no group before it records), and after a recording armed, wrapped
    # and recorded the path, then stopped. The phases cannot share rounds (a
    # process cannot go back to never having recorded), so each path has a
    # twin, the same code on probes no recording names, timed in the same
    # rounds: what a stopped recording leaves on the probes it recorded (a
    # wrapper left in place, a mark not cleared) shows in the path's ratio
    # to its twin, stopped against never started, which the machine's load
    # between the phases does not blur. What it would leave to the whole
    # process shows only in the twins' own change between the phases,
    # within the machine's noise.
    class Idle
      # The paths' providers (PATTERNS names them) and their twins'.
      PROVIDERS = { calls: :bench_recorder_idle_calls, methods: :bench_recorder_idle_methods,
                    blocks: :bench_recorder_idle_blocks }.freeze
      TWINS = { calls: :bench_recorder_twin_calls, methods: :bench_recorder_twin_methods,
                blocks: :bench_recorder_twin_blocks }.freeze
      # Calls of each path recorded between the phases.
      BURST = 10_000
      TWIN = " (twin)"

      # A path and its twin (its loop's label + TWIN), in tracing's +state+.
      Subject = Struct.new(:id, :loop, :twin, :state) do
        def label = loop.label
      end

      attr_reader :subjects

      def initialize(group)
        paths = [PROVIDERS, TWINS].map { |providers| loops(group, providers) }
        # Tracing off first, then on: a round turns it on once and off once.
        @subjects = [["fire_int", :off], ["latency_tracer.disarmed", :off], ["latency_block.off", :off],
                     ["latency_tracer.armed", :on], ["latency_block.armed", :on]].map do |id, state|
          Subject.new(id, paths.first.fetch(id), paths.last.fetch(id), state)
        end
        @states = @subjects.flat_map { |subject| [subject.loop, subject.twin].map { [_1.label, subject.state] } }.to_h
      end

      # One phase: the paths and their twins in interleaved rounds.
      def time(rounds:, sample_ms:)
        loops = @subjects.flat_map { |subject| [subject.loop, subject.twin] }
        Samples.new(loops, sample_ms:, rounds:, around: Recorder.around(@states))
      end

      # While recording: BURST calls of each path (not the twins), in its
      # state; returns the calls made, each of which the ring records.
      def record_burst
        @subjects.each do |subject|
          Recorder.switch(subject.state)
          subject.loop.time_ns(BURST)
        end
        Recorder.switch(:off)
        @subjects.size * BURST
      end

      # The table's title and columns.
      def columns(rounds)
        ["While nothing records: recorder never started, then stopped, each path beside its twin (median of " \
         "#{rounds} interleaved rounds a phase)",
         { measurement: "measurement", never_ns: ["never started ns", :d1], stopped_ns: ["stopped ns", :d1],
           twin_change: ["twin stopped / never", :x], never_vs_twin: ["/ twin, never", :x],
           stopped_vs_twin: ["/ twin, stopped", :x], ratio: ["stopped / never, against twin", :x] }]
      end

      # +phases+: :never and :stopped => Samples.
      def table(phases, table)
        subjects.each { |subject| table.row(row(subject, phases)) }
        table.note("twin: the same call on probes no recording names, timed in the same rounds; / twin: the " \
                   "path's ratio to it, a median of per-round ratios; stopped / never, against twin: that ratio " \
                   "when stopped over that ratio before, what the recording left on the path; twin stopped / " \
                   "never: the twin's own medians, what the machine (and anything left to the whole process) " \
                   "changed between the phases")
        table.note("between the phases a flight recording armed every path (not the twins), wrapping the " \
                   "LatencyTracer method with tracing off, recorded #{BURST} calls of each, and stopped")
        empty = phases.map { |name, samples| format("%<ns>.1f ns/iteration %<name>s", name:, ns: samples.empty_median) }
        table.note("ns/call net of an empty loop (#{empty.join(", ")})")
        drift_note(table)
      end

      # The twins' own change between the phases within which the machine
      # is taken to have been as busy in both.
      STEADY = (0.9..1.1)

      private

      def drift_note(table)
        drifted = table.rows.reject { |row| STEADY.cover?(row[:twin_change]) }
        return table if drifted.empty?

        changes = drifted.map do |row|
          format("%<what>s %<change>.2fx", what: row[:measurement], change: row[:twin_change])
        end
        table.note("WARNING: twins changed by more than 10% between the phases (#{changes.join(", ")}): the " \
                   "machine was busier in one of them, and the ratios against the twins are less certain")
      end

      def loops(group, providers)
        twin = providers == TWINS ? TWIN : ""
        traced = Recorder.target_class(group.provider(providers[:methods])).new
        calls = StaticTracing::Provider.register(group.provider(providers[:calls]))
        tracepoint = calls.add_tracepoint(:int, Integer)
        calls.load
        block = "StaticTracing.latency(name: :block, provider: :#{group.provider(providers[:blocks])}) { }"
        m0 = ->(label) { Loop.new("#{label}#{twin}", "receiver.m0", receiver: traced) }
        { "fire_int" => Loop.call("fire(Integer), no tracer#{twin}", tracepoint, :fire, 42),
          "latency_tracer.disarmed" => m0.call("LatencyTracer m0() tracing off"),
          "latency_block.off" => Loop.new("StaticTracing.latency { } tracing off#{twin}", block),
          "latency_tracer.armed" => m0.call("LatencyTracer m0() on, no tracer"),
          "latency_block.armed" => Loop.new("StaticTracing.latency { } on, no tracer#{twin}", block) }
      end

      # A ratio to a twin that costs nothing measurable (YJIT compiles an
      # empty method into its caller) is left out, as not measured.
      def row(subject, phases)
        path, twin = [subject.loop, subject.twin].map(&:label)
        never, stopped = phases.values_at(:never, :stopped).map { |samples| samples.ratio(path, twin) }
        { id: subject.id, measurement: path, never_ns: phases[:never].median(path),
          stopped_ns: phases[:stopped].median(path), twin_never_ns: phases[:never].median(twin),
          twin_stopped_ns: phases[:stopped].median(twin),
          twin_change: phases[:stopped].median(twin) / phases[:never].median(twin),
          never_vs_twin: never, stopped_vs_twin: stopped, ratio: never && stopped && (stopped / never),
          **phases.to_h { |name, samples| [:"#{name}_samples_ns", rounded(samples, path)] },
          **phases.to_h { |name, samples| [:"twin_#{name}_samples_ns", rounded(samples, twin)] } }.compact
      end

      def rounded(samples, label) = samples.ns(label).map { |value| value.round(2) }
    end
  end
end
