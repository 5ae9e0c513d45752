# frozen_string_literal: true

require "securerandom"
require_relative "../recording_options"
require_relative "output_file"
require_relative "control_channel"
require_relative "trace_file"

module StaticTracing
  module CLI
    # `static-tracing record PID [PATTERN...]`: has the process record the
    # probes named and follows its ring until --seconds pass or Ctrl-C, then
    # stops it and writes the trace file; with --flight, leaves a flight
    # recorder running in the process instead (`dump` snapshots it,
    # `record PID --stop` ends it).
    class Record < Command
      command "record",
              arguments: "PID [PROBE-PATTERN...] [--seconds N] [-o FILE] [--wait-for-probes] [--flight [--size SIZE] " \
                         "[--dump-when TRIGGER]] [--stop]",
              summary: "Record a process's probes in the process itself: no root, no BPF",
              description: <<~TEXT.chomp
                Has process PID record the calls of its probes into a ring next to its stubs, and reads
                them from there: no root, no capability, no BPF; run it as the process's user or root.
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
              TEXT

      DEFAULT_SECONDS = nil
      MAX_SECONDS = 86_400
      POLL_INTERVAL = 0.1
      # The process stops a recording by itself this long after the last
      # renewal: what a `record` killed with SIGKILL leaves running.
      LEASE = 10.0
      RENEW_INTERVAL = 1.0

      private

      def define_options(parser)
        @values = {}
        @seconds = DEFAULT_SECONDS
        @output = nil
        @stop = false
        @wait_for_probes = false
        parser.on("--seconds N", "Record for N seconds (default: until Ctrl-C)") { |value| @seconds = seconds(value) }
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
        raise UsageError, "missing PID" if args.empty?

        pid = pid_argument(args.first(1))
        return stop(pid) if @stop

        settings = recording_settings(args.drop(1))
        recorder = ControlChannel.new(pid)
        check_dump_dir(recorder, settings)
        settings.flight ? start_flight(recorder, settings) : record(recorder, settings)
      end

      # The process checks its dump directory again; checked here too, the
      # mistake is said before anything starts, in the words of the command.
      def check_dump_dir(recorder, settings)
        dir = settings.dump_dir or return
        problem = recorder.directory_problem(dir) or return

        raise Error, "process #{recorder.pid} could not write snapshots into #{dir}: #{problem} (--dump-dir)"
      end

      # What every record request carries besides its settings.
      def request_fields(settings)
        { settings: settings.to_h, wait_for_probes: @wait_for_probes }
      end

      # Options that only make sense together are refused apart.
      # A relative --dump-dir is the command's, not the process's: it is
      # made absolute here, before the process sees it.
      def recording_settings(patterns)
        absolute_dump_dir
        settings = RecordingOptions.settings(probes: patterns, **@values)
        trigger_only = @values.keys & %i[dump_dir dump_interval max_dumps]
        if settings.dump_when.nil? && !trigger_only.empty?
          raise UsageError, "--dump-dir, --dump-interval and --max-dumps go with --dump-when"
        end

        if settings.flight && (@seconds || @output)
          raise UsageError, "--seconds and -o go without --flight (a flight recording runs until --stop; " \
                            "#{PROGRAM} dump writes what it holds)"
        end

        settings
      rescue ArgumentError => e
        raise UsageError, e.message
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
        slots = status["size"] / RecordingOptions::SLOT_SIZE
        out.puts("Process #{recorder.pid} keeps a flight recording of #{count(status["armed"], "probe")} " \
                 "(#{patterns(settings)}) in #{status["ring"]}: the newest #{slots} one-Integer records or so.")
        out.puts("Snapshots when #{status["dump_when"]}, into #{status["dump_dir"]}.") if status["dump_when"]
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
        id = SecureRandom.hex(8)
        OutputFile.check(@output || default_output(recorder.pid), replace: !@output.nil?)
        recorder.request("record", id:, lease: LEASE, **request_fields(settings))
        status = recorder.recording
        err.puts("Recording #{count(status["armed"], "probe")} (#{patterns(settings)}) in process #{recorder.pid}" \
                 "#{@seconds ? " for #{format("%g", @seconds)}s" : ""} (Ctrl-C to stop)...")
        trace = follow(recorder, id)
        path = write_trace(@output || default_output(recorder.pid), trace)
        report(path, trace)
      end

      # Reads the ring until the time is up, Ctrl-C or the process exits;
      # then stops the recording and reads what is left. The ring stays
      # open all along: a ring whose process was killed is read whole.
      def follow(recorder, id)
        recorder.open_ring(write: true) do |ring|
          reader = TraceFile::RingReader.new(ring)
          ended = poll_until_done(recorder, id, reader)
          stop_recording(recorder, id) unless ended == :exited
          reader.take_rest
          Trace.new(reader, ended)
        end
      end

      # What a recording produced: the reader, which holds the records it
      # read, and why it ended (:time, :interrupt, :exited).
      Trace = Struct.new(:reader, :ended)

      # SIGTERM (kill, timeout(1), a shell's background job, where SIGINT
      # is ignored) ends the recording as Ctrl-C does.
      def poll_until_done(recorder, id, reader)
        previous = Signal.trap("TERM") { raise Interrupt }
        poll(recorder, id, reader)
      ensure
        Signal.trap("TERM", previous || "DEFAULT")
      end

      def poll(recorder, id, reader)
        deadline = @seconds && (monotonic + @seconds)
        renewed = monotonic
        loop do
          reader.take
          return :time if deadline && monotonic >= deadline
          return :exited unless recorder.alive?

          if monotonic - renewed >= RENEW_INTERVAL
            recorder.notify("renew", id:)
            renewed = monotonic
          end
          sleep(POLL_INTERVAL)
        end
      rescue Interrupt
        :interrupt
      end

      # The process may have exited meanwhile: then there is nothing to stop.
      def stop_recording(recorder, id)
        recorder.request("stop", recording: id)
      rescue Error => e
        raise unless recorder.alive?

        err.puts("#{PROGRAM}: #{e.message}")
      end

      def default_output(pid)
        "static-tracing-#{pid}-#{Time.now.strftime("%Y%m%d-%H%M%S")}.trace"
      end

      def write_trace(path, trace)
        OutputFile.write(path, replace: !@output.nil?) { |file| trace.reader.write(file) }
      end

      def report(path, trace)
        why = { time: "", interrupt: " (interrupted)", exited: " (the process exited)" }.fetch(trace.ended)
        out.puts("Wrote #{count(trace.reader.records_read, "record")} to #{path}#{why}.")
        out.puts
        Report.new(out:, err:, env:).run([path])
      end

      def monotonic
        ::Process.clock_gettime(::Process::CLOCK_MONOTONIC)
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
