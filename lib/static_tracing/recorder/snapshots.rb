# frozen_string_literal: true

module StaticTracing
  module Recorder
    # Snapshots the process writes itself: the ring as a trace file, when
    # Recorder.dump asks or a call exceeds a trigger's threshold (see
    # RecordingOptions::Trigger). A trigger's snapshots go to its dump
    # directory (the stub directory unless one is given), named after the
    # process, the probe and the time, never over an existing file.
    module Snapshots
      module_function

      # Writes the snapshot a trigger asked for: +probe_id+'s call took
      # +latency+ ns, in the trace +trace_id+ (hex; nil outside any trace
      # context), which the line names. After max_dumps of them the triggers are taken away.
      # Says what it wrote on stderr, where an operator sees it; a snapshot
      # that cannot be written is said too, and recording goes on. Called
      # without the lock: the ring is copied while the process goes on.
      def after_trigger(recording, probe_id, latency, trace_id = nil)
        settings = recording.settings
        tracepoint = recording.armed.key(probe_id)
        path = write(File.join(directory(settings), file_name(recording, tracepoint)))
        last = STATE_LOCK.synchronize { count(recording, path) }
        took = "#{label(tracepoint)} took #{Durations.format(latency)}#{" (trace #{trace_id})" if trace_id}"
        warn("static_tracing: #{took} (#{settings.dump_when}): " \
             "wrote #{path}#{"; that is the last of the #{settings.max_dumps} snapshots allowed" if last}")
      rescue SystemCallError, StaticTracing::Error => e
        warn("static_tracing: could not write the snapshot #{label(tracepoint)} asked for: #{e.message}")
      end

      # Counts +path+ among +recording+'s snapshots; true for the last one
      # allowed, after which its triggers are taken away (unless it was
      # stopped while the snapshot was written: then they went with it).
      def count(recording, path)
        recording.dumps << path
        last = recording.dumps.size >= recording.settings.max_dumps
        recording.armed.each_key { |each| Native.recorder_trigger(each, nil) } if last && Recorder.running?(recording)
        State.publish
        last
      end

      # +settings+ with their dump directory made absolute (the process's
      # working directory may change while it records) and checked: a
      # snapshot that cannot be written is found out now, not at the slow
      # call it was for. RecorderError says why.
      def checked_directory(settings)
        dir = settings.dump_dir or return settings

        dir = File.expand_path(dir)
        problem = directory_problem(dir)
        raise RecorderError, "cannot write snapshots into #{dir}: #{problem}" if problem

        settings.dup.tap { |checked| checked.dump_dir = dir }
      end

      def directory_problem(dir)
        stat = File.stat(dir)
        return "it is not a directory" unless stat.directory?
        return if File.writable?(dir) && File.executable?(dir)

        "uid #{Process.euid} may not create files in it"
      rescue Errno::ENOENT
        "it does not exist"
      rescue SystemCallError => e
        SystemCallError.new(nil, e.errno).message
      end

      # Where a trigger's snapshots go.
      def directory(settings)
        settings.dump_dir || (State.path && File.dirname(State.path)) or
          raise RecorderError, "no directory for snapshots: this process has no stub directory (give dump_dir:)"
      end

      # `<pid>-<provider>-<probe>-<UTC time>-<n>.trace`
      def file_name(recording, tracepoint)
        [Process.pid, tracepoint&.provider&.name, tracepoint&.name, Time.now.utc.strftime("%Y%m%dT%H%M%S"),
         recording.dumps.size + 1].compact.join("-") << ".trace"
      end

      def label(tracepoint)
        tracepoint ? "#{tracepoint.provider.name}:#{tracepoint.name}" : "a probe"
      end

      # What the ring holds now, as the new file +path+ (0600, never over
      # an existing file nor through a link, sized to its records; see
      # Native.recorder_dump).
      def write(path)
        Native.recorder_dump(File.path(path))
        path
      end
    end
  end
end
