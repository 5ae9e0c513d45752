# frozen_string_literal: true

module Bench
  # What a tracepoint call costs on a loaded provider with no tracer
  # attached, next to an empty native method called with the same
  # arguments: the floor no call into the extension can go under.
  class Calls
    KEY = :calls
    ROUNDS = 11
    SAMPLE_MS = 40
    PATH = "/users/42/edit"

    def initialize(rounds: ROUNDS)
      @rounds = rounds
    end

    def run
      signatures = { int: [Integer], int_string: [Integer, String] }
      Fixtures.with_loaded_provider(:bench_calls, signatures) do |tracepoints|
        comparisons = comparisons(tracepoints)
        measure(comparisons).tap do |section|
          section.note(Fixtures.attachment_note(tracepoints.values))
        end
      end
    end

    private

    # [measured call, its floor]. Rows for other call paths (method
    # wrappers, attached tracers) are added here as more pairs.
    def comparisons(tracepoints)
      native = StaticTracing::Native
      [
        [CallLoop.new("fire(Integer)", tracepoints[:int], :fire, 42),
         CallLoop.new("noop(Integer)", native, :noop, 42)],
        [CallLoop.new("fire(Integer, String)", tracepoints[:int_string], :fire, 42, PATH),
         CallLoop.new("noop(Integer, String)", native, :noop, 42, PATH)],
        [CallLoop.new("enabled?", tracepoints[:int], :enabled?),
         CallLoop.new("noop()", native, :noop)]
      ]
    end

    def measure(comparisons)
      empty = CallLoop.new("empty loop")
      loops = comparisons.flatten.uniq(&:label)
      iterations = Bench.calibrate(loops, target_ms: SAMPLE_MS)
      times = Bench.interleave(cases([empty] + loops, iterations), rounds: @rounds)
      net = loops.to_h { |loop| [loop.label, net_ns(times[loop.label], times[empty.label], iterations)] }
      section(iterations, Bench.median(times[empty.label]).fdiv(iterations)).tap do |section|
        comparisons.each { |subject, floor| section.row(row(subject.label, floor.label, net)) }
      end
    end

    def cases(loops, iterations)
      loops.to_h { |loop| [loop.label, -> { loop.time_ns(iterations) }] }
    end

    # ns/call of each round, less the empty loop's time in that same round.
    def net_ns(times, empty_times, iterations)
      times.zip(empty_times).map { |time, empty| (time - empty).fdiv(iterations) }
    end

    def row(subject, floor, net)
      {
        measurement: subject,
        ns_per_call: Bench.median(net[subject]),
        spread_ns: net[subject].minmax,
        floor:,
        floor_ns_per_call: Bench.median(net[floor]),
        over_floor_ns: Bench.median(net[subject].zip(net[floor]).map { |value, base| value - base }),
        ratio: Bench.median_ratio(net[subject], net[floor]),
        samples_ns: net[subject].map { |value| value.round(2) },
        floor_samples_ns: net[floor].map { |value| value.round(2) }
      }
    end

    def section(iterations, empty_ns)
      params = { rounds: @rounds, iterations_per_sample: iterations, empty_loop_ns_per_iteration: empty_ns.round(3) }
      Section.new(KEY, "Calls, loaded provider, no tracer attached (median of #{@rounds} interleaved rounds)",
                  params:)
             .column(:measurement, "measurement")
             .column(:ns_per_call, "ns/call", Format.decimal(1))
             .column(:spread_ns, "min..max", Format.range(1))
             .column(:floor, "floor (Native.noop)")
             .column(:floor_ns_per_call, "floor ns/call", Format.decimal(1))
             .column(:over_floor_ns, "over floor ns", Format.decimal(1))
             .column(:ratio, "ratio to floor", Format.ratio)
             .note(format("ns/call are net of an empty loop of the same shape (%<ns>.1f ns/iteration, " \
                          "%<iterations>d iterations a sample); ratios are medians of per-round ratios",
                          ns: empty_ns, iterations:))
    end
  end
end
