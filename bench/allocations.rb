# frozen_string_literal: true

module Bench
  # Ruby objects allocated per call: a probe left in a hot path must not
  # feed the GC while nothing is attached. A call passing only Integers
  # must allocate nothing; a String is copied (NUL-terminated) for the
  # probe only while a tracer is attached.
  class Allocations < Group
    ROUNDS = 3
    ITERATIONS = 100_000

    def run
      with_loaded_provider(:bench_allocations, Calls::SIGNATURES) do |tracepoints|
        # [row id, measured loop, its floor, objects/call allowed (nil: no target)]
        comparisons = Calls::PROBES.map do |probe, (label, types, args)|
          ["fire_#{probe}", Loop.call(label, tracepoints[probe], :fire, *args), Calls.floor(label, args),
           types.include?(String) ? nil : 0]
        end
        comparisons << ["enabled_p", Loop.call("enabled?", tracepoints[:int], :enabled?), Calls.floor("()", []), nil]
        measure(comparisons).note(attachment_note(tracepoints.values))
      end
    end

    private

    def measure(comparisons)
      loops = comparisons.flat_map { |_, subject, floor| [subject, floor] }.uniq(&:label)
      counts = Bench.interleave(loops.to_h { |loop| [loop.label, -> { loop.objects_per_call(ITERATIONS) }] }, rounds:)
      table = table(:allocations, "Allocations per call, loaded provider, no tracer attached " \
                                  "(GC.stat(:total_allocated_objects))",
                    params: { rounds:, iterations: ITERATIONS }, measurement: "measurement",
                    objects_per_call: ["objects/call", :d4], floor: "floor (Native.noop)",
                    floor_objects_per_call: ["floor objects/call", :d4], target: "target")
      rows(comparisons, counts).each { |row| table.row(row) }
      # Said in words, since a rounded 0.0000 could hide one object every few thousand calls.
      table.rows.select { |row| row[:target].eql?(0) }.each { |row| table.note(verdict(row)) }
      table
    end

    def rows(comparisons, counts)
      comparisons.map do |id, subject, floor, target|
        { id:, measurement: subject.label, objects_per_call: Bench.median(counts[subject.label]),
          floor: floor.label, floor_objects_per_call: Bench.median(counts[floor.label]), target:,
          samples: counts[subject.label] }
      end
    end

    def verdict(row)
      return "#{row[:measurement]} allocates nothing: YES (0 objects in every round of #{ITERATIONS} calls)" if
        row[:samples].all?(&:zero?)

      format("%<call>s allocates nothing: NO, %<objects>.4f objects/call (rounds: %<samples>s)",
             call: row[:measurement], objects: row[:objects_per_call], samples: row[:samples].join(", "))
    end
  end
end
