# frozen_string_literal: true

require "tmpdir"
require "static_tracing/cli"

# A recording that ends before the command meant it to says so, in a
# `static-tracing:` line and its exit status, and keeps what it read: the
# process died (and its parent has not reaped it), the process stopped it
# (its lease lapsed while the command was suspended, or another command
# stopped it), or the ring could not hold every probe named.
RSpec.describe "A recording that ends early", :subprocess do
  include CLIHelpers
  include E2E::Recording

  let(:setup) do
    <<~'RUBY'
      class CutApp
        include StaticTracing::LatencyTracer
        def index(value) = value
      end
      APP = CutApp.new
      def run(count) = count.times { |i| APP.index(i) }
    RUBY
  end

  let(:app) { ruby_repl(setup) }
  let(:dir) { Dir.mktmpdir("static_tracing-cut") }

  after { FileUtils.rm_rf(dir) }

  describe "when the process dies and its parent has not reaped it" do
    # A parent that never waits for its child, which runs +setup+ and then
    # calls CutApp#index as many times as each line it reads says, or
    # exits at "exit".
    let(:family) do
      ruby_process(<<~RUBY)
        $stdout.sync = true
        child = fork do
          #{setup}
          StaticTracing::State.publish
          puts "child ready"
          while (line = $stdin.gets)
            exit if line.strip == "exit"
            run(Integer(line))
            puts "ran \#{line.strip}"
          end
        end
        puts "child \#{child}"
        sleep
      RUBY
    end

    def child_pid
      Integer(family.wait_for(/^child (\d+)$/)[1]).tap { family.wait_for(/^child ready$/) }
    end

    def zombie?(pid)
      File.read("/proc/#{pid}/stat").rpartition(")").last.split.first == "Z"
    end

    { "is killed with SIGKILL" => ->(pid, _) { Process.kill("KILL", pid) },
      "exits" => ->(_, family) { family.puts("exit") } }.each do |what, ending|
      it "writes what it read when the process #{what}, and says the process exited" do
        pid = child_pid
        trace = File.join(dir, "zombie.trace")
        command = start_record(pid, "cut_app:*", "-o", trace)
        family.puts("300")
        family.wait_for(/^ran 300$/)
        ending.call(pid, family)
        eventually("process #{pid} is a zombie") { zombie?(pid) }

        expect(command.wait).to be_success, command.output
        expect(command.output).to match(wrote_line(300, trace, "the process exited"))
        expect(recorded_calls(read_trace(trace))).to eq("cut_app:index" => 300)
      end
    end
  end

  describe "when the process stops the recording under the command" do
    it "says so, with why, when the lease lapsed while the command was suspended, and keeps what it read" do
      trace = File.join(dir, "lapsed.trace")
      command = start_record(app.pid, "cut_app:*", "-o", trace)
      app.evaluate("run(100)")
      eventually("the command read the 100 calls") { ring_counters(ring_path(app.pid))[:tail].positive? }
      Process.kill("STOP", command.pid)
      # What ten seconds without a renewal come to, without waiting for them.
      app.evaluate("StaticTracing::Recorder.instance_variable_get(:@recording).lease_until = 0")
      app.wait_for(/static_tracing: stopped recording \h+: static-tracing record did not renew it/)
      Process.kill("CONT", command.pid)
      status = command.wait

      expect(status.exitstatus).to eq(1), command.output
      expect(command.output).to match(wrote_line(100, trace, "cut short"))
      said = "process #{app.pid} stopped it: static-tracing record did not renew it for 10s (it was killed, " \
             "suspended, or too busy to); #{trace} holds the 100 records read until then"
      cut_short = /^static-tracing: the recording was cut short after [\d.]+s: #{Regexp.quote(said)}/
      expect(command.output).to match(cut_short)
      expect(recorded_calls(read_trace(trace))).to eq("cut_app:index" => 100)
    end

    it "says so when another command stopped it" do
      trace = File.join(dir, "stopped.trace")
      command = start_record(app.pid, "cut_app:*", "-o", trace)
      app.evaluate("run(40)")
      expect(run_cli("record", app.pid, "--stop").stdout).to eq("Stopped recording in process #{app.pid}.\n")
      status = command.wait

      expect(status.exitstatus).to eq(1), command.output
      expect(command.output).to match(wrote_line(40, trace, "cut short"))
      expect(command.output).to include("process #{app.pid} stopped it: a request stopped it (static-tracing " \
                                        "record #{app.pid} --stop, or the command that started it)")
      expect(recorded_calls(read_trace(trace))).to eq("cut_app:index" => 40)
    end
  end

  describe "the ring's probe table" do
    # +count+ probes of names long enough that a default table (about 60
    # KiB) holds fewer than 1,100 of them, each fired once by fire_all.
    def declare(provider, count)
      app.evaluate(<<~RUBY)
        WIDE = Array.new(#{count}) do |i|
          StaticTracing::Tracepoint.new(:#{provider}, format("probe_number_%04d_of_many", i), Integer)
        end
        def fire_all = WIDE.each_with_index { |tracepoint, i| tracepoint.fire(i) }
        nil
      RUBY
    end

    it "holds every probe named as the recording starts, however many" do
      declare(:cut_wide, 1500)
      trace = File.join(dir, "wide.trace")
      command = start_record(app.pid, "cut_wide:*", "-o", trace)
      app.evaluate("fire_all")
      output = interrupt_record(command)

      expect(output).to include("Recording 1500 probes")
      expect(output).not_to include("cannot be recorded")
      recorded = read_trace(trace)
      expect(recorded_calls(recorded).size).to eq(1500)
      expect(recorded_calls(recorded).values).to all(eq(1))
      expect(recorded.lost).to eq(0)
    end

    it "names the probes declared later that it could not hold, on the process's stderr and the command's" do
      trace = File.join(dir, "late.trace")
      command = start_record(app.pid, "cut_late:*", "--wait-for-probes", "-o", trace)
      declare(:cut_late, 1500)
      app.evaluate("fire_all")
      app.wait_for(/static_tracing: recording \h+ cannot record cut_late:probe_number_\d+_of_many \(nor probes/)
      output = interrupt_record(command)

      recorded = read_trace(trace)
      left_out = 1500 - recorded_calls(recorded).size
      expect(left_out).to be_positive
      expect(recorded.dropped).to eq(left_out)
      first = format("cut_late:probe_number_%04d_of_many", 1500 - left_out)
      said = output.lines.grep(/cannot be recorded/)
      expect(said.size).to eq(1), output
      expect(said.first).to start_with("static-tracing: #{left_out} probes named cannot be recorded: the ring's " \
                                       "probe table is full (#{first}, ")
      expect(said.first).to end_with(", and #{left_out - 20} more); their calls count as dropped\n")
    end
  end
end
