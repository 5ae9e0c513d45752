# frozen_string_literal: true

require "shellwords"
require "socket"
require "io/wait"
require_relative "control_channel"

module StaticTracing
  module CLI
    # A program `static-tracing record -- COMMAND ARGS...` starts, as perf
    # and rbspy start theirs: with STATIC_TRACING_RECORD set, so that it
    # records from its first probe, in the command's process group, so that
    # Ctrl-C at a terminal reaches it as it reaches any foreground job. A
    # signal sent to static-tracing alone (kill, timeout(1)) is passed on
    # to it. Its exit status becomes the command's.
    class LaunchedCommand
      POLL_INTERVAL = 0.05
      # What a supervisor passes on to the program it runs rather than
      # dies of, leaving the program behind and its trace unwritten: the
      # interrupts, a hangup, and the signals applications take as requests
      # (reopen logs, reload).
      PASSED = %w[INT TERM HUP USR1 USR2].freeze
      SHOWN = 60
      # How a shell reports a program it could not run, or one killed by a signal.
      NOT_FOUND = 127
      NOT_EXECUTABLE = 126
      SIGNALLED = 128

      attr_reader :pid, :argv

      # +argv+: the program and its arguments; +settings+: what to record
      # (RecordingOptions::Settings).
      def initialize(argv, settings)
        @argv = argv
        @settings = settings
        @status = nil
      end

      # Starts it; raises NotStarted (with the exit code a shell would
      # give) if it cannot.
      def start
        @socket, theirs = UNIXSocket.pair
        @pid = ::Process.spawn(environment(theirs), *argv, theirs.fileno => theirs)
        self
      rescue SystemCallError => e
        raise NotStarted.new("cannot run #{argv.first}: #{CLI.reason(e)}",
                             e.is_a?(Errno::ENOENT) ? NOT_FOUND : NOT_EXECUTABLE)
      ensure
        theirs&.close
      end

      # It could not be started; +exit_code+ is the shell's for that.
      class NotStarted < Error
        attr_reader :exit_code

        def initialize(message, exit_code)
          super(message)
          @exit_code = exit_code
        end
      end

      # The program as a shell would show it, cut short: a line of the
      # command's says which program it speaks of, not all its arguments.
      def to_s
        line = Shellwords.join(argv)
        line.size > SHOWN ? "#{line[0, SHOWN]}..." : line
      end

      # The recording the program started for itself (a ControlChannel to
      # the process that records: the program, or a Ruby it started), or
      # nil if it started none (+refusal+ then says why, if it said). The
      # process waits, before running any of its code, until #ready.
      # Signals that would end the command are passed on to it meanwhile.
      def wait_for_recording
        passing_signals do
          loop do
            line = said
            return if line == :closed

            return recording_of(line) if line

            return if exited?
          end
        end
      end

      # Why the program did not record, as its process said, or nil.
      attr_reader :refusal

      # The command has the recording's ring open: the process goes on.
      def ready
        return if @socket.closed?

        @socket.write("ready\n")
      rescue SystemCallError, IOError
        nil
      ensure
        @socket.close
      end

      # Runs the block with the PASSED signals passed on to the program
      # instead of ending the command.
      def passing_signals(&)
        previous = PASSED.to_h { |signal| [signal, Signal.trap(signal) { |_| pass_on(signal) }] }
        yield
      ensure
        previous&.each { |signal, old| Signal.trap(signal, old || "DEFAULT") }
      end

      # A PASSED signal the command got: a terminal's Ctrl-C reached the
      # program already, being its foreground job too; anything else is
      # passed on.
      def pass_on(signal)
        return if signal == "INT" && terminal_reached_it?

        ::Process.kill(signal, pid)
      rescue SystemCallError
        nil
      end

      # Waits for the program to exit, passing signals on; its exit status
      # as a shell gives it.
      def wait
        passing_signals { reap(0) } until @status
        exit_code
      end

      def exited?
        reap(::Process::WNOHANG)
        !@status.nil?
      end

      def exit_code
        @status.exitstatus || (SIGNALLED + @status.termsig.to_i)
      end

      private

      # STATIC_TRACING_RECORD takes the options of `record`: the patterns
      # and the size; the program's own recording is a streaming one, which
      # the command reads as it would a process's it started. The socket
      # is how the process tells it (Recorder::Launcher).
      def environment(socket)
        value = [*@settings.probes, "--size", @settings.ring_size.to_s]
        { "STATIC_TRACING_RECORD" => Shellwords.join(value), "STATIC_TRACING_RECORD_LAUNCHER" => socket.fileno.to_s }
      end

      # A line the process said, :closed when every process that had the
      # socket closed it without a word, or nil for nothing yet.
      def said
        return unless @socket.wait_readable(POLL_INTERVAL)

        @socket.gets&.chomp || :closed
      rescue SystemCallError, IOError
        :closed
      end

      def recording_of(line)
        word, rest = line.split(" ", 2)
        return ControlChannel.new(Integer(rest, 10)) if word == "recording"

        @refusal = CLI.shown(rest) if word == "refused"
        nil
      rescue ArgumentError
        nil
      end

      def reap(flags)
        return if @status

        _, status = ::Process.wait2(pid, flags)
        @status = status if status
      rescue Errno::ECHILD
        nil
      end

      # Whether the command, and so the program, is the foreground job of
      # its terminal (/proc/self/stat: tty_nr, and tpgid its foreground
      # process group).
      def terminal_reached_it?
        fields = File.read("/proc/self/stat").rpartition(")").last.split
        pgrp, tty, foreground = fields.values_at(2, 4, 5).map(&:to_i)
        tty != 0 && foreground == pgrp
      rescue SystemCallError
        false
      end
    end
  end
end
