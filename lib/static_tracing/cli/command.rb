# frozen_string_literal: true

require "optparse"

module StaticTracing
  module CLI
    # One `static-tracing` command. A subclass names itself with ::command,
    # declares its options in #define_options and does its work in #execute,
    # returning the exit status; raising CLI::Error (or UsageError) reports
    # the message and exits non-zero.
    #
    #   class Hello < Command
    #     command "hello", arguments: "PID", summary: "Greets a process"
    #     def execute(args)
    #       out.puts "hello #{pid_argument(args)}"
    #       0
    #     end
    #   end
    class Command
      class << self
        attr_reader :command_name, :arguments, :summary, :description

        def command(name, arguments:, summary:, description: nil)
          @command_name = name
          @arguments = arguments
          @summary = summary
          @description = description
          CLI.register(name, self)
        end

        def help_text
          new(out: nil, err: nil, env: {}).parser.help
        end
      end

      attr_reader :out, :err, :env

      def initialize(out:, err:, env:)
        @out = out
        @err = err
        @env = env
        @help = false
        @version = false
      end

      def run(argv)
        args = parser.parse(argv)
        args.unshift(@pid_option) if @pid_option
        return show(parser.help) if @help
        return show("#{PROGRAM} #{VERSION}\n") if @version

        execute(args)
      rescue OptionParser::ParseError => e
        raise UsageError, e.message
      end

      def parser
        @parser ||= OptionParser.new do |parser|
          parser.banner = "Usage: #{PROGRAM} #{self.class.command_name} #{self.class.arguments}"
          parser.separator("")
          parser.separator(self.class.description || self.class.summary)
          parser.separator("")
          parser.separator("Options:")
          define_options(parser)
          define_pid_option(parser) if self.class.arguments.start_with?("PID")
          parser.on("-h", "--help", "Show this help") { @help = true }
          # Also keeps OptionParser's own --version, which exits, out of the way.
          parser.on("--version", "Show the version") { @version = true }
        end
      end

      private

      def define_options(_parser); end

      # rbspy's and py-spy's way of naming the process, taken as well.
      def define_pid_option(parser)
        parser.on("--pid PID", "The process, as rbspy and py-spy name it: the same as PID") do |pid|
          raise UsageError, "--pid given twice: #{@pid_option} and #{pid}" if @pid_option

          @pid_option = pid
        end
      end

      def show(text)
        out.print(text)
        0
      end

      def execute(_args)
        raise NotImplementedError, "#{self.class} must implement #execute"
      end

      # The process +pid+, which must have stubs loaded (or, if +empty+, at
      # least the gem).
      def loaded_target(pid, empty: false)
        target = Target.new(pid)
        target.ignored.each do |ignored|
          err.puts("#{PROGRAM}: ignored #{ignored.mapping}: #{ignored.reason}")
        end
        return target unless target.stubs.empty?
        return target if empty && target.extension_loaded?

        raise Error, no_stubs_message(target)
      end

      # Why a process that loaded the gem has no provider loaded.
      def no_providers_reason(pid, recording: true)
        "providers load on demand (Provider#load, or as tracepoints are declared in ON mode) or, in SIGNAL mode " \
          "(the default), after the process receives the configured signal (SIGTRAP unless configured otherwise: " \
          "kill -TRAP #{pid})#{recording_without_providers(pid) if recording}"
      end

      def no_stubs_message(target)
        pid = target.pid
        if target.extension_loaded?
          "process #{pid} has no static_tracing providers loaded: #{no_providers_reason(pid)}"
        else
          "process #{pid} has no static_tracing probes: it has not loaded the static_tracing gem " \
            "(no #{Target::EXTENSION} in /proc/#{pid}/maps); require it in that process first"
        end
      end

      # A process that records needs no provider loaded: what it records,
      # and why nothing is loaded, as its state says.
      def recording_without_providers(pid)
        state = ProcessState.new(pid).read
        recording = state&.recorder or return ""

        armed = recording["armed"].is_a?(Integer) ? count(recording["armed"], "probe") : "probes"
        ". It records #{armed}#{" (flight)" if recording["flight"]} all the same: the recorder needs no provider " \
          "loaded, and none is for a tracer (#{tracing_of(state)})"
      rescue Error, SystemCallError
        ""
      end

      def tracing_of(state)
        "mode #{state.mode}#{" (#{state.signal_name})" if state.mode == "signal"}, tracing " \
          "#{state.enabled ? "enabled" : "disabled"}"
      end

      # "1 probe", "2 probes": every command words its counts this way.
      def count(number, noun)
        "#{number} #{noun}#{"s" unless number == 1}"
      end

      # The one positional argument, a process id.
      def pid_argument(args)
        raise UsageError, "missing PID" if args.empty?
        raise UsageError, "expected one PID, got #{args.size} arguments: #{args.join(" ")}" if args.size > 1

        pid = args.first
        raise UsageError, "PID must be a positive integer, got #{pid.inspect}" unless pid.match?(/\A[1-9]\d*\z/)

        pid.to_i
      end
    end
  end
end
