# frozen_string_literal: true

require_relative "../durations"

module StaticTracing
  module CLI
    # Latency histograms as bpftrace prints them: power-of-two buckets of
    # microseconds (its hist()), labelled in time units, with a bar each.
    # `latency` prints bpftrace's own buckets with it; `report` buckets the
    # durations of recorded calls the same way (Histogram.latency_buckets),
    # so that both look alike. #print_histogram writes to #out, as a Command has.
    module Histogram
      BAR_WIDTH = 52

      module_function

      # bpftrace's hist() buckets of arg0 / 1000 for the durations +sorted+
      # (ns, ascending), as its JSON gives them: "< 0" ({"max" => -1}), [0],
      # [1], [2, 4), [4, 8), ... (microseconds), from the lowest bucket
      # counted to the highest, empty ones between. arg0 / 1000 truncates
      # toward zero, so "< 0" ends at -1000ns, [0] at 1000ns, [1] at 2000ns,
      # [2, 4) at 4000ns... Each count is found by a binary search for the
      # end of its bucket: a million calls cost no more than a few.
      def latency_buckets(sorted)
        return [] if sorted.empty?

        starts = [0, *bucket_ends(sorted.last).map { |ns| sorted.bsearch_index { |value| value >= ns } || sorted.size }]
        counts = starts.each_cons(2).map { |start, stop| stop - start }
        (counts.index(&:positive?)..counts.rindex(&:positive?)).map { |index| bucket(index - 1, counts[index]) }
      end

      # Where each bucket ends (the least duration, in ns, past it), from
      # "< 0" on, to the bucket of +max+.
      def bucket_ends(max)
        ends = [-999, 1000]
        ends << (ends.last * 2) while ends.last <= max
        ends
      end

      # Bucket +index+ holds the microseconds of that bit length; -1 the
      # negative ones.
      def bucket(index, count)
        case index
        when -1 then { "max" => -1, "count" => count }
        when 0 then { "min" => 0, "max" => 0, "count" => count }
        else { "min" => 1 << (index - 1), "max" => (1 << index) - 1, "count" => count }
        end
      end

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

      # Up to +digits+ significant digits, no trailing zeros: 1.02, 16.4, 131.
      def format_number(value, digits: 3)
        Durations.number(value, digits:)
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
