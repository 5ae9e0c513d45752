# frozen_string_literal: true

require_relative "version"
require_relative "errors"
require_relative "cli/errors"
require_relative "cli/shown"

module StaticTracing
  # The `static-tracing` executable. Each command is a Command subclass
  # that registers itself by name; #run dispatches to it and turns errors
  # into one line on stderr and an exit status.
  #
  # It deliberately loads neither the native extension nor the rest of the
  # gem: it inspects other processes from the outside, and those may run
  # another Ruby, or none of this gem's code but its stubs. It loads the
  # reader of the recorder's files (StaticTracing.trace_reader) when it
  # reads one; see ARCHITECTURE.md.
  module CLI
    PROGRAM = "static-tracing"
    EXIT_ERROR = 1
    EXIT_USAGE = 2
    EXIT_INTERRUPTED = 130

    @commands = {}

    class << self
      # Command name => Command subclass, in the order they were defined.
      attr_reader :commands

      def register(name, command)
        @commands[name] = command
      end

      # Runs the command line +argv+ and returns the exit status. What it
      # writes is flushed before it returns, so that an error writing it is
      # said (Output).
      def run(argv, out: $stdout, err: $stderr, env: ENV)
        argv = argv.dup
        out = Output.new(out, "stdout")
        err = Output.new(err, "stderr", text: true)
        name = argv.shift
        status = case name
                 when nil then usage_error(err, "no command given")
                 when "-h", "--help", "help" then help(argv.first, out, err)
                 when "-v", "--version", "version" then version(out)
                 else dispatch(name, argv, out:, err:, env:)
                 end
        out.flush
        status
      rescue Output::Failed => e
        report(err, "#{PROGRAM}: #{e.message}", EXIT_ERROR)
      rescue Errno::EPIPE
        0
      end

      # What went wrong in a system call (its errno's own words, without the
      # path Ruby adds) or an IOError, for messages that name the file
      # themselves: "No space left on device".
      def reason(error)
        error.is_a?(SystemCallError) ? SystemCallError.new(nil, error.errno).message : error.message
      end

      # Seconds on the clock every wait and deadline of the command uses.
      def monotonic
        ::Process.clock_gettime(::Process::CLOCK_MONOTONIC)
      end

      def help_text
        width = commands.keys.map(&:size).max
        lines = commands.map { |name, command| format("    %-#{width}s  %s", name, command.summary) }
        <<~HELP
          Usage: #{PROGRAM} COMMAND [options]

          Inspects and traces the USDT probes that the static_tracing gem creates in a
          running Ruby process.

          Commands:
          #{lines.join("\n")}

          Run `#{PROGRAM} COMMAND --help` for a command's options.
        HELP
      end

      private

      def dispatch(name, argv, out:, err:, env:)
        command = commands[name]
        return usage_error(err, "unknown command #{name.inspect}") unless command

        command.new(out:, err:, env:).run(argv)
      rescue UsageError => e
        report(err, "#{PROGRAM} #{name}: #{e.message} (see #{PROGRAM} #{name} --help)", EXIT_USAGE)
      rescue Interrupted => e
        report(err, "#{PROGRAM}: #{e.message}", EXIT_INTERRUPTED)
      rescue Error => e
        report(err, "#{PROGRAM}: #{e.message}", EXIT_ERROR)
      rescue Interrupt
        EXIT_INTERRUPTED
      rescue Errno::EPIPE
        0
      rescue SystemExit, SignalException
        raise
      rescue Exception => e # rubocop:disable Lint/RescueException -- one line, never a backtrace
        report(err, "#{PROGRAM} #{name}: #{bug(e)}", EXIT_ERROR)
      end

      # What failed that is not the user's to fix, in one line: a native
      # panic (InternalError says so itself), or any other exception.
      def bug(error)
        return error.message if error.is_a?(InternalError)

        "internal error: #{error.class}: #{error.message.lines.first&.chomp} " \
          "(a bug in #{PROGRAM} #{VERSION}: please report it, with the command line)"
      end

      def help(name, out, err)
        text = name ? commands[name]&.help_text : help_text
        return usage_error(err, "unknown command #{name.inspect}") unless text

        out.print(text)
        0
      end

      def version(out)
        out.puts("#{PROGRAM} #{VERSION}")
        0
      end

      def usage_error(err, message)
        report(err, "#{PROGRAM}: #{message} (commands: #{commands.keys.join(", ")}; see #{PROGRAM} --help)",
               EXIT_USAGE)
      end

      # Where stderr cannot be written to either, the status says it all.
      def report(err, message, status)
        err.puts(message)
        status
      rescue Output::Failed, Errno::EPIPE
        status
      end
    end
  end
end

require_relative "cli/output"
require_relative "cli/target"
require_relative "cli/command"
require_relative "cli/list"
require_relative "cli/latency"
require_relative "cli/switch"
require_relative "cli/record"
require_relative "cli/report"
require_relative "cli/export"
