# frozen_string_literal: true

require_relative "../durations"

module StaticTracing
  module CLI
    # Latency histograms as bpftrace prints them: power-of-two buckets of
    # microseconds (its hist()), labelled in time units, with a bar each.
    # `latency` prints bpftrace's own buckets with it; `report` buckets the
    # durations of recorded calls the same way (ext/trace_report's
    # histogram.rs), so that both look alike. #print_histogram writes to
    # #out, as a Command has.
    module Histogram
      BAR_WIDTH = 52

      module_function

      # bpftrace's JSON gives each bucket's inclusive bounds, in microseconds
      # here; bpftrace 0.17 garbles the bounds of buckets past 2^31, which
      # are then taken from the bucket before.
      def bucket_labels(buckets)
        previous = nil
        buckets.map do |bucket|
          low = bucket["min"]
          high = bucket["max"]
          if low && high && previous && low <= previous
            low = previous + 1
            high = (low * 2) - 1
          end
          previous = high
          bucket_label(low, high)
        end
      end

      def bucket_label(low, high)
        return "< 0" if low.nil? || high.negative?
        return "< 1us" if high.zero?

        "[#{duration(low * 1000)}, #{duration((high + 1) * 1000)})"
      end

      # +nanoseconds+ in the largest unit that shows them as 1 or more with
      # three significant digits: 999ns, 1.5us, 1s (not 1000ms, which is
      # what 999.9ms rounds to in milliseconds).
      def duration(nanoseconds)
        Durations.format(nanoseconds)
      end

      # Up to +digits+ significant digits, no trailing zeros: 1.02, 16.4,
      # 131; a Float as the decimal it shows (2.675, not its binary value).
      def format_number(value, digits: 3)
        Durations.number(Rational(value.to_s), digits:)
      end

      private

      # The buckets, one line each, labelled in time units, with a bar.
      def print_histogram(buckets)
        labels = bucket_labels(buckets)
        top = buckets.map { |bucket| bucket["count"] }.max
        width = labels.map(&:size).max
        counts = buckets.map { |bucket| bucket["count"].to_s }
        count_width = counts.map(&:size).max
        buckets.each_with_index do |bucket, index|
          bar = "@" * (bucket["count"] * BAR_WIDTH / top)
          out.puts("  #{labels[index].ljust(width)}  #{counts[index].rjust(count_width)} |#{bar.ljust(BAR_WIDTH)}|")
        end
      end
    end
  end
end
