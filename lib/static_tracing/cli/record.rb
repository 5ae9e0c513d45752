# frozen_string_literal: true

require "securerandom"
require_relative "../recording_options"
require_relative "output_file"
require_relative "control_channel"
require_relative "trace_file"
require_relative "live_recording"
require_relative "launched_command"
require_relative "record_output"
require_relative "flight_reading"

module StaticTracing
  module CLI
    # `static-tracing record PID [PATTERN...]`: has the process record the
    # probes named and follows its ring until --seconds pass or Ctrl-C, then
    # stops it and writes the trace file; with --flight, leaves a flight
    # recorder running in the process instead (`dump` snapshots it,
    # `record PID --stop` ends it). `record [PATTERN...] -- COMMAND` starts
    # a program recording from its start and follows it to its exit.
    class Record < Command
      include RecordOutput
      include FlightReading

      command "record",
              arguments: "PID [PROBE-PATTERN...] [--seconds N] [-o FILE] [--wait-for-probes] [--flight [--size SIZE] " \
                         "[--dump-when TRIGGER]] [--stop] | [PROBE-PATTERN...] [options] -- COMMAND [ARGS...]",
              summary: "Record a process's probes in the process itself: no root, no BPF",
              description: <<~TEXT.chomp
                Has process PID record the calls of its probes into a ring in memory (/dev/shm, or
                $STATIC_TRACING_RING_DIR: nothing goes to a disk), and reads them from there: no root, no
                capability, no BPF; run it as the process's user or root.
                PROBE-PATTERN is provider:probe or provider, with * and ? as wildcards (every probe when
                none is given), and those declared later that a pattern names. A pattern that names no
                probe the process has is refused as a typo, with the list of its probes, unless
                --wait-for-probes says to wait for probes the application has yet to declare. Only the
                probes named are armed, and nothing is left armed afterwards.

                Without --flight, follows the ring for N seconds (or until Ctrl-C), then stops the
                recording, writes the trace file (-o FILE, or static-tracing-PID-TIME.trace here) and
                prints its report (see static-tracing report). With --flight, the process keeps the
                newest records in its ring until static-tracing record PID --stop; static-tracing dump
                PID -o FILE writes what it holds. --dump-when 'my_controller:show > 250ms' has the process
                write such a snapshot itself when a call is slower than that (flight mode), into
                --dump-dir: a directory the process's user may write to, relative to here if relative.
                While the process keeps a flight recording (STATIC_TRACING_RECORD, say), record PID
                reads that ring from now on instead, for N seconds, and leaves it running.

                With -- COMMAND ARGS... instead of a PID, starts COMMAND recording from its first probe
                (STATIC_TRACING_RECORD) and follows it until it exits (or --seconds pass), then writes the
                trace file and its report, and exits with COMMAND's status. Ctrl-C reaches COMMAND as any
                foreground job's; SIGINT or SIGTERM sent to static-tracing is passed on to it.
              TEXT

      DEFAULT_SECONDS = nil
      MAX_SECONDS = 86_400
      # The process stops a recording by itself this long after the last
      # renewal: what a `record` killed with SIGKILL leaves running.
      LEASE = 10.0

      # `record [options] -- COMMAND ARGS...`: whatever follows `--` is
      # the program to start, never patterns or options.
      def run(argv)
        split = argv.index("--")
        @launch = split && argv[(split + 1)..]
        super(split ? argv[0...split] : argv)
      end

      private

      def define_options(parser)
        @values = {}
        @seconds = DEFAULT_SECONDS
        @output = nil
        @stop = false
        @wait_for_probes = false
        parser.on("--seconds N", "Record for N seconds (default: until Ctrl-C)") { |value| @seconds = seconds(value) }
        parser.on("--duration N", "The same as --seconds N (rbspy's name)") { |value| @seconds = seconds(value) }
        parser.on("-o", "--output FILE", "Write the trace file to FILE") { |path| @output = path }
        RecordingOptions.define(parser, @values)
        parser.on("--wait-for-probes", "Accept patterns (and a --dump-when) that match no probe yet: record " \
                                       "the probes declared later that match") { @wait_for_probes = true }
        parser.on("--stop", "Stop the process's recording (a flight recorder), and nothing else") { @stop = true }
      end

      def seconds(text)
        value = Float(text, exception: false) || 0.0
        return value if value.positive? && value <= MAX_SECONDS

        raise UsageError, "--seconds must be a number of seconds above 0, at most #{MAX_SECONDS}, got #{text.inspect}"
      end

      def execute(args)
        return launch(args) if @launch
        raise UsageError, "missing PID" if args.empty?

        @pid = pid = pid_argument(args.first(1))
        return stop(pid) if @stop

        settings = recording_settings(args.drop(1))
        recorder = ControlChannel.new(pid)
        check_dump_dir(recorder, settings)
        term_as_interrupt { settings.flight ? start_flight(recorder, settings) : record(recorder, settings) }
      end

      # SIGTERM (kill, timeout(1), a shell's background job, where SIGINT
      # is ignored) ends the command as Ctrl-C does: a request waited for
      # is cancelled, a recording followed is written.
      def term_as_interrupt
        previous = Signal.trap("TERM") { raise Interrupt }
        yield
      ensure
        Signal.trap("TERM", previous || "DEFAULT")
      end

      # The process checks its dump directory again; checked here too, the
      # mistake is said before anything starts, in the words of the command.
      def check_dump_dir(recorder, settings)
        dir = settings.dump_dir or return
        problem = recorder.directory_problem(dir) or return

        raise Error, "process #{recorder.pid} could not write snapshots into #{dir}: #{problem} (--dump-dir)"
      end

      # What every record request carries besides its settings. A large
      # ring takes seconds to make: the command waits for it, and says so.
      def request_fields(settings)
        size = RecordingOptions.format_size(RecordingOptions.slots_size(settings.ring_size))
        waiting = lambda do
          err.puts("Process #{@pid} is making its ring (#{size}, all of it reserved now): waiting until it is " \
                   "ready (Ctrl-C gives up, and the recording then does not start)...")
        end
        { settings: settings.to_h, wait_for_probes: @wait_for_probes, waiting: }
      end

      # Options that only make sense together are refused apart.
      # A relative --dump-dir is the command's, not the process's: it is
      # made absolute here, before the process sees it.
      def recording_settings(patterns)
        absolute_dump_dir
        settings = RecordingOptions.settings(probes: patterns, **@values)
        trigger_only = @values.keys & RecordingOptions::SnapshotOptions::DEFAULTS.keys
        if settings.dump_when.nil? && !trigger_only.empty?
          raise UsageError, "--dump-dir, --dump-interval, --max-dumps, --max-dump-bytes, --dump-window and " \
                            "--dump-records go with --dump-when"
        end

        if settings.flight && (@seconds || @output)
          raise UsageError, "--seconds and -o go without --flight (a flight recording runs until --stop; " \
                            "#{PROGRAM} dump writes what it holds)"
        end

        settings
      rescue ArgumentError => e
        raise UsageError, e.message
      end

      # Starts COMMAND recording from its start, follows its ring until it
      # exits (or --seconds pass), writes the trace, and exits as it did.
      def launch(patterns)
        raise UsageError, "missing COMMAND after --" if @launch.empty?
        if @stop || @values[:flight] || @values[:dump_when]
          raise UsageError, "--flight, --dump-when and --stop go with a PID, not a COMMAND"
        end

        settings = recording_settings(patterns)
        output = OutputFile.check(@output || default_output(0), replace: !@output.nil?)
        command = LaunchedCommand.new(@launch, settings).start
        follow_launched(command, settings, output)
      rescue LaunchedCommand::NotStarted => e
        err.puts("#{PROGRAM}: #{e.message}")
        e.exit_code
      end

      def follow_launched(command, settings, output)
        recorder = command.wait_for_recording or return never_recorded(command)

        recording = LiveRecording.new(recorder, recorder.recording["id"], leased: false)
        # Said once the signals are passed on, as the program is let go.
        let_go = lambda do
          err.puts("Recording probes (#{patterns(settings)}) in process #{recorder.pid} (#{command}) from its " \
                   "start until it exits#{@seconds ? " or #{format("%g", @seconds)}s pass" : ""} (Ctrl-C is " \
                   "passed to it)...")
          command.ready
        end
        recording.follow(seconds: @seconds, interrupt: ->(signal) { command.pass_on(signal) },
                         opened: let_go, signals: LaunchedCommand::PASSED)
        finish(recording, @output ? output : default_output(recorder.pid))
        wait_for(command)
      rescue Error => e
        # The program is the user's: it is never left behind, nor ended.
        err.puts("#{PROGRAM}: #{e.message}")
        wait_for(command)
      ensure
        command.ready
      end

      # Nothing to follow: the program goes on all the same, and the
      # command ends as it does.
      def never_recorded(command)
        why = command.refusal ? "its recording was refused: #{command.refusal}" : "it did not load static_tracing"
        err.puts("#{PROGRAM}: #{command} records nothing: #{why}")
        command.wait
      end

      # Once its trace is written, the command ends as its program does.
      def wait_for(command)
        out.flush
        unless command.exited?
          err.puts("#{PROGRAM}: process #{command.pid} (#{command}) goes on; waiting for it to exit (Ctrl-C is " \
                   "passed to it)...")
        end
        command.wait
      end

      def absolute_dump_dir
        dump_dir = @values[:dump_dir]
        @values[:dump_dir] = File.expand_path(dump_dir) if dump_dir.is_a?(String) && !dump_dir.empty?
      end

      def stop(pid)
        recorder = ControlChannel.new(pid)
        message = recorder.request("stop")
        out.puts(message == "stopped" ? "Stopped recording in process #{pid}." : "Process #{pid} was not recording.")
        0
      end

      def start_flight(recorder, settings)
        recorder.request("record", **request_fields(settings))
        status = recorder.recording
        slots = status["size"] / TraceFile.reader::SLOT_SIZE
        out.puts("Process #{recorder.pid} keeps a flight recording of #{count(status["armed"], "probe")} " \
                 "(#{patterns(settings)}) in #{CLI.shown(status["ring"])}: the newest #{slots} one-Integer records " \
                 "or so.")
        if status["dump_when"]
          out.puts("Snapshots when #{CLI.shown(status["dump_when"])}, into #{CLI.shown(status["dump_dir"])}.")
        end
        out.puts("#{PROGRAM} dump #{recorder.pid} -o FILE writes what it holds; " \
                 "#{PROGRAM} record #{recorder.pid} --stop ends it.")
        0
      end

      # What the patterns name: the process also arms a probe declared
      # after the start that they match.
      def patterns(settings)
        "#{settings.probes.empty? ? "every probe" : settings.probes.join(", ")}, and any declared later"
      end

      def record(recorder, settings)
        running = recorder.recording
        return read_flight(recorder, settings, running) if running

        id = SecureRandom.hex(8)
        output = OutputFile.check(@output || default_output(recorder.pid), replace: !@output.nil?)
        recorder.request("record", id:, lease: LEASE, **request_fields(settings))
        recording = LiveRecording.new(recorder, id, leased: true)
        # Said once Ctrl-C is trapped and the ring open: from the line on,
        # an interrupt writes what was recorded.
        recording_said = lambda do
          err.puts("Recording #{count(recording.status["armed"], "probe")} (#{patterns(settings)}) in process " \
                   "#{recorder.pid}#{@seconds ? " for #{format("%g", @seconds)}s" : ""} (Ctrl-C to stop)...")
          say_unrecorded(recording)
        end
        recording.follow(seconds: @seconds, progress: (err if err.tty?), opened: recording_said)
        finish(recording, output)
      end
    end

    # `static-tracing dump PID -o FILE`: what a process's ring holds now,
    # as a trace file; the recording goes on.
    class Dump < Command
      command "dump",
              arguments: "PID -o FILE",
              summary: "Write what a process's recorder holds now (a flight recording) to a trace file",
              description: <<~TEXT.chomp
                Reads the ring of process PID as it is (the process goes on recording) and writes the
                records it holds to the trace file FILE, for static-tracing report. Start a flight
                recording first with static-tracing record PID --flight.
              TEXT

      private

      def define_options(parser)
        @output = nil
        parser.on("-o", "--output FILE", "The trace file to write") { |path| @output = path }
      end

      def execute(args)
        pid = pid_argument(args)
        raise UsageError, "missing -o FILE" unless @output

        recorder = ControlChannel.new(pid)
        OutputFile.check(@output)
        counts = nil
        recorder.open_ring do |ring|
          OutputFile.write(@output) { |file| counts = TraceFile.dump(ring, recorder.recording["ring"], file) }
        end
        records, lost = counts
        before = " (#{count(lost, "record")} before them lost: see static-tracing report)" if lost.positive?
        out.puts("Wrote #{count(records, "record")} of process #{pid} to #{@output}#{before}.")
        0
      end
    end
  end
end
