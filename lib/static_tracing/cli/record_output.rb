# frozen_string_literal: true

module StaticTracing
  module CLI
    # What `static-tracing record` writes and says once a recording it
    # followed (a LiveRecording) ends: the trace file, a line on it and the
    # report; and, on stderr, what did not go as asked. For Record.
    module RecordOutput
      private

      # Writes what +recording+ read and reports it; the exit status says
      # whether it ran as asked.
      def finish(recording, output)
        path = OutputFile.write(output, replace: !@output.nil?, beside: lambda { |reason, written|
          err.puts("#{PROGRAM}: not writing the trace to #{output}: #{reason}; it is in #{written} instead")
        }) { |file| recording.reader.write(file) }
        report(path, recording)
        say_unrecorded(recording)
        if recording.stop_failure
          err.puts("#{PROGRAM}: could not stop the recording: #{recording.stop_failure} (the process stops it by " \
                   "itself #{format("%g", Record::LEASE)}s after the last renewal)")
        end
        return 0 unless recording.cut_short?

        err.puts("#{PROGRAM}: the recording was cut short after #{format("%.1f", recording.seconds)}s: " \
                 "#{recording.ending.reason}; #{path} holds the #{count(recording.reader.records_read, "record")} " \
                 "read until then")
        EXIT_ERROR
      end

      # The probes named that the ring's probe table could not hold: their
      # calls are counted as dropped, not recorded.
      def say_unrecorded(recording)
        listed, total = recording.unrecorded
        return if total.zero?

        more = total - listed.size
        err.puts("#{PROGRAM}: #{count(total, "probe")} named cannot be recorded: the ring's probe table is full " \
                 "(#{listed.join(", ")}#{", and #{more} more" if more.positive?}); their calls count as dropped")
      end

      def default_output(pid)
        "static-tracing-#{pid}-#{Time.now.strftime("%Y%m%d-%H%M%S")}.trace"
      end

      def report(path, recording)
        why = { time: "", interrupt: " (interrupted)", exited: " (the process exited)",
                cut_short: " (cut short)", refused: " (cut short)" }.fetch(recording.ending.kind)
        # The report says how far apart the first record and the last are;
        # this, how long the recording ran.
        length = Durations.format((recording.seconds * 1e9).round)
        out.puts("Wrote #{count(recording.reader.records_read, "record")} to #{path}, from #{length} of " \
                 "recording#{why}.")
        out.puts
        Report.new(out:, err:, env:).run([path])
      end
    end
  end
end
