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
      # +latency+ ns and ended at +time_ns+ (StaticTracing.nsec's clock,
      # the ring's), in the trace +trace_id+ (hex; nil outside any trace
      # context), which the line names. It holds that call and the records
      # made in the dump_window seconds before it began (dump_records at
      # most, the newest), if the dump directory's budget (max_dumps files
      # and max_dump_bytes bytes of trace files, whoever wrote them) has
      # room for it: past it, the oldest are kept, and it says why there is
      # none. Says what it wrote on stderr, where an operator sees it; a
      # snapshot that cannot be written is said too, and recording goes on.
      # Called without the lock: the ring is copied while the process goes on.
      def after_trigger(recording, probe_id, latency, time_ns, trace_id = nil)
        settings = recording.settings
        tracepoint = recording.armed.key(probe_id)
        dir = directory(settings)
        name = file_name(recording, tracepoint)
        written, *counts = Native.recorder_trigger_dump(dir, name, window_start(settings, latency, time_ns),
                                                        settings.dump_records, settings.max_dumps,
                                                        settings.max_dump_bytes)
        call = slow_call(tracepoint, latency, trace_id)
        return over_budget(settings, call, dir, counts) unless written

        path = File.join(dir, name)
        STATE_LOCK.synchronize { count(recording, path) }
        warn("static_tracing: #{call} (#{settings.dump_when}): wrote #{path}")
      rescue SystemCallError, StaticTracing::Error => e
        warn("static_tracing: could not write the snapshot #{label(tracepoint)} asked for: #{e.message}")
      end

      # The first time a snapshot's window holds: dump_window seconds
      # before the slow call began.
      def window_start(settings, latency, time_ns)
        [time_ns - latency - (settings.dump_window * 1e9).to_i, 0].max
      end

      # Counts +path+ among +recording+'s snapshots.
      def count(recording, path)
        recording.dumps << path
        State.publish
      end

      # The directory's budget had no room: said each time (at most once a
      # dump_interval), as a snapshot written is; the triggers stay, and a
      # budget freed by moving files away is used again.
      def over_budget(settings, slow_call, dir, (files, bytes))
        warn("static_tracing: #{slow_call} (#{settings.dump_when}): " \
             "no snapshot: #{dir} holds #{files} trace files of #{bytes} bytes, its budget is " \
             "#{settings.max_dumps} files and #{settings.max_dump_bytes} bytes (--max-dumps, --max-dump-bytes); " \
             "the oldest are kept: move them away for new ones")
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

      # What a trigger's line says of the slow call: its probe, how long it
      # took and, made in a trace context, its trace.
      def slow_call(tracepoint, latency, trace_id)
        "#{label(tracepoint)} took #{Durations.format(latency)}#{" (trace #{trace_id})" if trace_id}"
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
