# frozen_string_literal: true

require_relative "output_file"
require_relative "trace_file"

module StaticTracing
  module CLI
    # `static-tracing report FILE...`: what trace files (or live rings)
    # recorded, as one report: per probe, calls and latency percentiles
    # with a histogram (text); a timeline for trace viewers (chrome); or the
    # stacks of stack probes for flamegraph.pl (folded).
    class Report < Command
      # Not in `static-tracing --help` while the recorder that writes the
      # files is not released (docs/recording.md); `report --help` works.
      command "report",
              arguments: "FILE... [--format text|chrome|folded] [-o OUTPUT]",
              summary: "Summarize recorded trace files: latency percentiles, a timeline, or stacks to fold",
              description: <<~TEXT.chomp
                Reads trace files (written by static-tracing record or dump) or a recorder's ring files
                (<pid>-<pidns>.ring next to a process's stubs, read as they are, while the process writes
                them), and makes one report of them all. Needs no tracer and no privilege but reading
                the files. Formats:
                  text    what was read (processes, records, time span, records lost and why), then per
                          probe its calls and, for a latency probe, p50/p90/p99/max and a histogram in
                          bpftrace's power-of-two buckets (microseconds, as static-tracing latency prints)
                  chrome  Chrome trace-event JSON, for Perfetto UI, chrome://tracing or speedscope: a
                          complete event per call of a latency probe, an instant event per other record
                  folded  the stacks of stack probes (StackTracer's), one line per distinct stack with
                          its count, for flamegraph.pl
              TEXT

      FORMATS = %w[text chrome folded].freeze

      private

      def define_options(parser)
        @format = FORMATS.first
        @output = nil
        parser.on("--format FORMAT", "text (the default), chrome or folded") do |format|
          raise UsageError, "--format must be one of #{FORMATS.join(", ")}, got #{format.inspect}" unless
            FORMATS.include?(format)

          @format = format
        end
        parser.on("-o", "--output OUTPUT", "Write the report to file OUTPUT instead of stdout") do |path|
          @output = path
        end
      end

      def execute(args)
        raise UsageError, "missing FILE: name one or more trace files or rings" if args.empty?

        # Every file is read, and the report refuses what it cannot make
        # of them, before OUTPUT is opened: a failure leaves OUTPUT as it was.
        traces = TraceFile.load(args)
        traces.check(@format)
        writing { |destination| traces.report(@format, destination) }
        0
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
