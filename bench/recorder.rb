# frozen_string_literal: true

module Bench
  # What recording costs (StaticTracing::Recorder, docs/recording.md): a
  # recorded call next to the same call unrecorded and, for a LatencyTracer
  # method, next to the same call with bpftrace attached, all in the same
  # interleaved rounds while one flight recording runs; what every path
  # costs while nothing records, before this process's first recording and
  # after it stopped (bench/recorder/idle.rb); and the ring itself: four
  # threads recording into one, `static-tracing report` reading a million
  # records back, and the file's size (bench/recorder/ring.rb); trace
  # contexts (bench/recorder/contexts.rb).
  class Recorder < Group
    ROUNDS = 11
    SAMPLE_MS = 25
    TRACER = "bpftrace count()"
    # The recorded providers, and those of the calls compared with them.
    REC_CALLS = :bench_recorder_rec_calls
    REC_METHODS = :bench_recorder_rec_methods
    REC_BLOCKS = :bench_recorder_rec_blocks
    CALLS = :bench_recorder_calls
    METHODS = :bench_recorder_methods
    BLOCKS = :bench_recorder_blocks
    ATTACHED = :bench_recorder_attached
    PATTERNS = %w[bench_recorder_rec_*:* bench_recorder_idle_*:*].freeze
    PATH = "/users/42/edit"

    # One loop of the per-call table: +state+ :off or :on (tracing's
    # switch), +recorded+ whether the recorder records its probe,
    # +unrecorded+ the id of the same path unrecorded (what recording adds
    # is measured against it), +compared+ the id of the row its ratio is to.
    Subject = Struct.new(:id, :label, :tracer, :loop, :state, :recorded, :unrecorded, :compared, :skipped,
                         keyword_init: true)

    def run
      unless StaticTracing.supported?
        reason = "probes cannot be recorded on #{RUBY_PLATFORM}"
        return table(:recorder, "Recording per call", measurement: "measurement")
               .row(id: "recorder", measurement: "recording: skipped: #{reason}", skipped: reason)
      end

      @providers = []
      per_call_and_idle
      [Ring, Contexts, Scraping].each { |part| part.new(self).run }
    ensure
      StaticTracing::Recorder.stop
      StaticTracing.disable!
      @providers&.each { |name| StaticTracing.providers[name]&.unregister }
    end

    # The per-call table (one recording running) and the idle paths.
    def per_call_and_idle
      idle = Idle.new(self)
      phases = { never: idle.time(rounds:, sample_ms: SAMPLE_MS) }
      subjects = per_call_subjects
      per_call_table(subjects, *record { measure(subjects, idle) })
      phases[:stopped] = idle.time(rounds:, sample_ms: SAMPLE_MS)
      title, columns = idle.columns(rounds)
      idle.table(phases, table(:recorder_idle, title, params: { rounds:, sample_ms: SAMPLE_MS }, **columns))
          .note(existing_rows_note)
    end

    # A provider this group made, unregistered when it ends.
    def provider(name) = name.tap { @providers << name }

    # Puts tracing's switch in +state+.
    def self.switch(state)
      if state == :on
        StaticTracing.enable! unless StaticTracing.enabled?
      elsif StaticTracing.enabled?
        StaticTracing.disable!
      end
    end

    # The Samples around: that puts tracing's switch in the state (label => state) of each loop.
    def self.around(states)
      lambda do |loop, &run|
        switch(states.fetch(loop.label))
        run.call
      end
    end

    # A class with m0() traced by LatencyTracer under +provider+, or
    # without +provider+ a plain one with m0() and with_yield.
    def self.target_class(provider = nil)
      Class.new do
        if provider
          include StaticTracing::LatencyTracer.with(provider:)
          class_eval("def m0; end", __FILE__, __LINE__)
        else
          class_eval("def m0; end\ndef with_yield = yield", __FILE__, __LINE__)
        end
      end
    end

    # Group#table, #time and #work_file, for Ring and Contexts.
    def add_table(key, title, **columns) = table(key, title, **columns)
    def time_loops(loops, around: Samples::NO_STATE) = time(loops, sample_ms: SAMPLE_MS, around:)
    def file(name) = work_file(name)

    private

    # Runs the block while one flight recording (default size) records
    # PATTERNS; returns what it returned, and the ring's counters.
    def record
      status = StaticTracing::Recorder.start(probes: PATTERNS, flight: true)
      result = yield
      [*result, counters(status["ring"])]
    ensure
      StaticTracing::Recorder.stop
    end

    # The ring's own counts, read as the command reads them.
    def counters(path)
      require "static_tracing/cli"
      trace = StaticTracing::CLI::TraceFile.read(path)
      { records: trace.records_total, dropped: trace.dropped, slots: trace.slot_count }
    end

    def per_call_subjects
      fire = fire_tracepoints
      plain = Recorder.target_class.new
      methods = { armed: METHODS, recorded: REC_METHODS, attached: ATTACHED }
                .transform_values { |name| Recorder.target_class(provider(name)).new }
      [*fire_subjects(fire), *method_subjects(plain, methods), *block_subjects(plain)]
    end

    def fire_tracepoints
      { unrecorded: CALLS, recorded: REC_CALLS }.transform_values do |name|
        registered = StaticTracing::Provider.register(provider(name))
        tracepoints = { int: registered.add_tracepoint(:int, Integer),
                        int_string: registered.add_tracepoint(:int_string, Integer, String) }
        registered.load
        tracepoints
      end
    end

    def fire_subjects(fire)
      { int: ["fire(Integer)", [42]], int_string: ["fire(Integer, String)", [42, PATH]] }
        .flat_map do |probe, (label, args)|
          floor = "fire_#{probe}.floor"
          [subject(floor, Calls.floor(label, args)),
           subject("fire_#{probe}.unrecorded", Loop.call(label, fire[:unrecorded][probe], :fire, *args),
                   compared: floor),
           subject("fire_#{probe}.recorded", Loop.call("#{label} recorded", fire[:recorded][probe], :fire, *args),
                   tracer: "recorder", unrecorded: "fire_#{probe}.unrecorded", compared: floor)]
        end
    end

    # Tracing off while recorded: the recorder arms its methods by itself.
    def method_subjects(plain, methods)
      StaticTracing::Provider.load(ATTACHED)
      m0 = ->(label, receiver) { Loop.new(label, "receiver.m0", receiver:) }
      attached = "LatencyTracer m0() attached"
      [subject("latency_tracer.plain", m0.call("m0() plain", plain)),
       subject("latency_tracer.armed", m0.call("LatencyTracer m0() on, no tracer", methods[:armed]),
               state: :on, compared: "latency_tracer.plain"),
       subject("latency_tracer.recorded", m0.call("LatencyTracer m0() recorded (tracing off)", methods[:recorded]),
               tracer: "recorder", unrecorded: "latency_tracer.armed", compared: "latency_tracer.attached"),
       if (reason = Bpftrace.unavailable_reason)
         Subject.new(id: "latency_tracer.attached", label: attached, tracer: TRACER, skipped: reason)
       else
         subject("latency_tracer.attached", m0.call(attached, methods[:attached]),
                 tracer: TRACER, state: :on, compared: "latency_tracer.plain")
       end]
    end

    def block_subjects(plain)
      block = lambda do |label, name|
        Loop.new(label, "StaticTracing.latency(name: :block, provider: :#{provider(name)}) { }")
      end
      [subject("latency_block.yield", Loop.new("bare yield", "receiver.with_yield { }", receiver: plain)),
       subject("latency_block.armed", block.call("StaticTracing.latency { } on, no tracer", BLOCKS),
               state: :on, compared: "latency_block.yield"),
       subject("latency_block.recorded", block.call("StaticTracing.latency { } recorded (tracing off)", REC_BLOCKS),
               tracer: "recorder", unrecorded: "latency_block.armed", compared: "latency_block.yield")]
    end

    # A subject timing +loop+; recorded when its tracer is the recorder.
    def subject(id, loop, tracer: "none", state: :off, **options)
      Subject.new(id:, label: loop.label, tracer:, loop:, state:, recorded: tracer == "recorder", **options)
    end

    # Times the subjects with bpftrace counting the attached method's
    # probe, then records a burst of the idle paths' calls, so that the
    # recording arms, wraps and records every probe the stopped phase
    # then times. Returns the samples, the notes, and the calls recorded.
    def measure(subjects, idle)
      measured = subjects.select(&:loop).partition { |subject| subject.state == :off }.flatten
      states = measured.to_h { |subject| [subject.label, subject.state] }
      program = Bpftrace.count_program(ATTACHED, [:m0])
      Bpftrace.attached(program, pid: Process.pid, log: work_file("recorder-bpftrace.log")) do |tracer|
        samples = time(measured.map(&:loop), sample_ms: SAMPLE_MS, around: Recorder.around(states))
        recorded = measured.select(&:recorded).sum { |subject| subject.loop.calls } + idle.record_burst
        [samples, notes(subjects, tracer), recorded]
      end
    end

    def notes(subjects, tracer)
      attached = StaticTracing.providers[ATTACHED].tracepoints.values
      return [Bpftrace.skipped_note] unless tracer

      calls = subjects.find { |subject| subject.id == "latency_tracer.attached" }.loop.calls
      [Bpftrace.attached_note(attached), Bpftrace.count_note(tracer.finish, { m0: calls })]
    end

    def per_call_table(subjects, samples, notes, recorded, counters)
      table = table(:recorder, "Recording per call, one flight recording running (median of #{rounds} " \
                               "interleaved rounds)",
                    params: { rounds:, sample_ms: SAMPLE_MS, empty_loop_ns_per_iteration: samples.empty_median.round(3),
                              ring_slots: counters[:slots] },
                    measurement: "measurement", tracer: "tracer", ns_per_call: ["ns/call", :d1],
                    spread_ns: ["min..max", :r1], recording_adds_ns: ["recording adds ns", :d1],
                    compared_with: "compared with", ratio: ["ratio", :x])
      by_id = subjects.to_h { |subject| [subject.id, subject] }
      subjects.each { |subject| table.row(per_call_row(subject, by_id, samples)) }
      table.note(format("ns/call are net of an empty loop (%<ns>.1f ns/iteration); recording adds: the " \
                        "recorded call minus the same path unrecorded (fire: no tracer; LatencyTracer and " \
                        "latency: tracing on, no tracer), median of per-round differences; ratios are medians " \
                        "of per-round ratios", ns: samples.empty_median))
      table.note("recorded: StaticTracing::Recorder.start(probes: #{PATTERNS.inspect}, flight: true), " \
                 "#{counters[:slots]} slots of 32 bytes (the flight default), overwritten lap after lap; " \
                 "tracing's switch is off for the recorded rows: the recorder arms what it records by itself")
      notes.each { |note| table.note(note) }
      table.note(recorded_note(recorded, counters))
    end

    def per_call_row(subject, by_id, samples)
      if subject.skipped
        return { id: subject.id, measurement: "#{subject.label}: skipped: #{subject.skipped}",
                 tracer: subject.tracer, skipped: subject.skipped }
      end
      compared = by_id[subject.compared]&.then { |other| other.label unless other.skipped }
      unrecorded = by_id[subject.unrecorded]&.label
      { id: subject.id, measurement: subject.label, tracer: subject.tracer, **samples.timing(subject.label),
        recording_adds_ns: unrecorded && samples.over(subject.label, unrecorded),
        compared_with: compared, ratio: compared && samples.ratio(subject.label, compared) }.compact
    end

    # The same paths as the groups that never record measured them in this
    # run, if they ran (a recording starts only in this group, after them).
    def existing_rows_note
      rows = { "calls fire(Integer) none" => [:calls, "fire_int.unattached"],
               "methods m0() disarmed" => [:methods, "m0.disarmed"], "methods m0() armed" => [:methods, "m0.armed"],
               "blocks latency off" => [:blocks, "block.latency_disarmed"],
               "blocks latency armed" => [:blocks, "block.latency_armed"] }
      found = rows.filter_map do |what, (key, id)|
        ns = @report.table(key)&.find(id)&.fetch(:ns_per_call, nil)
        format("%<what>s %<ns>.1f", what:, ns:) if ns
      end
      return "the groups that never record did not run: no figures of theirs to compare with" if found.empty?

      "the same paths in this run's tables, ns/call: #{found.join(", ")}"
    end

    def recorded_note(recorded, counters)
      lost = counters[:dropped]
      if counters[:records] == recorded && lost.zero?
        return "the ring counted a record for every recorded call (#{recorded}), none dropped"
      end

      "WARNING: the ring counted #{counters[:records]} records (#{lost} dropped) for #{recorded} recorded calls"
    end
  end
end

require_relative "recorder/idle"
require_relative "recorder/ring"
require_relative "recorder/reading"
require_relative "recorder/contexts"
require_relative "recorder/scraping"
