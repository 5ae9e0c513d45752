# frozen_string_literal: true

require "static_tracing/trace_reader_library"

module Bench
  class Recorder
    # The ring: threads recording into one at once, every record read back
    # by another process, and what a ring of each default size takes; the
    # files it makes, read by the command (Reading).
    class Ring
      PROVIDER = :bench_recorder_ring
      PATTERNS = ["#{PROVIDER}:*".freeze].freeze
      THREADS = 4
      CALLS = 1_000_000
      # 2^20 slots: room for CALLS one-slot records, without flight.
      SIZE = "32M"
      # The smallest ring: room for the small traces' records.
      SMALL_SIZE = "64K"
      # Each thread passes the GVL on this often, so that the threads'
      # records interleave in the ring.
      PASS_EVERY = 1_000
      READ_BACK = File.join(__dir__, "read_back.rb")
      WORKER_MEMORY = File.join(__dir__, "worker_memory.rb")
      # What snapshots and dumps may leave behind in a worker's resident
      # set, at most (docs/performance.md): their copies are mappings of
      # their own, handed back once written.
      LASTING_BOUND = 2 * 1024 * 1024
      MIB = 1024.0 * 1024
      COUNT = Table::FORMATS[:int]

      def initialize(group)
        @group = group
        registered = StaticTracing::Provider.register(group.provider(PROVIDER))
        @tracepoint = registered.add_tracepoint(:latency, Integer, latency: 0)
        registered.load
      end

      def run
        table = @group.add_table(:recorder_ring, "The ring: threads, memory",
                                 params: { threads: THREADS, calls: CALLS, size: SIZE },
                                 measurement: "measurement", value: ["value", :auto], unit: "unit",
                                 detail: "detail")
        reading = Reading.new(@group)
        traces = { empty: small_trace(0), thousand: small_trace(Reading::THOUSAND),
                   million: @group.file("recorder-report.trace") }
        status = StaticTracing::Recorder.start(probes: PATTERNS, flight: false, size: SIZE)
        begin
          table.row(threads_row(status["ring"]))
          dump(traces[:million])
          reading.reports(traces.merge(live: status["ring"]))
        ensure
          StaticTracing::Recorder.stop
        end
        [false, true].each { |flight| table.row(memory_row(flight)) }
        worker_memory_rows.each { |row| table.row(row) }
        notes(table)
        read(reading, traces[:million])
      ensure
        FileUtils.rm_f(traces.values) if traces
      end

      private

      def notes(table)
        table.note("Tracepoint#fire holds the GVL from start to end: the threads take turns at GVL hand-offs " \
                   "(each passes it every #{PASS_EVERY} calls), so their records interleave in the ring, but no " \
                   "two are written at the same instant; records read back by a separate Ruby process " \
                   "(TraceFile.read, as static-tracing reads)")
        table.note("memory: the ring file is allocated whole when recording starts (fallocate); resident: the " \
                   "mapping's Rss in /proc/self/smaps after one lap of one-slot records")
      end

      # THREADS threads fire CALLS values (0 to CALLS - 1, each once) into
      # a ring with room for them all; another process reads it back.
      def threads_row(path)
        per_thread = CALLS / THREADS
        wall_ns = Bench.time_ns do
          Array.new(THREADS) { |thread| Thread.new { fire_values(thread * per_thread, per_thread) } }.each(&:join)
        end
        counts = read_back(path)
        exact = counts[:records] == CALLS && counts.values_at(:lost, :missing, :repeated, :outside).all?(&:zero?)
        { id: "ring.threads", measurement: "#{THREADS} threads x #{COUNT.call(per_thread)} fire(Integer) into a " \
                                           "#{SIZE} ring (not flight), read back",
          value: counts[:records], unit: "records of #{COUNT.call(CALLS)} calls", calls: CALLS, exact:,
          wall_ns_per_record: wall_ns.fdiv(CALLS), **counts,
          detail: format("%<verdict>s: lost %<lost>d, dropped %<dropped>d, values missing %<missing>d, repeated " \
                         "%<repeated>d; %<threads>d threads, %<switches>d thread switches; %<ns>.0f ns a record (wall)",
                         verdict: exact ? "exact" : "NOT EXACT", ns: wall_ns.fdiv(CALLS), **counts) }
      end

      def fire_values(first, count)
        tracepoint = @tracepoint
        count.times do |index|
          tracepoint.fire(first + index)
          Thread.pass if (index % PASS_EVERY).zero?
        end
      end

      def read_back(path)
        output = Bench.run_command(RbConfig.ruby, "-I", File.join(ROOT, "lib"), READ_BACK, path, CALLS.to_s,
                                   log: @group.file("recorder-read-back.log"), timeout: 300)
        JSON.parse(output.lines.last, symbolize_names: true)
      end

      # The reading rows that need no recording of this process's.
      def read(reading, million)
        reading.merge(million)
        reading.dumps
        reading.notes
      end

      # A trace file of +records+ one-Integer records of the same probe as
      # the threads', from a recording of its own.
      def small_trace(records)
        path = @group.file("recorder-report-#{records}.trace")
        StaticTracing::Recorder.start(probes: PATTERNS, flight: false, size: SMALL_SIZE)
        records.times { |value| @tracepoint.fire(value) }
        dump(path)
      ensure
        StaticTracing::Recorder.stop
      end

      # What the recording holds now, as a trace file at +path+.
      def dump(path)
        FileUtils.rm_f(path)
        StaticTracing::Recorder.dump(path)
        path
      end

      # A recording of the default size (flight or not): the file, what is
      # allocated for it, and what is resident after one lap of records.
      def memory_row(flight)
        status = nil
        start_ns = Bench.time_ns { status = StaticTracing::Recorder.start(probes: PATTERNS, flight:) }
        path = status["ring"]
        file_bytes = File.size(path)
        allocated = File.stat(path).blocks * 512
        Loop.call("fire", @tracepoint, :fire, 1).time_ns(status["size"] / StaticTracing.trace_reader::SLOT_SIZE)
        resident = resident_bytes(path)
        StaticTracing::Recorder.stop
        { id: "ring.memory.#{flight ? "flight" : "default"}",
          measurement: "ring file, default size#{flight ? " in flight mode" : ""} " \
                       "(#{status["size"] / 1024 / 1024} MiB of slots)",
          value: file_bytes / MIB, unit: "MiB", file_bytes:, allocated_bytes: allocated, resident_bytes: resident,
          start_ms: start_ns / 1e6, filesystem: filesystem(path),
          detail: format("%<allocated>.2f MiB allocated, %<resident>.2f MiB resident after a lap; Recorder.start " \
                         "%<ms>.1f ms; on %<fs>s", allocated: allocated / MIB, resident: resident / MIB,
                                                   ms: start_ns / 1e6, fs: filesystem(path)) }
      end

      # What a worker's resident set holds because of recording, measured
      # in a process of its own (bench/recorder/worker_memory.rb): the
      # ring's pages after a lap, then what trigger snapshots and whole
      # dumps leave behind (anonymous pages) and take at their peak.
      def worker_memory_rows
        dir = @group.file("recorder-worker-memory")
        FileUtils.rm_rf(dir)
        FileUtils.mkdir_p(dir)
        output = Bench.run_command(RbConfig.ruby, "-I", File.join(ROOT, "lib"), WORKER_MEMORY, dir,
                                   log: @group.file("recorder-worker-memory.log"), timeout: 300)
        figures = JSON.parse(output.lines.last)
        [ring_pages_row(figures), lasting_row(figures, "snapshots", "lap", "20 trigger snapshots (default window)",
                                              figures["snapshot_bytes"]),
         lasting_row(figures, "whole", "snapshots", "5 dumps of the whole ring (Recorder.dump)",
                     figures["whole_bytes"])]
      ensure
        FileUtils.rm_rf(dir) if dir
      end

      def ring_pages_row(figures)
        before, lap = figures.values_at("before", "lap")
        grown = lap["VmRSS"] - before["VmRSS"]
        { id: "ring.worker.ring", measurement: "worker's resident set: a 16M flight ring after a lap",
          value: grown / MIB, unit: "MiB", grown_bytes: grown, shared_bytes: lap["RssShmem"],
          anon_grown_bytes: lap["RssAnon"] - before["RssAnon"],
          detail: format("%<shared>.1f MiB of it the ring's shared pages; anonymous pages +%<anon>.2f MiB",
                         shared: lap["RssShmem"] / MIB, anon: (lap["RssAnon"] - before["RssAnon"]) / MIB) }
      end

      def lasting_row(figures, key, since, what, file_bytes)
        after, before = figures.values_at(key, since)
        grown = after["RssAnon"] - before["RssAnon"]
        within = grown <= LASTING_BOUND
        { id: "ring.worker.#{key}", measurement: "worker's resident set after #{what}",
          value: grown / MIB, unit: "MiB left", grown_bytes: grown, bound_bytes: LASTING_BOUND, within:,
          peak_bytes: after["VmHWM"], file_bytes:,
          detail: format("%<verdict>s %<bound>.0f MiB; each file %<file>.2f MiB; peak resident %<peak>.1f MiB",
                         verdict: within ? "within" : "NOT WITHIN", bound: LASTING_BOUND / MIB,
                         file: file_bytes / MIB, peak: after["VmHWM"] / MIB) }
      end

      # The Rss of this process's mappings of +path+.
      def resident_bytes(path)
        inside = false
        File.foreach("/proc/self/smaps").sum do |line|
          if line.match?(/\A\h+-\h+ /)
            inside = line.rstrip.end_with?(" #{path}")
            0
          else
            inside && line.start_with?("Rss:") ? Integer(line[/\d+/]) * 1024 : 0
          end
        end
      end

      def filesystem(path)
        dir = File.dirname(path)
        type, status = Open3.capture2("stat", "-f", "-c", "%T", dir)
        status.success? ? "#{type.strip} (#{dir})" : dir
      end
    end
  end
end
