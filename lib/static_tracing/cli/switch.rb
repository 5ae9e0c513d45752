# frozen_string_literal: true

require_relative "process_state"

module StaticTracing
  module CLI
    # `static-tracing enable|disable|toggle PID`: sends a process the signal
    # it toggles tracing on, once its published state (ProcessState) says
    # that it listens to that signal and that the signal would make the
    # change asked for; then waits until the process publishes the change.
    #
    # A signal the process does not handle would end it, so nothing is sent
    # unless all of that holds.
    class SwitchCommand < Command
      DEFAULT_TIMEOUT = 5.0
      POLL_INTERVAL = 0.02

      private

      def define_options(parser)
        @timeout = DEFAULT_TIMEOUT
        parser.on("--timeout SECONDS", Float,
                  "How long to wait for the process to report the change (default #{DEFAULT_TIMEOUT.to_i})") do |value|
          raise UsageError, "--timeout must be more than 0, got #{value}" unless value.positive?

          @timeout = value
        end
      end

      def execute(args)
        process = ProcessState.new(pid_argument(args))
        state = process.read or raise Error, missing_message(process)
        check_signal_mode(process, state)
        wanted = wanted_state(state.enabled)
        if wanted == state.enabled
          out.puts("Tracing is already #{word(wanted)} in process #{process.pid}; nothing sent.")
          return 0
        end

        send_signal(process, state)
        wait_for(process, state, wanted)
        out.puts("Tracing #{word(wanted)} in process #{process.pid} (sent #{state.signal_name}).")
        0
      end

      # true to have tracing on, false off, given whether it is on now.
      def wanted_state(_enabled)
        raise NotImplementedError
      end

      def word(enabled)
        enabled ? "enabled" : "disabled"
      end

      def check_signal_mode(process, state)
        pid = process.pid
        case state.mode
        when "on"
          raise Error, "process #{pid} runs static_tracing in mode on: tracing is always on there and no signal " \
                       "switches it, so nothing was sent. To switch it with #{PROGRAM} enable/disable/toggle, run " \
                       "it in mode signal (STATIC_TRACING_MODE=signal, the default, or " \
                       "StaticTracing::Configuration.mode = :signal); its own code can also call " \
                       "StaticTracing.disable!"
        when "off"
          raise Error, "process #{pid} runs static_tracing in mode off: only its own code switches tracing " \
                       "(StaticTracing.enable!/disable!, tracing is #{word(state.enabled)} now) and no signal " \
                       "does, so nothing was sent. To switch it with #{PROGRAM} enable/disable/toggle, run it in " \
                       "mode signal (STATIC_TRACING_MODE=signal, the default, or " \
                       "StaticTracing::Configuration.mode = :signal)"
        when "attach"
          raise Error, "process #{pid} runs static_tracing in mode attach: each traced method is wrapped while a " \
                       "tracer is attached to its probe, so there is nothing to switch and nothing was sent. " \
                       "Attach a tracer (bpftrace -p #{pid}, or #{PROGRAM} latency #{pid}); " \
                       "#{PROGRAM} list #{pid} shows which methods are armed"
        end
      end

      # The state file could be left from a time the process caught the
      # signal: the kernel's word is checked too.
      def send_signal(process, state)
        pid = process.pid
        unless process.catches?(state.signal_number)
          raise Error, "process #{pid} does not catch #{state.signal_name} now (SigCgt in /proc/#{pid}/status), " \
                       "although its state file #{state.path} says it toggles tracing on it; nothing was sent, " \
                       "since the signal could end the process"
        end
        ::Process.kill(state.signal_number, pid)
      rescue Errno::ESRCH
        raise Error, "process #{pid} exited before #{state.signal_name} could be sent"
      rescue Errno::EPERM
        raise Error, process.process.permission_message("sending #{state.signal_name} to process #{pid}")
      end

      def wait_for(process, sent, wanted)
        deadline = CLI.monotonic + @timeout
        loop do
          state = process.read
          return state if state&.enabled == wanted
          raise Error, "process #{process.pid} exited after it was sent #{sent.signal_name}" unless process.alive?

          raise Error, timeout_message(process, sent, state, wanted) if CLI.monotonic > deadline

          sleep(POLL_INTERVAL)
        end
      end

      # The process caught the signal (SigCgt said so before it was sent),
      # so either static_tracing has not applied it yet, or a handler that
      # is not static_tracing's took it.
      def timeout_message(process, sent, state, wanted)
        pid = process.pid
        now = state ? "#{state.path} still says tracing is #{word(state.enabled)}" : "its state file is gone"
        "process #{pid} was sent #{sent.signal_name} but did not report tracing #{word(wanted)} within " \
          "#{format("%g", @timeout)}s: #{now}. It may be busy (a toggle loads every provider; try a longer " \
          "--timeout); or its own code trapped #{sent.signal_name} (Signal.trap, sigaction) after static_tracing " \
          "took it, so that the signal reaches that handler instead of static_tracing's: leave " \
          "#{sent.signal_name} to static_tracing or give it another signal (STATIC_TRACING_SIGNAL=" \
          "#{(SignalRules.names - [sent.signal]).last}); or it was applied together with another one (check " \
          "with #{PROGRAM} list #{pid}); run the command again to retry"
      end

      def missing_message(process)
        pid = process.pid
        unless gem_loaded?(pid)
          return "process #{pid} has not loaded the static_tracing gem (no #{Target::EXTENSION} in " \
                 "/proc/#{pid}/maps): require \"static_tracing\" in it first; nothing was sent"
        end

        looked = process.candidates.map { |candidate| "#{candidate.dir} (#{candidate.origin})" }.join(", ")
        rejected = process.rejected.map { |file| "; #{file}" }.join
        "process #{pid} has loaded static_tracing but published no tracing state the command can use (no " \
          "#{process.file_name} owned by its user in #{looked}, as process #{pid} sees them#{rejected}), so it " \
          "is not known which signal it listens to; nothing was sent. Check its stderr for \"cannot publish " \
          "this process's tracing state\" (which says why each directory was skipped); or it changed " \
          "STATIC_TRACING_DIR after it started, or runs a static_tracing older than #{VERSION}"
      end

      def gem_loaded?(pid)
        Target.new(pid).extension_loaded?
      rescue Error
        false
      end
    end

    # `static-tracing enable PID`.
    class Enable < SwitchCommand
      command "enable",
              arguments: "PID [--timeout SECONDS]",
              summary: "Turn tracing on in a process, with the signal it is configured for",
              description: <<~TEXT.chomp
                Turns tracing on in process PID, which runs static_tracing in mode signal (the
                default): sends it its toggle signal (SIGTRAP unless configured otherwise) and waits
                until it reports tracing on. Does nothing if tracing is on already. Reads what the
                process publishes about itself (<pid>-<pidns>.state next to its stubs) first, and sends
                nothing to a process that does not listen to a signal.
              TEXT

      private

      def wanted_state(_enabled)
        true
      end
    end

    # `static-tracing disable PID`.
    class Disable < SwitchCommand
      command "disable",
              arguments: "PID [--timeout SECONDS]",
              summary: "Turn tracing off in a process, with the signal it is configured for",
              description: <<~TEXT.chomp
                Turns tracing off in process PID, which runs static_tracing in mode signal (the
                default): sends it its toggle signal and waits until it reports tracing off (method
                wrappers removed, providers the toggle loaded unloaded). Does nothing if tracing is
                off already. Sends nothing to a process that does not listen to a signal.
              TEXT

      private

      def wanted_state(_enabled)
        false
      end
    end

    # `static-tracing toggle PID`.
    class Toggle < SwitchCommand
      command "toggle",
              arguments: "PID [--timeout SECONDS]",
              summary: "Turn tracing on if it is off in a process, off if it is on",
              description: <<~TEXT.chomp
                Switches tracing in process PID, which runs static_tracing in mode signal (the
                default): sends it its toggle signal and waits until it reports the change. Sends
                nothing to a process that does not listen to a signal.
              TEXT

      private

      def wanted_state(enabled)
        !enabled
      end
    end
  end
end
