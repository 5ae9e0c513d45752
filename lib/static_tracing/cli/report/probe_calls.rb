# frozen_string_literal: true

module StaticTracing
  module CLI
    class Report < Command
      # The calls of each probe, across files: a probe is known by its
      # provider:name, so that the same probe recorded in two files (two
      # workers, say) is one. In the order of the files' probe tables.
      class ProbeCalls
        include Enumerable

        # +latencies+: the durations (ns) of the calls of a latency probe,
        # nil for another probe.
        Probe = Struct.new(:label, :calls, :latencies)

        def initialize(traces)
          @traces = traces
        end

        def each(&)
          groups.each_value(&)
        end

        private

        def groups
          groups = {}
          @traces.each { |trace| add(groups, trace) }
          groups
        end

        # Adds the calls recorded in +trace+ to their probes' groups.
        def add(groups, trace)
          calls, latencies = tally(trace)
          trace.probes.each do |probe|
            group = (groups[probe.label] ||= Probe.new(probe.label, 0, nil))
            group.calls += calls[probe.id]
            (group.latencies ||= []).concat(latencies[probe.id]) if probe.latency_arg
          end
        end

        # [calls, latencies], each by probe id, of the records of +trace+:
        # one loop over them all, as a trace can hold millions.
        def tally(trace)
          calls = Array.new(trace.probes.size, 0)
          latencies = trace.probes.map { |probe| [] if probe.latency_arg }
          trace.records.each do |record|
            probe = record.probe
            calls[probe.id] += 1
            latencies[probe.id] << record.args[probe.latency_arg] if probe.latency_arg
          end
          [calls, latencies]
        end
      end
    end
  end
end
