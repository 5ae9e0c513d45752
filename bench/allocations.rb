# frozen_string_literal: true

module Bench
  # Ruby objects allocated per call. A probe left in a hot path must not
  # feed the GC while nothing is attached.
  class Allocations
    KEY = :allocations
    ROUNDS = 3
    ITERATIONS = 100_000
    PATH = "/users/42/edit"

    def initialize(rounds: ROUNDS)
      @rounds = rounds
    end

    def run
      signatures = Calls::PROBES.transform_values { |_, types, _| types }
      Fixtures.with_loaded_provider(:bench_allocations, signatures) do |tracepoints|
        measure(comparisons(tracepoints)).tap do |section|
          section.note(Fixtures.attachment_note(tracepoints.values))
        end
      end
    end

    private

    # [row id, measured call, its floor, target]: a call passing only
    # Integers must not allocate; a String is copied (NUL-terminated) for
    # the probe only while a tracer is attached.
    def comparisons(tracepoints)
      native = StaticTracing::Native
      fires = Calls::PROBES.map do |probe, (label, types, args)|
        [:"fire_#{probe}", CallLoop.new(label, tracepoints[probe], :fire, *args),
         CallLoop.new("noop(#{label[/\((.*)\)/, 1]})", native, :noop, *args), types.include?(String) ? nil : 0]
      end
      fires << [:enabled_p, CallLoop.new("enabled?", tracepoints[:int], :enabled?),
                CallLoop.new("noop()", native, :noop), nil]
    end

    def measure(comparisons)
      loops = comparisons.flat_map { |_, subject, floor, _| [subject, floor] }.uniq(&:label)
      cases = loops.to_h { |loop| [loop.label, -> { loop.objects_per_call(ITERATIONS) }] }
      counts = Bench.interleave(cases, rounds: @rounds)
      rows = comparisons.map { |id, subject, floor, target| row(id, subject.label, floor.label, counts, target) }
      section.tap do |section|
        rows.each { |row| section.row(row) }
        verdicts(rows).each { |verdict| section.note(verdict) }
      end
    end

    def row(id, subject, floor, counts, target)
      {
        id: id.to_s, measurement: subject, objects_per_call: Bench.median(counts[subject]),
        floor:, floor_objects_per_call: Bench.median(counts[floor]),
        target:, samples: counts[subject]
      }
    end

    # Said in words for the calls that must not allocate, since a rounded
    # 0.0000 in the table could hide one object every few thousand calls.
    def verdicts(rows)
      rows.select { |row| row[:target].eql?(0) }.map { |row| verdict(row) }
    end

    def verdict(row)
      if row[:samples].all?(&:zero?)
        "#{row[:measurement]} allocates nothing: YES (0 objects in every round of #{ITERATIONS} calls)"
      else
        format("%<call>s allocates nothing: NO, %<objects>.4f objects/call (rounds: %<samples>s)",
               call: row[:measurement], objects: row[:objects_per_call], samples: row[:samples].join(", "))
      end
    end

    def section
      Section.new(KEY, "Allocations per call, loaded provider, no tracer attached (GC.stat(:total_allocated_objects))",
                  params: { rounds: @rounds, iterations: ITERATIONS })
             .column(:measurement, "measurement")
             .column(:objects_per_call, "objects/call", Format.decimal(4))
             .column(:floor, "floor (Native.noop)")
             .column(:floor_objects_per_call, "floor objects/call", Format.decimal(4))
             .column(:target, "target")
    end
  end
end
