# frozen_string_literal: true

module StaticTracing
  module Recorder
    # A ring's probe table, which a recorded call's probe must be in: made
    # to hold every probe a recording arms as it starts, and as many again
    # as a default table holds for probes declared later. A probe that
    # finds it full is not recorded (its calls count as dropped), and that
    # is said: on stderr once, and in the state, for the command.
    module ProbeTable
      # How many of the probes left out the state names.
      LISTED = 20

      module_function

      # [provider, probe] names of the probes a recording of +settings+
      # arms as it starts (Native.recorder_start sizes the table for them).
      def names(settings)
        StaticTracing::STATE_LOCK.synchronize do
          StaticTracing.providers.flat_map do |provider|
            provider.tracepoints.each_value.filter_map do |tracepoint|
              next unless RecordingOptions.match?(settings.probes, provider.name, tracepoint.name)

              [provider.name.to_s, tracepoint.name.to_s]
            end
          end
        end
      end

      # The table had no room for +tracepoint+.
      def full(recording, tracepoint)
        return if recording.table_full_said

        recording.table_full_said = true
        warn("static_tracing: recording #{recording.id} cannot record #{label(tracepoint)} (nor probes declared " \
             "after it): the ring's probe table is full; their calls count as dropped")
      end

      # The labels of the probes +recording+ armed that its table could not hold.
      def unrecorded(recording)
        recording.armed.filter_map { |tracepoint, id| label(tracepoint) if id.nil? }
      end

      def label(tracepoint)
        "#{tracepoint.provider.name}:#{tracepoint.name}"
      end
    end
  end
end
