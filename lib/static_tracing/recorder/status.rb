# frozen_string_literal: true

module StaticTracing
  module Recorder
    # A running recording as the process describes it: in its state, for
    # `static-tracing`, and in the refusal of a second one.
    module Status
      module_function

      # What Recorder.status returns for +recording+.
      def of(recording)
        settings = recording.settings
        unrecorded = ProbeTable.unrecorded(recording)
        { "id" => recording.id, "by" => recording.by.to_s, "ring" => recording.path,
          "flight" => settings.flight, "size" => RecordingOptions.slots_size(settings.ring_size),
          "probes" => settings.probes, "armed" => recording.armed.size - unrecorded.size,
          "unrecorded" => unrecorded.size, "unrecorded_probes" => unrecorded.first(ProbeTable::LISTED),
          "dump_when" => settings.dump_when&.to_s,
          "dump_dir" => settings.dump_when && Snapshots.directory(settings),
          "dumps" => recording.dumps, "leased" => !recording.lease.nil? }
      end

      # Why +recording+ ended, and the probes it could not record: for
      # the command that followed it, which reads it once it has ended.
      def ended(recording, reason)
        unrecorded = ProbeTable.unrecorded(recording)
        { "id" => recording.id, "reason" => reason, "unrecorded" => unrecorded.size,
          "unrecorded_probes" => unrecorded.first(ProbeTable::LISTED) }
      end

      # A ring in a directory on a disk (STATIC_TRACING_RING_DIR named
      # one): what it costs, as a warning says it once.
      def on_disk(path, file_system)
        "static_tracing: the ring #{path} is on #{file_system}, a disk: the kernel writes it back to the disk " \
          "as it changes (all of it, every writeback period, while it is recorded into), and its first lap " \
          "costs about twice a later one; a directory on a tmpfs has neither cost (STATIC_TRACING_RING_DIR)"
      end

      def running_already(recording)
        "a recording is running already (#{recording.settings.flight ? "flight, " : ""}started by " \
          "#{recording.by == :command ? "static-tracing record" : "the process itself"}, ring " \
          "#{recording.path}); stop it first (static-tracing record PID --stop, or StaticTracing::Recorder.stop)"
      end
    end
  end
end
