# frozen_string_literal: true

module StaticTracing
  # Durations as people write and read them: "250ms" parsed into
  # nanoseconds, nanoseconds shown as "1.23ms". The recorder's settings
  # (a trigger's threshold), its warnings and the command's reports share
  # these rules. Plain Ruby: the command loads no native code.
  module Durations
    UNITS = { "ns" => 1, "us" => 1_000, "ms" => 1_000_000, "s" => 1_000_000_000 }.freeze
    PATTERN = /\A\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s)\s*\z/
    # Largest first, for showing.
    SHOWN = [["s", 1e9], ["ms", 1e6], ["us", 1e3]].freeze
    # The least fraction of a unit that three significant digits round to 1.
    ROUNDS_TO_ONE = 0.9995

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
    def format(nanoseconds)
      return "?" unless nanoseconds

      unit, scale = SHOWN.find { |_, size| nanoseconds.abs >= size * ROUNDS_TO_ONE } || ["ns", 1]
      "#{number(nanoseconds / scale.to_f, digits: 3)}#{unit}"
    end

    # +nanoseconds+ exactly, in the largest unit that divides them: what
    # parses back to the same value (250ms, 1500us).
    def exact(nanoseconds)
      unit, scale = UNITS.to_a.reverse.find { |_, size| (nanoseconds % size).zero? }
      "#{nanoseconds / scale}#{unit}"
    end

    # Up to +digits+ significant digits, no trailing zeros: 1.02, 16.4, 131.
    def number(value, digits: 3)
      decimals = [digits - value.abs.floor.to_s.size, 0].max
      text = Kernel.format("%.#{decimals}f", value)
      text.include?(".") ? text.sub(/0+\z/, "").delete_suffix(".") : text
    end
  end
end
