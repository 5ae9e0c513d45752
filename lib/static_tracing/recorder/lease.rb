# frozen_string_literal: true

module StaticTracing
  module Recorder
    # A command's recording lives while the command renews it: one whose
    # command was killed (SIGKILL), suspended or too busy to renew it for
    # its lease stops by itself, and says why, on stderr and in the state,
    # where the command finds it if it comes back.
    module Lease
      module_function

      def keep(recording)
        Watcher.soon(%i[recorder lease], 1.0) do
          next unless Recorder.running?(recording)
          next keep(recording) if now <= recording.lease_until

          reason = "static-tracing record did not renew it for #{format("%g", recording.lease)}s (it was " \
                   "killed, suspended, or too busy to)"
          warn("static_tracing: stopped recording #{recording.id}: #{reason}")
          Recorder.stop_because(reason, recording)
        end
      end

      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end
    end
  end
end
