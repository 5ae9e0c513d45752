# frozen_string_literal: true

require "json"
require "tmpdir"
require "static_tracing/cli"

# `static-tracing record`, `dump` and `report` against a live process, run
# as an operator runs them: the process records, the command reads its
# ring from outside. No tracer is involved.
RSpec.describe "Recording a live process with static-tracing", :subprocess do
  include CLIHelpers
  include E2E::Recording

  # A process with two latency probes and a custom one; calls made on request.
  let(:setup) do
    <<~'RUBY'
      class RecApp
        include StaticTracing::LatencyTracer
        def index(value) = value
        def slow(seconds) = sleep(seconds)
      end
      EVENT = StaticTracing::Tracepoint.new(:rec_events, :event, Integer, String)
      APP = RecApp.new
      def run(count) = count.times { |i| APP.index(i) }
      def fire(count) = count.times { |i| EVENT.fire(i, "e") }
      def wrapped?(name) = RecApp.instance_method(name).owner != RecApp
    RUBY
  end

  let(:app) { ruby_repl(setup) }
  let(:dir) { Dir.mktmpdir("static_tracing-record") }

  after { FileUtils.rm_rf(dir) }

  def recorder_status
    app.evaluate("StaticTracing::Recorder.status")
  end

  describe "record" do
    it "records exactly the calls made while it runs, stops at Ctrl-C and leaves nothing armed" do
      trace = File.join(dir, "run.trace")
      command = start_record(app.pid, "rec_app:index", "-o", trace)
      expect(app.evaluate("wrapped?(:index)")).to be(true)
      expect(app.evaluate("wrapped?(:slow)")).to be(false)
      app.evaluate("run(500)")
      app.evaluate("EVENT.fire(1, 'not recorded')")
      output = interrupt_record(command)

      expect(output).to match(wrote_line(500, trace, "interrupted"))
      expect(output).to match(/^rec_app:index  500 calls, p50 \S+, p90 \S+, p99 \S+, max \S+$/)
      expect(recorded_calls(read_trace(trace))).to eq("rec_app:index" => 500)
      expect(read_trace(trace).lost).to eq(0)
      expect(app.evaluate("wrapped?(:index)")).to be(false)
      expect(recorder_status).to be_nil
    end

    it "writes what it recorded when Ctrl-C comes the moment it says it records" do
      trace = File.join(dir, "at_once.trace")
      output = interrupt_record(start_record(app.pid, "rec_app:index", "-o", trace))

      expect(output).to match(wrote_line(0, trace, "interrupted"))
      expect(read_trace(trace).records).to be_empty
      expect(eventually("the recording to stop") { recorder_status.nil? }).to be(true)
    end

    it "stops after --seconds, and writes the trace file it names" do
      trace = File.join(dir, "timed.trace")
      app.evaluate("Thread.new { loop { run(10); sleep 0.01 } }; nil")
      result = run_cli("record", app.pid, "--seconds", "0.5", "-o", trace, timeout: 30)
      expect(result.exitstatus).to eq(0), result.stderr
      expect(result.stdout).to start_with("Wrote ")
      # Not a terminal: no progress line.
      expect(result.stderr).not_to include("records read")
      expect(recorded_calls(read_trace(trace)).keys).to eq(["rec_app:index"])
      expect(eventually("the recording to stop") { recorder_status.nil? }).to be(true)
    end

    it "shows a terminal the time recorded and the records read and lost as it goes, then clears the line" do
      require "pty"
      trace = File.join(dir, "progress.trace")
      app.evaluate("Thread.new { loop { run(10); sleep 0.01 } }; nil")
      output = +""
      PTY.spawn(RbConfig.ruby, E2E::Recording::EXE, "record", app.pid.to_s, "--seconds", "1.5", "-o",
                trace) do |r, _, pid|
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
        begin
          while (left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)).positive? && r.wait_readable(left)
            output << r.readpartial(4096)
          end
        rescue EOFError, Errno::EIO
          # The command exited: its terminal is closed.
        end
        Process.kill("KILL", pid) unless Process.wait(pid, Process::WNOHANG)
      end
      lines = output.split(/\r\e\[K|\r?\n/)
      progress = lines.grep(/records read/)
      expect(progress).not_to be_empty, output
      expect(progress).to all(match(/\A\d+\.\ds: \d+ records read, none lost\z/))
      read = progress.map { |line| line[/(\d+) records/, 1].to_i }
      expect(read).to eq(read.sort)
      # Cleared before the report: the line after the last progress is "Wrote ...".
      expect(output).to match(/records read, none lost\r\e\[KWrote /)
    end

    it "reads a ring whose process was killed with SIGKILL while recording, to its last record" do
      trace = File.join(dir, "killed.trace")
      command = start_record(app.pid, "rec_app:*", "-o", trace)
      app.evaluate("run(300)")
      Process.kill("KILL", app.pid)
      expect(command.wait).to be_success, command.output

      expect(command.output).to match(wrote_line(300, trace, "the process exited"))
      expect(recorded_calls(read_trace(trace))).to eq("rec_app:index" => 300)
    end

    it "says why it cannot record, in one line, and changes nothing" do
      result = run_cli("record", app.pid, "--size", "1K")
      expect(result).to have_attributes(exitstatus: 2, stdout: "")
      expect(result.stderr).to match(/\Astatic-tracing record: ring size "1K" is out of range: from 64K to 4G/)
      expect(result.stderr.lines.size).to eq(1)

      result = run_cli("record", app.pid, "no:such:pattern")
      expect(result).to have_attributes(exitstatus: 2)
      expect(result.stderr).to include('invalid probe pattern "no:such:pattern"')
      expect(recorder_status).to be_nil
    end

    it "reads the ring of a flight recording that runs, for the time asked, and leaves it running" do
      app.evaluate("StaticTracing::Recorder.start(flight: true, size: '64K'); run(30); nil")
      trace = File.join(dir, "focused.trace")
      command = E2E::Child.new(RbConfig.ruby, CLIHelpers::EXE, "record", app.pid.to_s, "rec_app:index", "-o", trace)
      started_processes << command
      command.wait_for(/^Process #{app.pid} keeps a flight recording \(every probe\): reading its ring \(Ctrl-C/)
      app.evaluate("run(50); nil")
      output = interrupt_record(command)

      expect(output).to match(wrote_line(50, trace, "interrupted"))
      # Only what was made while it read: not the 30 calls before it, and
      # none of them counted as lost.
      expect(recorded_calls(read_trace(trace))).to eq("rec_app:index" => 50)
      expect(read_trace(trace).lost).to eq(0)
      expect(recorder_status).to include("flight" => true, "by" => "process")
    end

    it "says precisely why it cannot read a recording that runs, and what to run instead" do
      app.evaluate("StaticTracing::Recorder.start(probes: ['rec_app:slow'], flight: true, size: '64K'); nil")
      result = run_cli("record", app.pid, "rec_app:index", "--seconds", "1")
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to eq(
        "static-tracing: process #{app.pid} keeps a flight recording of rec_app:slow, which does not record " \
        "rec_app:index: read what it records (static-tracing record #{app.pid} rec_app:slow), or stop it first " \
        "(static-tracing record #{app.pid} --stop) and record what you asked\n"
      )
      app.evaluate("StaticTracing::Recorder.stop; nil")

      following = start_record(app.pid)
      result = run_cli("record", app.pid, "--seconds", "1")
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to start_with("static-tracing: process #{app.pid} is being recorded by another " \
                                          "static-tracing record already (recording ")
      expect(result.stderr).to end_with("wait for it to end, or stop it (static-tracing record #{app.pid} --stop)\n")
      interrupt_record(following)
    end

    it "names a process that does not run the gem as such" do
      sleeper = E2E::Child.new("sleep", "60")
      started_processes << sleeper
      result = run_cli("record", sleeper.pid)
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to eq("static-tracing: process #{sleeper.pid} has not loaded the static_tracing gem " \
                                  "(no static_tracing.so in /proc/#{sleeper.pid}/maps): require \"static_tracing\" " \
                                  "in it first\n")
    end
  end

  describe "flight mode and dump" do
    it "keeps the newest records after many wraparounds and says how many were lost" do
      result = run_cli("record", app.pid, "--flight", "--size", "64K")
      expect(result.exitstatus).to eq(0), result.stderr
      expect(result.stdout).to include("Process #{app.pid} keeps a flight recording of 3 probes " \
                                       "(every probe, and any declared later)")
      app.evaluate("fire(20_000)")

      trace = File.join(dir, "flight.trace")
      result = run_cli("dump", app.pid, "-o", trace)
      expect(result.exitstatus).to eq(0), result.stderr
      held = read_trace(trace)
      values = held.records.map { |record| record.args.first }
      expect(values.last).to eq(19_999)
      expect(values).to eq(values.sort)
      expect(values.first).to eq(20_000 - values.size)
      expect(held.lost).to eq(20_000 - values.size)
      expect(result.stdout).to eq("Wrote #{values.size} records of process #{app.pid} to #{trace} " \
                                  "(#{20_000 - values.size} records before them lost: see static-tracing report).\n")

      report = run_cli("report", trace)
      lost = 20_000 - values.size
      expect(report.stdout).to include("#{lost} lost (#{lost} overwritten in flight mode)")
      expect(recorder_status).to include("flight" => true)
      expect(run_cli("record", app.pid, "--stop").stdout).to eq("Stopped recording in process #{app.pid}.\n")
      expect(run_cli("record", app.pid, "--stop").stdout).to eq("Process #{app.pid} was not recording.\n")
      expect(app.evaluate("wrapped?(:index)")).to be(false)
    end

    it "has the process write a snapshot of a slow call and what every thread did before it" do
      result = run_cli("record", app.pid, "--dump-when", "rec_app:slow > 100ms", "--dump-dir", dir, "--size", "1M")
      expect(result.exitstatus).to eq(0), result.stderr
      expect(result.stdout).to include("Snapshots when rec_app:slow > 100ms, into #{dir}.")
      app.evaluate(<<~RUBY)
        threads = Array.new(3) { |t| Thread.new { 100.times { |i| APP.index(t * 1000 + i) } } }
        threads.each(&:join)
        APP.slow(0.01)
        APP.slow(0.2)
        nil
      RUBY
      # The process says so once the snapshot is written whole.
      said = app.wait_for(/static_tracing: rec_app:slow took 2\d\dms \(rec_app:slow > 100ms\): wrote (\S+)$/)
      snapshot = said[1]
      expect(Dir[File.join(dir, "#{app.pid}-rec_app-slow-*.trace")]).to eq([snapshot])

      trace = read_trace(snapshot)
      slow = trace.records.select { |record| record.probe.label == "rec_app:slow" }
      expect(slow.map { |record| record.args.first }).to include(be > 100_000_000)
      indexes = trace.records.select { |record| record.probe.label == "rec_app:index" }
      expect(indexes.map(&:tid).uniq.size).to eq(3)
      expect(indexes.size).to eq(300)
      expect(recorder_status["dumps"]).to eq([snapshot])
    end
  end

  describe "report of a real recording" do
    it "writes Chrome trace-event JSON in which every event has the fields the format requires" do
      trace = File.join(dir, "chrome.trace")
      command = start_record(app.pid, "-o", trace)
      app.evaluate("run(20); EVENT.fire(7, 'hello'); nil")
      interrupt_record(command)

      result = run_cli("report", "--format", "chrome", trace)
      expect(result.exitstatus).to eq(0), result.stderr
      events = JSON.parse(result.stdout)
      # Metadata: the process's name, and its thread's, which record read;
      # the thread's calls as a CPU profile too (a Profile and a chunk).
      expect(events.map { |event| event["ph"] }.tally).to eq("M" => 2, "X" => 20, "i" => 1, "P" => 2)
      events.each do |event|
        expect(event.keys).to include("name", "ph", "ts", "pid", "tid")
        expect(event["pid"]).to eq(app.pid)
        expect(event).to include("dur") if event["ph"] == "X"
        expect(event).to include("s" => "t") if event["ph"] == "i"
      end
      instant = events.find { |event| event["ph"] == "i" }
      expect(instant).to include("name" => "rec_events:event", "args" => { "arg0" => 7, "arg1" => "hello" })
    end
  end
end
