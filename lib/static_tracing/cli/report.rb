# frozen_string_literal: true

require "time"
require_relative "../durations"
require_relative "../recording_options"
require_relative "output_file"
require_relative "trace_file"

module StaticTracing
  module CLI
    # `static-tracing report FILE...`: what trace files (or live rings)
    # recorded, as one report: per probe, calls and latency percentiles
    # with a histogram (text, json); a timeline for trace viewers (chrome,
    # speedscope); a profile (pprof); or the stacks of stack probes, folded
    # for flamegraph.pl or drawn as a flame graph (svg).
    class Report < Command
      # Not in `static-tracing --help` while the recorder that writes the
      # files is not released (docs/recording.md); `report --help` works.
      command "report",
              arguments: "FILE... [--format FORMAT] [--probe PATTERN]... [--since TIME] [--until TIME] " \
                         "[--trace-id HEX] [--slowest N] [-o OUTPUT]",
              summary: "Summarize recorded trace files: latency percentiles, a timeline, or stacks to fold",
              description: <<~TEXT.chomp
                Reads trace files (written by static-tracing record or dump) or a recorder's ring files
                (<pid>-<pidns>.ring in /dev/shm/static_tracing-UID by default, read as they are, while the
                process writes them, or after it was killed), and makes one report of them all. Needs no tracer and no privilege but reading
                the files. Formats, and what opens them:
                  text        what was read (processes, records, time span, records lost and why), then per
                              probe its calls and, for a latency probe, p50/p90/p99/max and a histogram in
                              bpftrace's power-of-two buckets (microseconds, as static-tracing latency prints)
                  json        the text report's figures as JSON (durations in ns), for scripts and CI checks
                  chrome      Chrome trace-event JSON, for Perfetto UI, chrome://tracing or speedscope: a
                              complete event per call of a latency probe, an instant event per other record,
                              the stacks of stack probes as a timeline of their frames, and thread names
                  speedscope  speedscope's format (speedscope.app): per thread, its latency probes' calls
                              as a timeline and its stacks as samples, one per record
                  pprof       a gzipped pprof profile, for go tool pprof, Pyroscope or Parca: stacks and
                              latency probes' calls as samples of calls (count) and latency (ns), labelled
                              probe, thread and pid
                  folded      the stacks of stack probes (StackTracer's), one line per distinct stack with
                              its count, for flamegraph.pl or inferno
                  svg         a flame graph of those stacks, drawn here: widths count calls (records), not time
                --probe, --since, --until and --trace-id narrow every format to some probes, a window of
                time and one request's W3C trace; the records lost stay those of the whole files. text and
                json list each latency probe's slowest calls (--slowest N, 5 by default) with their
                process, thread and trace context; chrome gives each record's trace_id and span_id in its
                args, pprof as labels.
              TEXT

      FORMATS = %w[text json chrome speedscope pprof folded svg].freeze
      # Other tools' names of the same formats (rbspy's, inferno's).
      FORMAT_ALIASES = { "flamegraph" => "svg", "collapsed" => "folded" }.freeze

      private

      def define_options(parser)
        @format = FORMATS.first
        @output = nil
        @patterns = []
        @window = {}
        @trace_id = nil
        @slowest = nil
        parser.on("--format FORMAT", "#{FORMATS.first} (the default), #{FORMATS.drop(1).join(", ")}; " \
                                     "flamegraph is svg and collapsed is folded, as rbspy names them") do |format|
          format = FORMAT_ALIASES.fetch(format, format)
          raise UsageError, "--format must be one of #{FORMATS.join(", ")}, got #{format.inspect}" unless
            FORMATS.include?(format)

          @format = format
        end
        define_selection_options(parser)
        parser.on("-o", "--output OUTPUT", "Write the report to file OUTPUT instead of stdout (- is stdout)") do |path|
          @output = path == "-" ? nil : path
          @output_named = true
        end
      end

      def define_selection_options(parser)
        parser.on("--probe PATTERN", "Only the probes PATTERN names (PROVIDER:PROBE or PROVIDER, with * and ?); " \
                                     "may be given more than once") do |pattern|
          @patterns << RecordingOptions.pattern(pattern)
        rescue ArgumentError => e
          raise UsageError, e.message
        end
        parser.on("--since TIME", "Only records from TIME: after the first record (10s, 250ms), or a wall-clock " \
                                  "time (ISO 8601: 2026-11-27T10:15:00Z)") do |time|
          @window[:since] = bound("--since", time)
        end
        parser.on("--until TIME", "Only records before TIME, as --since takes it (a latency probe's call is in " \
                                  "the window if it ended in it)") do |time|
          @window[:until] = bound("--until", time)
        end
        define_trace_options(parser)
      end

      def define_trace_options(parser)
        parser.on("--trace-id HEX", "Only records made in this W3C trace (32 lowercase hex digits, as in a " \
                                    "traceparent header)") do |hex|
          problem = TraceFile.reader.trace_id_problem(hex)
          raise UsageError, "--trace-id: #{problem}" if problem

          @trace_id = hex
        end
        parser.on("--slowest N", "List N slowest calls of each latency probe (text, json; 5 by default, 0 for " \
                                 "none)") do |count|
          count_form = /\A\d{1,6}\z/
          raise UsageError, "--slowest takes a count (0 or more), got #{count.inspect}" unless count_form.match?(count)

          @slowest = Integer(count, 10)
        end
      end

      def execute(args)
        raise UsageError, "missing FILE: name one or more trace files or rings" if args.empty?

        refuse_binary_to_terminal
        paths = once_each(args)
        refuse_overwriting_input(paths)
        # Every file is read, and the report refuses what it cannot make
        # of them, before OUTPUT is opened: a failure leaves OUTPUT as it was.
        traces = TraceFile.load(paths)
        traces.select(@patterns.uniq, @window[:since], @window[:until], @trace_id)
        traces.slowest = @slowest if @slowest
        traces.check(@format)
        writing { |destination| traces.report(@format, destination) }
        0
      end

      # Formats that are not text, which a terminal would show as noise.
      BINARY_FORMATS = %w[pprof].freeze

      # A binary report goes to a terminal only when asked for with -o -.
      def refuse_binary_to_terminal
        return unless BINARY_FORMATS.include?(@format) && !@output_named && out.tty?

        raise UsageError, "--format #{@format} is binary (gzip): name a file with -o FILE, or pipe it " \
                          "(-o - writes it to the terminal anyway)"
      end

      # OUTPUT would be truncated before the files are read.
      def refuse_overwriting_input(paths)
        output = @output && file_identity(@output)
        input = output && paths.find { |path| file_identity(path) == output }
        raise UsageError, "-o #{@output} is #{input}, a file this report reads: name another output" if input
      end

      # The device and inode of the file at +path+, nil if there is none.
      def file_identity(path)
        stat = File.stat(path)
        [stat.dev, stat.ino]
      rescue SystemCallError
        nil
      end

      # The times a trace's clock holds: nanoseconds in 64 bits.
      NANOSECONDS = (-(2**63)..((2**63) - 1))

      # A window's bound as the reader takes it: ["after_first", ns] for a
      # duration, ["wall", ns since the epoch] for an ISO 8601 time.
      def bound(option, text)
        if Durations::PATTERN.match?(text)
          nanoseconds = Durations.parse(text)
          return ["after_first", nanoseconds] if NANOSECONDS.cover?(nanoseconds)

          raise UsageError, "#{option} #{text} is longer than a trace's clock can hold (292 years)"
        end

        nanoseconds = (Time.iso8601(text).to_r * 1_000_000_000).round
        return ["wall", nanoseconds] if NANOSECONDS.cover?(nanoseconds)

        raise UsageError, "#{option} #{text} is outside the times a trace's clock can hold " \
                          "(#{wall(NANOSECONDS.min)} to #{wall(NANOSECONDS.max)})"
      rescue ArgumentError
        raise UsageError, "#{option} takes a duration after the first record (10s, 250ms) or a wall-clock time in " \
                          "ISO 8601 (2026-11-27T10:15:00Z), got #{text.inspect}"
      end

      def wall(nanoseconds)
        Time.at(nanoseconds.fdiv(1_000_000_000)).utc.strftime("%Y-%m-%dT%H:%M:%SZ")
      end

      # +paths+ without a second name of a file already named (the same
      # device and inode: a link, or the same file twice), each said once:
      # its records would count twice. A path that cannot be read is kept,
      # for the reader to say why.
      def once_each(paths)
        seen = {}
        paths.select do |path|
          stat = File.stat(path)
          first = seen[[stat.dev, stat.ino]]
          seen[[stat.dev, stat.ino]] = path unless first
          err.puts("#{PROGRAM}: warning: #{path} is the same file as #{first}: read once") if first
          !first
        rescue SystemCallError
          true
        end
      end

      # Yields the destination: OUTPUT, or stdout (whose write errors, and
      # a closed pipe, CLI.run reports).
      def writing(&)
        return yield out unless @output

        OutputFile.write(@output, contents: "the report", &)
      rescue SystemCallError, IOError => e
        raise Error, "cannot write the report to #{@output}: #{CLI.reason(e)}"
      end
    end
  end
end
