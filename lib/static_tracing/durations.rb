# frozen_string_literal: true

module StaticTracing
  # Durations as people write and read them: "250ms" parsed into
  # nanoseconds, nanoseconds shown as "1.23ms". The recorder's settings
  # (a trigger's threshold), its warnings and the `latency` command share
  # these rules, in the traced process as in the command: plain Ruby,
  # loaded with neither native library. #format is in integer arithmetic,
  # the rule of the reports' (ext/trace_report's durations.rs), which
  # spec/contracts_spec.rb holds equal to it.
  module Durations
    UNITS = { "ns" => 1, "us" => 1_000, "ms" => 1_000_000, "s" => 1_000_000_000 }.freeze
    PATTERN = /\A\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s)\s*\z/
    # Largest first, for showing.
    SHOWN = [["s", 1_000_000_000], ["ms", 1_000_000], ["us", 1_000]].freeze

    module_function

    # Nanoseconds from "250ms", "1.5s", "100us", "500ns"; ArgumentError
    # for anything else.
    def parse(text)
      match = PATTERN.match(text.to_s) or
        raise ArgumentError, "invalid duration #{text.inspect}: give a number and a unit: ns, us, ms or s " \
                             "(e.g. 250ms)"
      (match[1].to_r * UNITS.fetch(match[2])).round
    end

    # +nanoseconds+ in the largest unit that shows them as 1 or more with
    # three significant digits: 999ns, 1.5us, 1s (not 1000ms, which is
    # what 999.9ms rounds to in milliseconds).
    # A duration takes the largest unit it is at least 0.9995 of.
    def format(nanoseconds)
      return "?" unless nanoseconds

      magnitude = nanoseconds.abs
      unit, scale = SHOWN.find { |_, size| magnitude * 10_000 >= size * 9_995 } || ["ns", 1]
      "#{"-" if nanoseconds.negative?}#{number(Rational(magnitude, scale), digits: 3)}#{unit}"
    end

    # +nanoseconds+ exactly, in the largest unit that divides them: what
    # parses back to the same value (250ms, 1500us).
    def exact(nanoseconds)
      unit, scale = UNITS.to_a.reverse.find { |_, size| (nanoseconds % size).zero? }
      "#{nanoseconds / scale}#{unit}"
    end

    # +value+ (a non-negative Rational or Integer) with up to +digits+
    # significant digits, rounded half to even, no trailing zeros: 1.02,
    # 16.4, 131.
    def number(value, digits: 3)
      decimals = [digits - value.floor.to_s.size, 0].max
      kept = (value * (10**decimals)).round(half: :even).to_s.rjust(decimals + 1, "0")
      return kept if decimals.zero?

      "#{kept[0...-decimals]}.#{kept[-decimals..]}".sub(/0+\z/, "").delete_suffix(".")
    end
  end
end
