# frozen_string_literal: true

require "securerandom"
require_relative "recording_options"
require_relative "recorder/snapshots"
require_relative "recorder/request_checks"
require_relative "recorder/probe_table"
require_relative "recorder/status"
require_relative "recorder/lease"
require_relative "recorder/launcher"

module StaticTracing
  # The recorder: the same probes a tracer attaches to, recorded by the
  # process itself into a ring of small records in a file in memory
  # (docs/recording.md), where `static-tracing` reads them with no root, no
  # capability and no BPF.
  #
  #   StaticTracing::Recorder.start(flight: true, size: "16M", dump_when: "my_controller:show > 250ms")
  #   StaticTracing::Recorder.dump("/tmp/now.trace")
  #   StaticTracing::Recorder.stop
  #
  # Only the probes the patterns name are armed: their methods wrapped,
  # their blocks run, their calls recorded; a probe declared later that
  # matches is armed when it is declared. Stopping disarms them all, and
  # what tracing does without the recorder goes on as before. One recording
  # at a time. `static-tracing record PID` starts one from outside (through
  # Control); STATIC_TRACING_RECORD, with the command's options, starts one
  # when the gem loads, in this process and in every process forked from it.
  module Recorder
    @lock = StaticTracing::STATE_LOCK
    @recording = nil
    @ended = nil
    # Why a recording ended, as the command that followed it says it.
    STOPPED_BY_PROCESS = "the process stopped it (StaticTracing::Recorder.stop)"
    CANCELLED = "the command that asked for it gave up waiting for it"
    # A start between reserving it and installing its ring (made outside the lock).
    @starting = false

    # A running recording. +by+: :process (this process's own code or
    # environment: forked children start their own) or :command (the
    # command that asked for it reads it; children start clean). +armed+:
    # tracepoint => its probe id in the ring (nil: the ring's probe table
    # was full, its calls are counted as dropped). +lease_until+: a
    # command's recording stops by itself when the command stops renewing
    # it (monotonic seconds).
    Recording = Struct.new(:id, :by, :settings, :path, :armed, :dumps, :lease, :lease_until, :table_full_said,
                           keyword_init: true)

    class << self
      # Starts recording the probes +probes+ name (patterns "provider:probe"
      # with * and ? wildcards; none for every probe). +flight+: keep the
      # newest records, overwriting the oldest (a flight recorder; take
      # snapshots with #dump); without it the ring waits for a reader and
      # counts what it cannot hold as dropped. +size+: of the ring's
      # records, e.g. "16M" (rounded up to a power of two). +dump_when+:
      # "provider:probe > 250ms": a call of that latency probe slower than
      # that writes a snapshot into +dump_dir+ (the stub directory unless
      # given), at most one every +dump_interval+ seconds, each of the
      # slow call and the +dump_window+ seconds before it (+dump_records+
      # at most), within the directory's budget (+max_dumps+ snapshots and
      # +max_dump_bytes+, whichever process wrote them); it implies +flight+. Raises ArgumentError for a bad setting and
      # RecorderError when the ring cannot be made (the message says why);
      # either way nothing changes. Returns #status.
      def start(**settings)
        begin_recording(RecordingOptions.settings(**settings), id: SecureRandom.hex(8), by: :process)
        status
      end

      # Stops the recording: every probe it armed is disarmed, and its ring
      # file removed. Returns false when nothing was recording.
      def stop
        stop_because(STOPPED_BY_PROCESS)
      end

      # Stops +recording+ if it still runs, with why it ended (#ended)
      # for the command that follows it. False when it did not run.
      def stop_because(reason, recording = @recording)
        @lock.synchronize do
          return false unless recording && running?(recording)

          end_recording(recording, reason)
          true
        end
      end

      # Why the last recording ended, for State (and so for the command
      # that followed it): {"id", "reason"}, or nil.
      def ended
        @lock.synchronize { @ended&.dup }
      end

      def recording?
        !@recording.nil?
      end

      # Whether +recording+ (a Recording) still runs: it may have been
      # stopped, or replaced, while a snapshot of it was written.
      def running?(recording)
        @recording.equal?(recording)
      end

      # Whether the running recording records +tracepoint+.
      def armed?(tracepoint)
        @recording&.armed&.key?(tracepoint) ? true : false
      end

      # Writes what the ring holds now as a trace file at +path+ (created,
      # mode 0600, never over an existing file nor through a link, sized to
      # the records it holds); returns the path. The process's other
      # threads go on, recording too, while it is copied.
      def dump(path)
        @recording or raise RecorderError, "nothing is being recorded, so there is nothing to dump"
        Snapshots.write(path)
      end

      # What the recording is, for State (and so for `static-tracing`), or nil.
      def status
        @lock.synchronize { @recording && Status.of(@recording) }
      end

      # For Control: starts the recording a command asked for (+settings+
      # as Settings#to_h sent them), which stops by itself +lease+ seconds
      # after the last #renew, if a lease is given (a command that follows
      # the ring renews it; a flight recording has none). Unless
      # +wait_for_probes+, a pattern or trigger that names no probe the
      # process has is refused (RequestChecks).
      def start_for_command(id, settings, lease, wait_for_probes: false, cancelled: nil)
        lease = Float(lease) if lease
        settings = RecordingOptions.from_h(settings)
        RequestChecks.check(settings) unless wait_for_probes
        begin_recording(settings, id:, by: :command, lease:, cancelled:)
      end

      # For Control: the command that asked for recording +id+ gave up
      # waiting for it; false when it does not run.
      def cancel(id)
        recording = @recording
        recording&.id == id && stop_because(CANCELLED, recording)
      end

      # For Control: the command following recording +id+ is still there.
      def renew(id)
        @lock.synchronize do
          recording = @recording
          raise RecorderError, "recording #{id} is not running" unless recording&.id == id && recording.lease

          recording.lease_until = now + recording.lease
        end
      end

      # For Control: stops recording +id+, or whichever runs when nil.
      # False when nothing was recording.
      def stop_recording(id)
        @lock.synchronize do
          recording = @recording or return false
          raise RecorderError, "another recording runs now (#{recording.id})" if id && recording.id != id

          stop_because("a request stopped it (static-tracing record #{Process.pid} --stop, or the command that " \
                       "started it)")
        end
      end

      # Called as a tracepoint is declared: one a running recording's
      # patterns name is recorded from now on.
      def declared(tracepoint)
        return unless @recording

        @lock.synchronize do
          next unless @recording && matches?(@recording, tracepoint)

          arm(tracepoint)
          # Once for a burst of declarations: the state counts what is armed.
          Watcher.soon(%i[recorder armed], Watcher.period) { State.publish }
        end
      end

      # Called as a method probe is declared: its method is wrapped if its
      # tracepoint is recorded.
      def method_probe_declared(probe)
        return unless @recording

        @lock.synchronize do
          MethodTracing.want(probe, :record) if @recording&.armed&.key?(probe.tracepoint)
        end
      end

      # Called by the Watcher when it wakes: a call exceeded a trigger's
      # threshold, so a snapshot is written (at most one an interval, within
      # the dump directory's budget).
      def take_trigger
        return unless @recording

        recording, taken = @lock.synchronize do
          recording = @recording or return
          taken = Native.recorder_take_trigger(now_ns + (recording.settings.dump_interval * 1e9).to_i) or return

          [recording, taken]
        end
        # Outside the lock: the copy of a large ring takes time, and
        # declaring a probe or a block's first call waits for the lock.
        Snapshots.after_trigger(recording, *taken)
      end

      # In a forked child: the parent's ring is let go of. A recording the
      # process started for itself starts again in the child, with the same
      # settings; one a command asked for does not (it reads the parent).
      # The state the child published as it started showed the parent's
      # recording: it is published again without it first.
      def restart_after_fork
        Native.recorder_after_fork
        recording = @recording or return

        @recording = nil
        Blocks.tracing_changed
        disarm_all(recording)
        State.publish
        begin_recording(recording.settings, id: SecureRandom.hex(8), by: :process) if recording.by == :process
      rescue StandardError => e
        warn("static_tracing: process #{Process.pid} does not record: #{e.class}: #{e.message}")
      end

      # STATIC_TRACING_RECORD: the options of `static-tracing record`
      # (probe patterns, --flight, --size, --dump-when, ...). Never stops
      # the application from booting: a bad value is warned about. A
      # process `static-tracing record -- COMMAND` started tells the
      # command how it went (Launcher).
      def configure_from_environment(env = ENV)
        launcher = Launcher.take(env)
        value = env["STATIC_TRACING_RECORD"].to_s
        return launcher&.refused("STATIC_TRACING_RECORD is empty") if value.strip.empty?

        begin_recording(RecordingOptions.parse_arguments(value), id: SecureRandom.hex(8), by: :process)
        launcher&.recording
      rescue ArgumentError, StaticTracing::Error => e
        warn("static_tracing: STATIC_TRACING_RECORD=#{value.inspect} not applied: #{e.message}", uplevel: nil)
        launcher&.refused(e.message)
      end

      private

      # The ring's file is made outside the lock (and without the GVL):
      # a large ring takes seconds to reserve, and the process's threads
      # go on meanwhile, declaring probes too.
      def begin_recording(settings, id:, by:, lease: nil, cancelled: nil)
        reserve_start
        begin
          settings = Snapshots.checked_directory(settings)
          path, on_disk = Native.recorder_start(settings.ring_size, settings.flight, Watcher.wake_fd,
                                                ProbeTable.names(settings))
          StaticTracing.warn_once([:ring_on_disk, File.dirname(path)], Status.on_disk(path, on_disk)) if on_disk
          @lock.synchronize do
            install(Recording.new(id:, by:, settings:, path:, armed: {}.compare_by_identity, dumps: [],
                                  lease:, lease_until: lease && (now + lease)), cancelled)
          end
        ensure
          @starting = false
        end
      end

      def reserve_start
        @lock.synchronize do
          raise RecorderError, Status.running_already(@recording) if @recording
          raise RecorderError, "a recording is being started already; stop it first, once it runs" if @starting
          raise RecorderError, "probes cannot be recorded on #{RUBY_PLATFORM}" unless StaticTracing.supported?

          @starting = true
        end
      end

      # Records into the ring Native.recorder_start made; if any step
      # fails, whatever was done is taken back, ring and probes armed.
      # A start cancelled while its ring was made (+cancelled+ says so)
      # is taken back before any probe is armed.
      def install(recording, cancelled = nil)
        installed = false
        raise RecorderError, "#{CANCELLED}, and it was not started" if cancelled&.call

        @recording = recording
        Blocks.tracing_changed
        arm_matching(recording)
        Lease.keep(recording) if recording.lease
        State.publish
        installed = true
      ensure
        end_recording(recording) unless installed
      end

      # +reason+: why it ended, for whoever followed it; nil for a start
      # taken back, which nobody followed.
      def end_recording(recording, reason = nil)
        @ended = Status.ended(recording, reason) if reason
        @recording = nil
        Blocks.tracing_changed
        disarm_all(recording)
        Native.recorder_stop
        State.publish
      end

      def arm_matching(recording)
        methods = method_probes
        StaticTracing.providers.each do |provider|
          provider.tracepoints.each_value do |tracepoint|
            arm(tracepoint, methods.fetch(tracepoint, [])) if matches?(recording, tracepoint)
          end
        end
      end

      def disarm_all(recording)
        methods = method_probes
        recording.armed.each_key { |tracepoint| disarm(tracepoint, methods.fetch(tracepoint, [])) }
      end

      # Tracepoint => the method probes it fires for, all at once: arming or
      # disarming thousands of tracepoints one lookup each.
      def method_probes
        MethodTracing.probes.group_by(&:tracepoint)
      end

      def matches?(recording, tracepoint)
        RecordingOptions.match?(recording.settings.probes, tracepoint.provider.name, tracepoint.name)
      end

      def arm(tracepoint, method_probes = MethodTracing.probes_of(tracepoint))
        recording = @recording
        return if recording.armed.key?(tracepoint)

        id = recording.armed[tracepoint] =
          Native.recorder_arm(tracepoint, tracepoint.latency_argument, tracepoint.stack_argument)
        ProbeTable.full(recording, tracepoint) if id.nil?
        trigger = recording.settings.dump_when
        if trigger && tracepoint.latency_argument &&
           RecordingOptions.match?([trigger.pattern], tracepoint.provider.name, tracepoint.name)
          Native.recorder_trigger(tracepoint, trigger.threshold_ns)
        end
        method_probes.each { |probe| MethodTracing.want(probe, :record) }
        Watcher.recording_changed(tracepoint, true)
      end

      def disarm(tracepoint, method_probes)
        Native.recorder_disarm(tracepoint)
        method_probes.each { |probe| MethodTracing.unwant(probe, :record) }
        Watcher.recording_changed(tracepoint, false)
      end

      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end

      def now_ns
        Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
      end
    end
  end
end
