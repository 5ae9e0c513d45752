# frozen_string_literal: true

module Bench
  # Attach mode: what a traced method costs while no tracer is attached
  # (nothing is wrapped: it should cost what the plain method does), what
  # the watcher's poller costs with thousands of idle probes, and what
  # declaring probes one by one into a loaded provider costs now that a
  # burst of declarations is loaded once.
  class Attach
    KEY = :attach
    ROUNDS = 9
    SAMPLE_MS = 25
    WATCHED = 10_000
    WATCH_SECONDS = 3.0
    DECLARED = 1_000

    # Plain and attach-mode traced classes with the same method.
    class Plain
      def call(value) = value
    end

    class Traced
      include StaticTracing::LatencyTracer.with(provider: :bench_attach)

      def call(value) = value
    end

    def initialize(rounds: ROUNDS)
      @rounds = rounds
    end

    def run
      StaticTracing::Configuration.mode = StaticTracing::Configuration::Modes::ATTACH
      [calls_section, watcher_section, declaration_section]
    ensure
      StaticTracing::Configuration.mode = StaticTracing::Configuration::Modes::OFF
      %i[bench_attach bench_attach_watched].each { |name| StaticTracing.providers[name]&.unregister }
    end

    private

    def calls_section
      loops = { plain: CallLoop.new("plain", Plain.new, "call", 1),
                traced: CallLoop.new("LatencyTracer, attach mode, no tracer", Traced.new, "call", 1),
                empty: CodeLoop.new("empty") }
      iterations = Bench.calibrate(loops.values, target_ms: SAMPLE_MS)
      results = Bench.interleave(loops.transform_values { |loop| -> { loop.time_ns(iterations) } }, rounds: @rounds)
      empty = Bench.median(results[:empty])
      net = results.transform_values { |series| series.map { |ns| ns - empty } }
      section = calls_table
      %i[plain traced].each do |key|
        section.row(id: "attach.#{key}", path: loops[key].label, ns_per_call: Bench.median(net[key]) / iterations,
                    ratio_to_plain: Bench.median_ratio(net[key], net[:plain]))
      end
      section
    end

    def calls_table
      Section.new(:attach_calls, "Attach mode per call, no tracer attached (median of #{@rounds} interleaved rounds)")
             .column(:path, "path").column(:ns_per_call, "ns/call", Format.decimal(1))
             .column(:ratio_to_plain, "ratio to plain", Format.ratio)
             .note("nothing is wrapped until a tracer attaches, so both rows run the same method; " \
                   "ns/call net of an empty loop")
    end

    # The poller's own CPU time (schedstat: nanoseconds on CPU) over a
    # few seconds, with WATCHED probes nobody attaches to.
    def watcher_section
      tracepoints = watched_tracepoints
      cpu_ns, scans, seconds = poller_cost(WATCH_SECONDS)
      watcher_table.tap do |section|
        section.row(id: "attach.watcher", seconds:, scans_per_second: scans / seconds,
                    us_per_scan: scans.zero? ? nil : cpu_ns / scans / 1_000.0,
                    cpu_percent: 100.0 * cpu_ns / (seconds * 1e9))
      end
    ensure
      tracepoints&.each { |tracepoint| StaticTracing::Watcher.forget(tracepoint) }
    end

    def watched_tracepoints
      provider = StaticTracing::Provider.register(:bench_attach_watched)
      listener = Object.new.tap { |object| object.define_singleton_method(:attach_changed) { |_| nil } }
      tracepoints = Array.new(WATCHED) { |index| provider.add_tracepoint(:"idle_#{index}", Integer) }
      provider.load
      tracepoints.each { |tracepoint| StaticTracing::Watcher.watch(tracepoint, listener) }
    end

    def watcher_table
      Section.new(:attach_watcher, "Attach watcher, #{WATCHED} watched probes, no tracer, " \
                                   "#{StaticTracing::Configuration.attach_delay} s bound")
             .column(:seconds, "seconds", Format.decimal(1)).column(:scans_per_second, "scans/s", Format.decimal(1))
             .column(:us_per_scan, "us/scan", Format.decimal(1))
             .column(:cpu_percent, "% of one core", Format.decimal(3))
             .note("the poller thread's CPU time from /proc/self/task/TID/schedstat; target < 0.2% of one core")
    end

    def poller_cost(seconds)
      tid, scans_before = StaticTracing::Native.attach_poller
      cpu_before = cpu_ns(tid)
      started = Bench.now_ns
      sleep seconds
      elapsed = (Bench.now_ns - started) / 1e9
      _, scans_after = StaticTracing::Native.attach_poller
      [cpu_ns(tid) - cpu_before, scans_after - scans_before, elapsed]
    end

    def cpu_ns(tid)
      Integer(File.read("/proc/self/task/#{tid}/schedstat").split.first)
    end

    # DECLARED probes declared one at a time into a loaded provider, made
    # attachable by one Provider#load; against declaring them into an
    # unloaded provider and loading it, and against a load after every
    # declaration (what each declaration cost before loads were batched).
    def declaration_section
      names = Array.new(DECLARED) { |index| :"probe_#{index}" }
      cases = {
        off: -> { declare(names, loaded: false, load_each: false) },
        loaded: -> { declare(names, loaded: true, load_each: false) },
        each: -> { declare(names, loaded: true, load_each: true) }
      }
      results = Bench.interleave(cases, rounds: [@rounds / 3, 3].max)
      section = Section.new(:attach_declare, "Declaring #{DECLARED} probes one by one")
                       .column(:path, "path").column(:ms, "ms", Format.decimal(2))
                       .column(:ratio_to_off, "ratio to unloaded", Format.ratio)
      { off: "into an unloaded provider, then load", loaded: "into a loaded provider, then load (batched)",
        each: "into a loaded provider, a load after each (unbatched)" }.each do |key, path|
        section.row(id: "attach.declare_#{key}", path:, ms: Bench.median(results[key]) / 1e6,
                    ratio_to_off: Bench.median_ratio(results[key], results[:off]))
      end
      section.note("target: batched <= 2x unloaded")
    end

    def declare(names, loaded:, load_each:)
      provider = StaticTracing::Provider.register(:bench_attach_declared)
      provider.add_tracepoint(:first).load if loaded
      Bench.call_time_ns do
        names.each do |name|
          provider.add_tracepoint(name, Integer)
          provider.load if load_each
        end
        provider.load
      end
    ensure
      provider&.unregister
    end
  end
end
