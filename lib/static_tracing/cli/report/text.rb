# frozen_string_literal: true

require_relative "../histogram"

module StaticTracing
  module CLI
    class Report < Command
      # The report as text: a line saying what was read (files, processes,
      # records, their time span, the records lost and why), then per probe
      # its calls and, for a latency probe, the nearest-rank p50, p90 and
      # p99 and the max of its latencies, with their histogram in bpftrace's
      # power-of-two buckets of microseconds (hist(arg0 / 1000)), labelled
      # as `static-tracing latency` labels them.
      class Text
        include Histogram

        PERCENTILES = [50, 90, 99].freeze

        attr_reader :out

        def initialize(traces)
          @traces = traces
        end

        def write(out)
          @out = out
          out.puts(summary)
          ProbeCalls.new(@traces).each do |probe|
            out.puts
            print_probe(probe)
          end
        end

        private

        def summary
          records = @traces.sum { |trace| trace.records.size }
          # A pid is a process's only within its pid namespace.
          pids = @traces.map { |trace| [trace.pid, trace.pid_namespace] }.uniq.map(&:first)
          processes = "#{pids.size == 1 ? "process" : "processes"} #{pids.join(", ")}"
          "Read #{count(@traces.size, "file")}: #{processes}, #{count(records, "record")}#{span}; #{lost}."
        end

        # The wall-clock time between the first record and the last.
        def span
          times = @traces.flat_map do |trace|
            trace.records.map(&:time_ns).minmax.compact.map { |time| trace.wall_time_ns(time) }
          end
          times.empty? ? "" : " over #{duration(times.max - times.min)}"
        end

        # Records lost, by why: the writer dropped them (the ring was full,
        # or its probe table), it overwrote them (flight mode), or they were
        # being written when the ring was read.
        def lost
          flight, waiting = @traces.partition(&:overwrite?)
          reasons = {
            "dropped because the ring (or its probe table) was full" => @traces.sum(&:dropped),
            "overwritten in flight mode" => unread(flight),
            "being written when the ring was read" => unread(waiting)
          }.select { |_, number| number.positive? }
          return "none lost" if reasons.empty?

          "#{reasons.values.sum} lost (#{reasons.map { |why, number| "#{number} #{why}" }.join(", ")})"
        end

        def unread(traces)
          traces.sum { |trace| trace.records_total - trace.records.size }
        end

        def print_probe(probe)
          calls = "#{probe.label}  #{probe.calls.zero? ? "no calls" : count(probe.calls, "call")}"
          return out.puts(calls) if probe.latencies.nil? || probe.latencies.empty?

          sorted = probe.latencies.sort
          percentiles = PERCENTILES.map { |percent| "p#{percent} #{duration(percentile(sorted, percent))}" }
          out.puts("#{calls}, #{percentiles.join(", ")}, max #{duration(sorted.last)}")
          print_histogram(Histogram.latency_buckets(sorted))
        end

        # The nearest-rank percentile: the smallest value that +percent+ % of
        # the values are at most.
        def percentile(sorted, percent)
          sorted[[((percent * sorted.size) + 99) / 100, 1].max - 1]
        end

        # "1 file", "2 records", as the commands word counts.
        def count(number, noun)
          "#{number} #{noun}#{"s" unless number == 1}"
        end
      end
    end
  end
end
