# frozen_string_literal: true

require_relative "usage"

module Bench
  class Recorder
    # The recorder's files read by the command, each run to its end as an
    # operator runs it (`ruby exe/static-tracing ...`), Ruby's start
    # included: `report` of 1,000 and 1,000,000 records beside the
    # command's own start-up in the same rounds, ten such files in one
    # report, Chrome's format; `dump` of another process's 16 MiB flight
    # ring, idle and holding 500,000 records. What reading costs must
    # follow the records read, not the ring's size: a dump's time and
    # memory are held to what it writes.
    class Reading
      EXE = File.join(ROOT, "exe", "static-tracing")
      FLIGHT_PROCESS = File.join(__dir__, "flight_process.rb")
      # A merge takes seconds, the other cases a fifth of one or less:
      # rounds enough for a median, in about a minute in all.
      REPORT_ROUNDS = 5
      MERGE_ROUNDS = 3
      DUMP_ROUNDS = 7
      MERGED_FILES = 10
      FLIGHT_MIB = 16
      FLIGHT_SIZE = "#{FLIGHT_MIB}M".freeze
      FULL_RECORDS = 500_000
      # The small trace the 1,000,000-record report is measured beyond.
      THOUSAND = 1_000
      # A dump's peak memory may be twice the file it writes, plus the
      # command's own when it reads nothing (its start-up's), plus this.
      DUMP_SPARE_BYTES = 8 * 1024 * 1024
      MIB = 1024.0 * 1024
      COUNT = Table::FORMATS[:int]
      CLOCK_NAME = CLOCK == "wall" ? "wall time" : "CPU time"

      def initialize(group)
        @group = group
        @table = group.add_table(:recorder_reading, "Reading the recorder's files: the command run to its end " \
                                                    "(medians of interleaved rounds)",
                                 params: { report_rounds: REPORT_ROUNDS, merge_rounds: MERGE_ROUNDS,
                                           dump_rounds: DUMP_ROUNDS, clock: CLOCK_NAME },
                                 measurement: "measurement", cpu_ms: ["CPU ms", :d1], wall_ms: ["wall ms", :d1],
                                 over_startup_ms: ["beyond start-up ms", :d1], peak_mib: ["peak MiB", :d1],
                                 detail: "detail")
        @warnings = Hash.new { |hash, what| hash[what] = [] }
      end

      # +traces+: trace files of no records, THOUSAND and Ring::CALLS
      # (:empty, :thousand, :million), and the live ring the last was
      # dumped from (:live).
      def reports(traces)
        chrome = @group.file("recorder-report.json")
        cases = report_cases(traces, chrome)
        runs = Bench.interleave(cases.transform_values { |_, args, records| -> { report(args, records) } },
                                rounds: REPORT_ROUNDS)
        startup = runs.fetch("reading.startup")
        extra = { "reading.report_dump" => beyond_thousand(runs, startup),
                  "reading.report_chrome" => { output_bytes: File.size(chrome),
                                               detail: "wrote #{COUNT.call(File.size(chrome))} bytes of JSON" } }
        cases.each do |id, (what, *)|
          @table.row(row(id, what, runs[id], (startup unless id == "reading.startup"), **extra.fetch(id, {})))
        end
      ensure
        FileUtils.rm_f(chrome)
      end

      # MERGED_FILES copies of the Ring::CALLS-record trace in one report.
      def merge(million)
        copies = Array.new(MERGED_FILES) { |index| @group.file("recorder-merge-#{index}.trace") }
        copies.each { |copy| FileUtils.cp(million, copy) }
        records = MERGED_FILES * Ring::CALLS
        runs = Bench.interleave({ merged: -> { report(["report", *copies], records) } }, rounds: MERGE_ROUNDS)
        @table.row(row("reading.report_merged", "report, #{MERGED_FILES} trace files of #{COUNT.call(Ring::CALLS)} " \
                                                "records each, one report", runs[:merged], nil,
                       files: MERGED_FILES, records:))
      ensure
        FileUtils.rm_f(copies)
      end

      # `dump` of two processes' flight rings, one idle, one holding
      # FULL_RECORDS, beside the command's start-up in the same rounds.
      def dumps
        processes = {}
        { idle: 0, full: FULL_RECORDS }.each { |key, records| processes[key] = flight_process(key, records) }
        files = processes.keys.to_h { |key| [key, @group.file("recorder-dump-#{key}.trace")] }
        runs = Bench.interleave(dump_cases(processes, files), rounds: DUMP_ROUNDS)
        @table.row(row("reading.dump_startup", "static-tracing --version, in the dump rounds", runs[:startup], nil))
        processes.each { |key, (_, records)| @table.row(dump_row(key, records, runs, File.size(files[key]))) }
      ensure
        processes.each_value { |child, _| child.stop }
        files&.each_value { |path| FileUtils.rm_f(path) }
      end

      def notes
        @table.note("each command run as `ruby exe/static-tracing ARGS` in a process of its own, its output to a log " \
                    "file; CPU: its user + system time (the children's rusage it added); wall: from spawn to exit; " \
                    "peak: its VmHWM as it exits (bench/recorder/peak.rb, loaded with -r), the largest of the " \
                    "rounds; medians of interleaved rounds after a warm-up (#{REPORT_ROUNDS} for the reports, " \
                    "#{MERGE_ROUNDS} for the merge, #{DUMP_ROUNDS} for the dumps)")
        @table.note("beyond start-up: the median of per-round differences with `static-tracing --version` in the " \
                    "same rounds, in #{CLOCK_NAME} (BENCH_CLOCK=#{CLOCK == "wall" ? "cpu" : "wall"} for the " \
                    "other); for #{COUNT.call(Ring::CALLS)} records, also its cost beyond #{COUNT.call(THOUSAND)} " \
                    "records' in start-ups, the median of per-round ratios")
        @table.note("the trace files: the #{COUNT.call(Ring::CALLS)}-record one is the dump of the ring table's " \
                    "threads row (fire(Integer) of a latency probe); #{COUNT.call(THOUSAND)} records and none: " \
                    "recordings of the same probe; the merge reads #{MERGED_FILES} copies of the first (one " \
                    "process's records #{MERGED_FILES} times over, which the reader does not look at)")
        @table.note("dump: of a process of its own (bench/recorder/flight_process.rb) recording in flight mode into " \
                    "#{FLIGHT_MIB} MiB of slots, writing nothing meanwhile; FILE replaced each round; memory bound: " \
                    "twice the file written + the start-up's peak (median) + #{DUMP_SPARE_BYTES / MIB.to_i} MiB")
        @warnings.each { |what, warnings| @table.note("WARNING: #{what} #{warnings.uniq.join("; ")}") }
      end

      private

      # id => [what, the command's arguments, the records its output must
      # count (nil: --version, and Chrome's JSON, which is not words)].
      def report_cases(traces, chrome)
        thousand = COUNT.call(THOUSAND)
        million = COUNT.call(Ring::CALLS)
        { "reading.startup" => ["static-tracing --version: the command's start-up", ["--version"], nil],
          "reading.report_empty" => ["report, a trace file of no records", ["report", traces[:empty]], 0],
          "reading.report_thousand" => ["report, #{thousand} records (a trace file)", ["report", traces[:thousand]],
                                        THOUSAND],
          "reading.report_dump" => ["report, #{million} records (a trace file)", ["report", traces[:million]],
                                    Ring::CALLS],
          "reading.report_live" => ["report, #{million} records (the live ring it was dumped from)",
                                    ["report", traces[:live]], Ring::CALLS],
          "reading.report_chrome" => ["report --format chrome -o FILE, #{million} records (the trace file)",
                                      ["report", "--format", "chrome", "-o", chrome, traces[:million]], nil] }
      end

      # A run of the command with +args+; a report of +records+ must say
      # it read them all, none lost.
      def report(args, records)
        usage = Usage.of(EXE, *args, log: @group.file("recorder-reading.log"))
        if records && !(usage.output.include?("#{records} records") && usage.output.include?("none lost"))
          @warnings["report #{args.last}"] << "did not say #{records} records, none lost"
        end
        usage
      end

      def dump(pid, path, records)
        usage = Usage.of(EXE, "dump", pid.to_s, "-o", path, log: @group.file("recorder-dump.log"))
        expected = "Wrote #{records} record#{"s" unless records == 1} of process #{pid}"
        @warnings["dump of #{COUNT.call(records)} records"] << "did not say #{expected}" unless
          usage.output.include?(expected)
        usage
      end

      # The start-up, then a dump of each process's ring into its file.
      def dump_cases(processes, files)
        processes.to_h { |key, (child, records)| [key, -> { dump(child.pid, files[key], records) }] }
                 .then { |dumps| { startup: -> { report(["--version"], nil) } }.merge(dumps) }
      end

      # [the process recording, the records it made], once they are made.
      def flight_process(key, records)
        child = Child.new(RbConfig.ruby, "-I", File.join(ROOT, "lib"), FLIGHT_PROCESS, records.to_s, FLIGHT_SIZE,
                          log: @group.file("recorder-flight-#{key}.log"), env: { "STATIC_TRACING_MODE" => "off" })
        child.wait_for(/^\{"ready":true/, timeout: 60)
        [child, records]
      end

      # The report's cost beyond the THOUSAND-record one's, and that
      # against the start-up of the same round.
      def beyond_thousand(runs, startup)
        beyond = runs["reading.report_dump"].map(&:seconds).zip(runs["reading.report_thousand"].map(&:seconds))
                                            .map { |big, small| big - small }
        ratio = Bench.median_ratio(beyond, startup.map(&:seconds))
        { over_thousand_s: Bench.median(beyond), over_thousand_ratio: ratio,
          detail: format("beyond #{COUNT.call(THOUSAND)} records: %<s>.3f s, %<x>.2fx the start-up",
                         s: Bench.median(beyond), x: ratio) }
      end

      def dump_row(key, records, runs, file_bytes)
        limit = (2 * file_bytes) + Bench.median(runs[:startup].map(&:peak_bytes)) + DUMP_SPARE_BYTES
        peak = runs[key].map(&:peak_bytes).max
        held = records.zero? ? "idle (no records)" : "holding #{COUNT.call(records)} records"
        row("reading.dump_#{key}", "dump PID -o FILE, a #{FLIGHT_MIB} MiB flight ring #{held}", runs[key],
            runs[:startup], records:, file_bytes:, memory_limit_bytes: limit, memory_limit_mib: limit / MIB,
                            detail: format("wrote %<bytes>s bytes; peak %<peak>.1f MiB, bound %<limit>.1f",
                                           bytes: COUNT.call(file_bytes), peak: peak / MIB, limit: limit / MIB))
      end

      # The row of +runs+ (Usages); +startup+: those of --version in the
      # same rounds, which its time beyond start-up is measured from.
      def row(id, what, runs, startup, **extra)
        cpu, wall = %i[cpu_s wall_s].map { |field| runs.map(&field) }
        over = startup ? beyond(runs, startup) : {}
        peak = runs.map(&:peak_bytes).max
        { id:, measurement: what, seconds: Bench.median(runs.map(&:seconds)), clock: CLOCK_NAME,
          cpu_s: Bench.median(cpu), wall_s: Bench.median(wall), cpu_ms: Bench.median(cpu) * 1e3,
          wall_ms: Bench.median(wall) * 1e3, **over,
          peak_bytes: peak, peak_mib: peak / MIB, **samples(runs), **extra,
          detail: detail(cpu, wall, extra[:detail]) }
      end

      # The median of per-round differences with the start-up's run.
      def beyond(runs, startup)
        seconds = Bench.median(runs.zip(startup).map { |run, base| run.seconds - base.seconds })
        { over_startup_s: seconds, over_startup_ms: seconds * 1e3 }
      end

      def detail(cpu, wall, more)
        [format("CPU %<cpu>s s, wall %<wall>s s", cpu: range(cpu), wall: range(wall)), more].compact.join("; ")
      end

      def samples(runs)
        { cpu_samples_s: runs.map { _1.cpu_s.round(4) }, wall_samples_s: runs.map { _1.wall_s.round(4) },
          peak_samples_mib: runs.map { (_1.peak_bytes / MIB).round(1) } }
      end

      def range(values) = values.minmax.map { format("%.3f", _1) }.join("..")
    end
  end
end
