# frozen_string_literal: true

module Bench
  # Attach mode: what a traced method costs while no tracer is attached
  # (nothing is wrapped: it should cost what the plain method does), how
  # soon a method is wrapped once a tracer attaches (and unwrapped once it
  # leaves), what the watcher's poller costs with thousands of idle probes,
  # and what declaring probes one by one into a loaded provider costs now
  # that a burst of declarations is loaded once.
  class Attach < Group
    ROUNDS = 9
    SAMPLE_MS = 25
    WATCHED = 10_000
    WATCH_SECONDS = 3.0
    DECLARED = 1_000
    # The attach_delay the wrap latency is measured with: short, so that
    # TRANSITIONS take a second or two, and long against a poll.
    WRAP_DELAY = 0.01
    TRANSITIONS = 60
    POLL = 0.0002
    # Threads calling the traced method while it is wrapped and unwrapped.
    CALLERS = 4

    # Plain and attach-mode traced classes with the same method.
    class Plain
      def call(value) = value
    end

    class Traced
      include StaticTracing::LatencyTracer.with(provider: :bench_attach)

      def call(value) = value
    end

    # Its own provider: its semaphore is written by hand.
    class Rewrapped
      include StaticTracing::LatencyTracer.with(provider: :bench_attach_wrap)

      def call(value) = value
    end

    def run
      StaticTracing::Configuration.mode = StaticTracing::Configuration::Modes::ATTACH
      calls_table
      wrap_table
      watcher_table
      declaration_table
    ensure
      StaticTracing::Configuration.mode = StaticTracing::Configuration::Modes::OFF
      %i[bench_attach bench_attach_wrap bench_attach_watched].each { |name| StaticTracing.providers[name]&.unregister }
    end

    private

    def calls_table
      loops = { plain: Loop.call("plain", Plain.new, "call", 1),
                traced: Loop.call("LatencyTracer, attach mode, no tracer", Traced.new, "call", 1) }
      samples = time(loops.values, sample_ms: SAMPLE_MS)
      table = table(:attach_calls, "Attach mode per call, no tracer attached (median of #{rounds} interleaved rounds)",
                    path: "path", ns_per_call: ["ns/call", :d1], ratio_to_plain: ["ratio to plain", :x])
      loops.each do |key, loop|
        table.row(id: "attach.#{key}", path: loop.label, **samples.timing(loop.label),
                  ratio_to_plain: samples.ratio(loop.label, "plain"))
      end
      table.note("nothing is wrapped until a tracer attaches, so both rows run the same method; " \
                 "ns/call net of an empty loop")
    end

    # How long after a tracer raises a probe's semaphore its method is
    # wrapped, and after the last one lowers it unwrapped: within
    # attach_delay, docs/modes.md says. The semaphore is written as the
    # kernel writes it (through /proc/self/mem), and the clock starts
    # there, not when a tracer would say it attached. In a process doing
    # nothing else, and with CALLERS threads calling the method that pass
    # the GVL between calls, as a server's threads waiting on I/O do.
    def wrap_table
      previous = StaticTracing::Configuration.attach_delay
      StaticTracing::Configuration.attach_delay = WRAP_DELAY
      table = table(:attach_wrap, "Attach mode: wrapped after the semaphore rises, unwrapped after it falls " \
                                  "(#{TRANSITIONS} transitions, attach_delay #{(WRAP_DELAY * 1000).round} ms)",
                    path: "process", median_ms: ["median ms", :d1], p99_ms: ["99th pct ms", :d1],
                    slowest_ms: ["slowest ms", :d1], ratio_to_delay: ["median / attach_delay", :x])
      semaphore = rewrapped_semaphore
      { idle: ["doing nothing else", 0], callers: ["#{CALLERS} threads calling it, passing the GVL", CALLERS] }
        .each do |key, (path, callers)|
          latencies = with_callers(callers) { wrap_latencies(semaphore) }.sort
          median = Bench.median(latencies)
          table.row(id: "attach.wrap.#{key}", path:, median_ms: median * 1000,
                    p99_ms: latencies[((latencies.size - 1) * 0.99).round] * 1000,
                    slowest_ms: latencies.last * 1000, ratio_to_delay: median / WRAP_DELAY)
        end
      table.note("target: the median within attach_delay; a transition waits for the poller's next scan " \
                 "(every attach_delay / 2), then for the watcher's thread to get the GVL")
    ensure
      semaphore&.close
      StaticTracing::Configuration.attach_delay = previous
    end

    # Rewrapped#call's semaphore, in this process's memory, once its stub is
    # loaded (attach mode loads it within attach_delay of the declaration).
    def rewrapped_semaphore
      require "static_tracing/cli"
      address = Bench.wait_until("bench_attach_wrap is loaded", timeout: 10) do
        stub = StaticTracing::CLI::Target.new(Process.pid).stubs.find { |each| each.provider == "bench_attach_wrap" }
        stub&.probes&.find { |each| each.name == "call" }&.then { |probe| stub.bias + probe.semaphore }
      end
      Semaphore.new(File.open("/proc/self/mem", "r+b"), address)
    end

    # A probe's semaphore (a 2-byte counter) and the memory it is written through.
    Semaphore = Struct.new(:memory, :address) do
      def set(value) = memory.pwrite([value].pack("S<"), address)
      def close = memory.close
    end

    # The seconds each of TRANSITIONS took: raised, then lowered, in turn.
    # A tracer attaches at any moment of the poller's period, not just
    # after a scan (when the previous transition was seen): each write
    # waits a random part of the period first.
    def wrap_latencies(semaphore)
      random = Random.new(TRANSITIONS)
      Array.new(TRANSITIONS) do |index|
        wanted = index.even?
        sleep(random.rand * WRAP_DELAY / 2)
        semaphore.set(wanted ? 1 : 0)
        started = Bench.now_ns
        Bench.wait_until("Rewrapped#call is #{wanted ? "" : "un"}wrapped", timeout: 5, interval: POLL) do
          wrapped? == wanted
        end
        (Bench.now_ns - started) / 1e9
      end
    ensure
      semaphore.set(0)
    end

    def wrapped? = Rewrapped.instance_method(:call).owner != Rewrapped

    def with_callers(count)
      stop = false
      threads = Array.new(count) do
        Thread.new do
          object = Rewrapped.new
          until stop
            object.call(1)
            Thread.pass
          end
        end
      end
      yield
    ensure
      stop = true
      threads&.each(&:join)
    end

    # The poller's own CPU time (schedstat: nanoseconds on CPU) over a
    # few seconds, with WATCHED probes nobody attaches to.
    def watcher_table
      tracepoints = watched_tracepoints
      cpu_ns, scans, seconds = poller_cost(WATCH_SECONDS)
      table(:attach_watcher, "Attach watcher, #{WATCHED} watched probes, no tracer, " \
                             "#{StaticTracing::Configuration.attach_delay} s bound",
            seconds: ["seconds", :d1], scans_per_second: ["scans/s", :d1], us_per_scan: ["us/scan", :d1],
            cpu_percent: ["% of one core", :d3])
        .row(id: "attach.watcher", seconds:, scans_per_second: scans / seconds,
             us_per_scan: scans.zero? ? nil : cpu_ns / scans / 1_000.0, cpu_percent: 100.0 * cpu_ns / (seconds * 1e9))
        .note("the poller thread's CPU time from /proc/self/task/TID/schedstat; target < 0.2% of one core")
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

    def poller_cost(seconds)
      tid, scans_before = StaticTracing::Native.attach_poller
      cpu_before = cpu_ns(tid)
      elapsed = Bench.time_ns { sleep seconds } / 1e9
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
    def declaration_table
      names = Array.new(DECLARED) { |index| :"probe_#{index}" }
      paths = { off: ["into an unloaded provider, then load", false, false],
                loaded: ["into a loaded provider, then load (batched)", true, false],
                each: ["into a loaded provider, a load after each (unbatched)", true, true] }
      cases = paths.transform_values { |_, loaded, load_each| -> { declare(names, loaded:, load_each:) } }
      results = Bench.interleave(cases, rounds: [rounds / 3, 3].max)
      table = table(:attach_declare, "Declaring #{DECLARED} probes one by one",
                    path: "path", ms: ["ms", :d2], ratio_to_off: ["ratio to unloaded", :x])
      paths.each do |key, (path)|
        table.row(id: "attach.declare_#{key}", path:, ms: Bench.median(results[key]) / 1e6,
                  ratio_to_off: Bench.median_ratio(results[key], results[:off]))
      end
      table.note("target: batched <= 2x unloaded")
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
