# frozen_string_literal: true

require "json"
require_relative "process_start"

module StaticTracing
  # What this process publishes about its tracing, as `<pid>-<pidns>.state`
  # next to its stubs: mode, signal, whether tracing is on and, in attach
  # mode, which probes' methods are wrapped now ("armed"); where its control
  # channel is, what it records and the answer to the last request. The
  # `static-tracing` command reads it to enable, disable or toggle tracing
  # knowing the state, and never to send a signal the process does not
  # listen to.
  module State
    FORMAT = 1
    # How the native side's message starts when every directory was passed over.
    NOWHERE = "no stub directory is usable: "
    private_constant :NOWHERE

    class << self
      # Where the state was last published, or nil.
      attr_reader :path

      # The first state published opens the control channel next to it,
      # and is published again to say where that is.
      def publish
        return unless StaticTracing.supported?

        @path = Native.publish_state(JSON.generate(snapshot))
        @path = Native.publish_state(JSON.generate(snapshot)) if Control.open_once
        @path
      rescue StaticTracing::Error => e
        warn_unpublished(e.message)
        nil
      end

      def snapshot
        signal = SignalToggle.signal
        {
          "format" => FORMAT,
          "pid" => Process.pid,
          "start_time" => start_time,
          "mode" => Configuration.mode.to_s,
          "signal" => signal,
          "signal_number" => signal && Signal.list[signal],
          "enabled" => StaticTracing.enabled?,
          "armed" => (MethodTracing.armed_by_attach if Switch.attach_mode?),
          "block_errors" => Blocks.errors,
          "control" => Control.path,
          "recorder" => Recorder.status,
          "recorder_reply" => Control.reply,
          "recorder_ended" => Recorder.ended,
          "version" => VERSION,
          "ruby" => RUBY_VERSION
        }
      end

      private

      # Every directory passed over means stubs go to a memfd too; anything
      # else (no file descriptor left) is said as what it is.
      def warn_unpublished(message)
        if message.start_with?(NOWHERE)
          StaticTracing.warn_stub_directories(
            message.delete_prefix(NOWHERE),
            "cannot publish this process's tracing state for the static-tracing command, and probes will load " \
            "from a memfd (which bpftrace 0.25 and newer cannot attach to): no stub directory is usable"
          )
        else
          StaticTracing.warn_stub_directories(
            message, "cannot publish this process's tracing state for the static-tracing command"
          )
        end
      end

      # With the pid, it tells a reader that the file is this process's and
      # not one of an earlier process with the same pid.
      def start_time
        ProcessStart.of("/proc/self")
      end
    end
  end
end
