# frozen_string_literal: true

require "json"
require "rbconfig"

module E2E
  # `static-tracing record` and `dump` run as an operator runs them, against
  # real processes, and what they wrote read back (CLI::TraceFile), for the
  # recorder's end-to-end specs. Require static_tracing/cli to use it.
  module Recording
    EXE = File.join(ROOT, "exe", "static-tracing")
    # What `record` says once the process records, before it follows the ring.
    RECORDING = /^Recording \d+ probes? .* in process \d+/

    # `static-tracing record PID ARGS` in the background, returned once it
    # says the process records. +prefix+ runs it under another command
    # (E2E::Unprivileged), +exe+ from another copy of the gem.
    def start_record(pid, *args, prefix: [], exe: EXE, env: {})
      Child.new(*prefix, RbConfig.ruby, exe, "record", pid.to_s, *args.map(&:to_s), env:, chdir: "/").tap do |command|
        started_processes << command
        command.wait_for(RECORDING, timeout: 30)
      end
    end

    # Ctrl-C to a `record` started by #start_record: it stops the recording,
    # writes its trace file and prints its report. Returns what it printed;
    # fails unless it succeeded.
    def interrupt_record(command)
      Process.kill("INT", command.pid)
      status = command.wait(timeout: 60)
      raise "static-tracing record failed (#{status.inspect}):\n#{command.output}" unless status.success?

      command.output
    end

    # What `record` says of the trace file it wrote: +count+ records in
    # +path+, and why the recording ended (nil: its time was up).
    def wrote_line(count, path, why = nil)
      ending = why && " \\(#{Regexp.quote(why)}\\)"
      /^Wrote #{count} records? to #{Regexp.quote(path)}, from \S+ of recording#{ending}\.$/
    end

    def read_trace(path)
      StaticTracing::CLI::TraceFile.read(path)
    end

    # Calls per probe ("provider:probe") among the records of +trace+.
    def recorded_calls(trace)
      trace.records.map { |record| record.probe.label }.tally
    end

    # Calls per probe as a text report (`record`'s, `report`'s) gives them,
    # every probe of the files included: "no calls" is 0.
    def reported_calls(report)
      report.scan(/^(\w+:\w+)  (?:no calls|(\d+) calls?)\b/).to_h.transform_values(&:to_i)
    end

    # A map bpftrace printed, `@name[probe]`, by "provider:probe".
    def bpftrace_map(output, name)
      output.scan(/^@#{name}\[usdt:[^\]]*:(\w+):(\w+)\]: (-?\d+)$/)
            .to_h { |provider, probe, value| ["#{provider}:#{probe}", Integer(value)] }
    end

    # What process +pid+ publishes about its tracing (CLI::ProcessState). A
    # read that meets the process replacing its file finds none: it is read
    # again then.
    def published_state(pid)
      eventually("process #{pid} publishes its state") { StaticTracing::CLI::ProcessState.new(pid).read }
    end

    # Its state file as written, every field as the process wrote it.
    def raw_state(pid)
      JSON.parse(File.read(published_state(pid).path))
    end

    # The counters of a live ring's header (docs/recording.md): slots
    # reserved (head), records reserved and dropped, and slots the reader
    # consumed (tail). Each is one aligned word the writer changes atomically.
    def ring_counters(path)
      File.open(path, "rb") do |file|
        { head: 128, records: 192, dropped: 256, tail: 320 }.transform_values do |offset|
          file.pread(8, offset).unpack1("Q<")
        end
      end
    end

    # Where process +pid+'s ring is: in whichever directory it may keep
    # rings in (CLI::ProcessState#ring_dirs) holds one of its name; where
    # none does, a path in the first of them, which does not exist.
    def ring_path(pid)
      state = published_state(pid)
      paths = StaticTracing::CLI::ProcessState.new(pid).ring_dirs(state.path)
                                              .map { |dir| File.join(dir, StubNames.ring_file(pid)) }
      paths.find { |path| File.exist?(path) } || paths.first
    end
  end
end

# The recorder of this process, with tracing off (mode :off) while the
# example runs, so that only the recording arms anything; whatever the
# example started is stopped after it, and the mode put back.
RSpec.shared_context "with the recorder of this process" do
  around do |example|
    mode = StaticTracing::Configuration.mode
    StaticTracing::Configuration.mode = :off
    example.run
  ensure
    StaticTracing::Recorder.stop
    StaticTracing::Configuration.mode = mode
  end
end
