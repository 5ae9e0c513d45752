# frozen_string_literal: true

module Bench
  # Interleaved rounds of loops whose calls cost anything from a few
  # nanoseconds to microseconds (a probe with a tracer attached). One
  # iteration count for all would leave the cheap loops a sample too short
  # to time or the expensive ones a sample too long for many rounds, so
  # each loop gets its own, about +target_ms+ a sample, and every round
  # times an empty loop too, whose cost per iteration is subtracted.
  #
  # +around+ is called as around.call(loop, run) for every sample,
  # calibration included, and must call run.call once: it puts the process
  # in the state the loop is measured in (tracing on or off, a TracePoint
  # enabled). Loops needing the same state should be adjacent in +loops+,
  # so that a round changes state as seldom as possible.
  class Samples
    attr_reader :rounds, :iterations, :empty_ns

    # The empty loop runs as any other, in no particular state.
    NO_STATE = ->(_loop, run) { run.call }
    EMPTY = "empty loop"

    def initialize(loops, rounds:, target_ms:, around: NO_STATE)
      @loops = loops
      @rounds = rounds
      @target_ms = target_ms
      @around = around
      @iterations = {}
    end

    def run
      empty = CodeLoop.new(EMPTY)
      cases = { empty.label => sample(empty) }
      @loops.each { |loop| cases[loop.label] = sample(loop) }
      per_call = Bench.interleave(cases, rounds: @rounds)
      @empty_ns = per_call.delete(empty.label)
      @net = per_call.transform_values { |values| values.zip(@empty_ns).map { |value, empty_ns| value - empty_ns } }
      self
    end

    # Calibrates +loop+ and returns what times one sample of it: ns/call.
    def sample(loop)
      iterations = @iterations[loop.label] = within(loop) { Bench.calibrate([loop], target_ms: @target_ms) }
      -> { within(loop) { loop.time_ns(iterations) }.fdiv(iterations) }
    end

    # Runs the block in the state +loop+ is measured in.
    def within(loop)
      result = nil
      (loop.label == EMPTY ? NO_STATE : @around).call(loop, -> { result = yield })
      result
    end

    # ns/call of each round, net of the empty loop.
    def ns(label)
      @net.fetch(label)
    end

    def median(label)
      Bench.median(ns(label))
    end

    # The median of per-round differences: what +label+ costs over +reference+.
    def over(label, reference)
      Bench.median(ns(label).zip(ns(reference)).map { |value, base| value - base })
    end

    def ratio(label, reference)
      Bench.median_ratio(ns(label), ns(reference))
    end

    # The median of per-round ratios of two overheads over the same base:
    # (label - base) / (reference - base).
    def overhead_ratio(label, reference, base)
      ratios = ns(label).zip(ns(reference), ns(base)).filter_map do |value, ref, base_ns|
        (value - base_ns).fdiv(ref - base_ns) if ref > base_ns
      end
      ratios.empty? ? nil : Bench.median(ratios)
    end

    def empty_median
      Bench.median(@empty_ns)
    end

    # The usual columns of a timed row, for JSON and table alike.
    def timing(label)
      { ns_per_call: median(label), spread_ns: ns(label).minmax, iterations: @iterations[label],
        samples_ns: ns(label).map { |value| value.round(2) } }
    end
  end
end
