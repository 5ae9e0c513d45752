# frozen_string_literal: true

require "tmpdir"

module Bench
  # How long a thread calling a traced method waits while a large ring
  # starts, is snapshotted and stops: the recorder makes the ring's file
  # and copies snapshots with the GVL released, so no thread should wait
  # on it longer than on the machine's own noise, whatever the size. In a
  # process of its own (bench/recorder/stall_process.rb): the stalls are
  # its threads', and the rings it makes are never this process's.
  class RecorderStall < Group
    ROUNDS = 3
    # The recorder's work runs on one CPU while the calling thread runs on
    # another, as on any host with two: on one CPU the calls would wait
    # for the CPU, which no release of the GVL can give them.
    ONE_CPU = false
    SIZE = "512M"
    PROCESS = File.join(__dir__, "recorder", "stall_process.rb")
    MIB = 1024 * 1024
    # Room wanted on top of the ring and a snapshot as large: the files'
    # headers, the process's state file, and some to spare.
    SPARE_BYTES = 64 * MIB
    # What each step of a round is, in the order the rounds take them.
    STEPS = {
      "baseline" => "nothing else (the main thread asleep): the machine's noise",
      "start" => "Recorder.start(flight: true, size: #{SIZE.inspect}, probes:, dump_when:)",
      "fill" => "recording, until the calls have filled the ring",
      "dump" => "Recorder.dump(path) of the full ring",
      "trigger" => "a trigger's snapshot of the full ring, from the slow call's return until it is counted",
      "stop" => "Recorder.stop (the ring unmapped and removed)"
    }.freeze
    # The steps held to the Targets table's bound, and what they are there.
    TARGETS = { "start" => "a #{SIZE} ring starts", "dump" => "Recorder.dump copies a full #{SIZE} ring",
                "trigger" => "a trigger's snapshot copies a full #{SIZE} ring" }.freeze
    # Steps the Targets table shows without a bound.
    INFORMATION = { "stop" => "Recorder.stop removes a #{SIZE} ring" }.freeze

    def run
      table = table(:recorder_stall, "A thread calling a recorded method while a #{SIZE} ring starts, is " \
                                     "snapshotted and stops (#{rounds} rounds, one process)",
                    params: { rounds:, size: SIZE }, measurement: "step", gap_ms: ["longest stall ms", :d2],
                    max_gap_ms: ["max", :d2], not_cpu_ms: ["of it not waiting for a CPU", :d2],
                    max_not_cpu_ms: ["max", :d2], step_ms: ["step ms", :d1], step_spread_ms: ["min..max", :r1],
                    write_ms: ["copy ms", :d1])
      if (reason = skip_reason)
        return STEPS.each do |step, what|
          table.row(id: "stall.#{step}", measurement: "#{what}: skipped: #{reason}", skipped: reason)
        end
      end

      Dir.mktmpdir("static-tracing-stall") { |dir| measure(table, dir) }
    end

    private

    def skip_reason
      return "probes cannot be recorded on #{RUBY_PLATFORM}" unless StaticTracing.supported?

      needed = (2 * size_bytes) + SPARE_BYTES
      free = [["free space in #{Dir.tmpdir}", free_bytes(Dir.tmpdir), needed],
              ["free space in #{ring_dir}", free_bytes(ring_dir), size_bytes + SPARE_BYTES],
              ["available memory", available_memory, needed]]
      short = free.find { |_, bytes, wanted| bytes.nil? || bytes < wanted } or return

      "#{short[0]} is #{short[1] ? "#{short[1] / MIB} MiB" : "unknown"}, #{short[2] / MIB} MiB are needed for " \
        "the ring and a snapshot (TMPDIR chooses the snapshots' directory, STATIC_TRACING_RING_DIR the ring's)"
    end

    # Where the process's ring goes, when the temporary directory is not
    # in memory (docs/recording.md, "Where rings live").
    def ring_dir = ENV.fetch("STATIC_TRACING_RING_DIR", "/dev/shm")

    def size_bytes = StaticTracing::RecordingOptions.size(SIZE)

    def free_bytes(dir)
      out, status = Open3.capture2("df", "-Pk", dir)
      Integer(out.lines.last.split[3]) * 1024 if status.success?
    end

    # The snapshot is copied into memory before it is written.
    def available_memory
      File.read("/proc/meminfo")[/^MemAvailable:\s+(\d+) kB/, 1]&.then { |kib| Integer(kib) * 1024 }
    end

    def measure(table, dir)
      output = Bench.run_command(RbConfig.ruby, "-I", File.join(ROOT, "lib"), PROCESS, rounds.to_s, SIZE, dir,
                                 env: { "STATIC_TRACING_DIR" => dir, "STATIC_TRACING_MODE" => "off" },
                                 log: work_file("recorder-stall.log"), timeout: 120 + (60 * rounds))
      result = JSON.parse(output.lines.grep(/\A\{/).last, symbolize_names: true)
      steps = result[:steps].group_by { |step| step[:step] }
      STEPS.each { |step, what| table.row(row(step, what, steps.fetch(step), result)) }
      notes(table, result, filesystem(result[:ring_dir]))
    end

    def row(step, what, rounds, result)
      gaps = longest(rounds, :longest_gap_ms, result)
      not_cpu = longest(rounds, :longest_not_cpu_wait_ms, result)
      durations = rounds.map { |round| round[:ms] }
      writes = result[:writes_ms][step.to_sym]
      { id: "stall.#{step}", measurement: what, gap_ms: Bench.median(gaps), max_gap_ms: gaps.max,
        not_cpu_ms: Bench.median(not_cpu), max_not_cpu_ms: not_cpu.max, step_ms: Bench.median(durations),
        step_spread_ms: durations.minmax, write_ms: writes && Bench.median(writes), gap_samples_ms: gaps,
        not_cpu_samples_ms: not_cpu, step_samples_ms: durations, write_samples_ms: writes,
        gc_runs: rounds.sum { |round| round[:gc_runs] } }
    end

    # A round with no gap over the floor counts as the floor.
    def longest(rounds, field, result) = rounds.map { |round| round[field] || floor_ms(result) }

    def floor_ms(result) = result[:gap_floor_ns] / 1e6

    def notes(table, result, filesystem)
      table.note(format("longest stall: the longest gap between two consecutive calls of a recorded LatencyTracer " \
                        "method (a call and a clock read, about 0.1 us, in a tight loop on its own thread) that " \
                        "overlaps the step, median and max of the rounds; %<floor>.2f: no gap over that",
                        floor: floor_ms(result)))
      table.note("of it not waiting for a CPU: the longest part of such a gap the thread did not spend runnable " \
                 "but off its CPU (its schedstat run delay, read after each gap): the GVL held by another thread " \
                 "(which a busy machine may also have preempted), a wait in the kernel, or time the thread's CPU " \
                 "was not its own unbeknown to the kernel (a virtual machine's host); compare with the first row")
      count = Table::FORMATS[:int]
      table.note("the ring: #{result[:ring_bytes] / MIB} MiB of slots (#{count.call(result[:slots])}), in " \
                 "#{filesystem}; a dump of it full: #{count.call(result[:dump_bytes])} bytes; " \
                 "#{count.call(result[:calls])} calls made in all (recording or not)")
      table.note("step ms: as the main thread saw it, with its wait for the GVL after the recorder's work (up to " \
                 "a 100 ms time slice of the calling thread) and, for the trigger, the watcher's; copy ms: " \
                 "Snapshots.write alone")
      table.note("WARNING: #{result[:gaps_dropped]} gaps not kept (too many): stalls may be missing") if
        result[:gaps_dropped].positive?
      gc_runs = table.rows.sum { |row| row[:gc_runs] }
      table.note("#{gc_runs} GC runs during the steps") if gc_runs.positive?
    end

    def filesystem(dir)
      type, status = Open3.capture2("stat", "-f", "-c", "%T", dir)
      status.success? ? "#{type.strip} (#{dir})" : dir
    end
  end
end
