# frozen_string_literal: true

module StaticTracing
  module CLI
    # `record PID` while the process keeps a flight recording (from boot,
    # say): its ring is read, as export reads it, from now on for the time
    # asked, and the flight recording goes on. Any other recording, or one
    # that does not record what was asked, is refused with what to run.
    # What the process's state says (its recording's id, its probes) is
    # shown through CLI.shown.
    module FlightReading
      private

      def read_flight(recorder, settings, running)
        problem = flight_problem(settings, running)
        raise Error, "process #{recorder.pid} #{problem}" if problem

        output = OutputFile.check(@output || default_output(recorder.pid), replace: !@output.nil?)
        recording = LiveRecording.new(recorder, running["id"], leased: false, borrowed: true)
        # Said once the reader took its start in the ring: what is made
        # from then on is in the trace.
        reading = lambda do
          err.puts("Process #{recorder.pid} keeps a flight recording (#{flight_probes(running)}): reading its ring" \
                   "#{@seconds ? " for #{format("%g", @seconds)}s" : ""} (Ctrl-C to stop); the trace holds every " \
                   "probe it records, and the flight recording goes on...")
        end
        recording.follow(seconds: @seconds, progress: (err if err.tty?), opened: reading)
        finish(recording, output)
      end

      def flight_problem(settings, running)
        return another_recording(running) unless running["flight"]

        flight = Array(running["probes"])
        missing = settings.probes.empty? ? ["every probe"] : settings.probes - flight
        return if flight.empty? || missing.empty?

        flight = flight.map { |probe| CLI.shown(probe) }
        missing = missing.map { |probe| CLI.shown(probe) }

        "keeps a flight recording of #{flight.join(", ")}, which does not record #{missing.join(", ")}: " \
          "read what it records (#{PROGRAM} record #{@pid} #{flight.join(" ")}), or stop it first " \
          "(#{PROGRAM} record #{@pid} --stop) and record what you asked"
      end

      def another_recording(running)
        "is being recorded by another #{PROGRAM} record already (recording #{CLI.shown(running["id"])}, " \
          "which reads and frees its ring as it goes: a second reader would take records from it); " \
          "wait for it to end, or stop it (#{PROGRAM} record #{@pid} --stop)"
      end

      def flight_probes(running)
        flight = Array(running["probes"])
        flight.empty? ? "every probe" : flight.map { |probe| CLI.shown(probe) }.join(", ")
      end
    end
  end
end
