# frozen_string_literal: true

module StaticTracing
  module CLI
    class Report < Command
      # The stacks that stack probes recorded (folded, root first, frames
      # separated by `;`, as StackTracer fires them), counted: one line
      # `stack count` per distinct stack, sorted, as flamegraph.pl reads.
      class FoldedStacks
        # Line breaks and other control characters would break the lines.
        CONTROL = /[\x00-\x1f\x7f]/

        # Refuses +traces+ that have no stack probe, as soon as they are read:
        # there would be nothing to fold.
        def initialize(traces)
          @traces = traces
          raise Error, no_stack_probes if traces.flat_map(&:probes).none?(&:stack_arg)
        end

        def write(out)
          out.write(counts.sort.map { |stack, count| "#{stack} #{count}\n" }.join)
        end

        private

        def counts
          counts = Hash.new(0)
          @traces.each do |trace|
            trace.records.each do |record|
              index = record.probe.stack_arg
              counts[record.args[index]] += 1 if index
            end
          end
          counts.delete("")
          counts.each_with_object(Hash.new(0)) do |(stack, count), clean|
            clean[stack.scrub("?").gsub(CONTROL, "?")] += count
          end
        end

        def no_stack_probes
          probes = @traces.flat_map(&:probes).map(&:label).uniq
          "no stack probes in #{@traces.map(&:name).join(", ")} (probes with a stack argument, as StackTracer " \
            "makes), so no stacks to fold; #{probes.empty? ? "they have no probes" : "probes: #{probes.join(", ")}"}"
        end
      end
    end
  end
end
