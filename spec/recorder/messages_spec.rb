# frozen_string_literal: true

require "tmpdir"
require "static_tracing/cli"

# What `list`, `dump`, `record` and STATIC_TRACING_RECORD say of a
# recording says what is true of it, and what to do next.
RSpec.describe "What is said of a recording", :subprocess do
  include CLIHelpers
  include E2E::Recording

  let(:setup) do
    <<~'RUBY'
      class SaidApp
        include StaticTracing::LatencyTracer
        def index(value) = value
      end
      def run(count) = count.times { |i| SaidApp.new.index(i) }
    RUBY
  end

  let(:app) { ruby_repl(setup) }
  let(:dir) { Dir.mktmpdir("static_tracing-said") }

  after { FileUtils.rm_rf(dir) }

  it "list, on a process that records with tracing off, lists no provider and says it records all the same" do
    app.evaluate("StaticTracing::Recorder.start(flight: true, size: '64K'); nil")
    result = run_cli("list", app.pid)

    expect(result).to have_attributes(exitstatus: 0, stderr: "")
    summary, why = result.stdout.lines
    expect(summary).to start_with("PID #{app.pid}: 0 providers, 0 probes, 0 attached; mode signal (SIGTRAP), " \
                                  "tracing disabled, recording")
    expect(why).to start_with("No providers loaded: providers load on demand")
      .and end_with("(SIGTRAP unless configured otherwise: kill -TRAP #{app.pid}).\n")
  ensure
    app.evaluate("StaticTracing::Recorder.stop")
  end

  it "dump, after the recording was stopped, says how it ended and how to start the one it needs" do
    expect(run_cli("record", app.pid, "--flight", "--size", "64K").exitstatus).to eq(0)
    expect(run_cli("record", app.pid, "--stop").exitstatus).to eq(0)
    result = run_cli("dump", app.pid, "-o", File.join(dir, "after.trace"))

    expect(result).to have_attributes(exitstatus: 1, stdout: "")
    expect(result.stderr).to eq(
      "static-tracing: process #{app.pid} is not recording (its last recording ended: a request stopped it " \
      "(static-tracing record #{app.pid} --stop, or the command that started it)); dump writes what a flight " \
      "recording holds: start one with static-tracing record #{app.pid} --flight\n"
    )
    expect(Dir.children(dir)).to be_empty
  end

  it "record says how long it recorded, beside the span of the records the report gives" do
    trace = File.join(dir, "length.trace")
    app.evaluate("run(2)")
    command = start_record(app.pid, "said_app:*", "--seconds", "1", "-o", trace)
    app.evaluate("run(2)")
    expect(command.wait).to be_success, command.output

    # Seconds, the length asked for; the two calls, microseconds apart.
    length = command.output[/^Wrote 2 records to \S+, from ([\d.]+)s of recording\.$/, 1]
    expect(length.to_f).to be_between(1.0, 30.0), command.output
    expect(command.output).to match(/^Read 1 file: process \d+, 2 records over [\d.]+(ns|us);/)
  end

  describe "STATIC_TRACING_RECORD" do
    { "--seconds 30" => "--seconds is static-tracing record's: it follows the ring and writes the trace file " \
                        "when the time is up, which a process cannot do for itself (its recording runs until " \
                        "stopped); to record a program's first seconds, run it as static-tracing record " \
                        "--seconds N -- COMMAND",
      "--flight -o x.trace" => "-o is static-tracing record's, which writes the trace file;" }.each do |value, why|
      it "refuses #{value} at boot, saying why and what to run instead" do
        child = ruby_process("puts \"recording: \#{StaticTracing::Recorder.recording?}\"",
                             env: { "STATIC_TRACING_RECORD" => value })
        expect(child.wait).to be_success, child.output

        expect(child.output).to include("recording: false")
        expect(child.output).to include("static_tracing: STATIC_TRACING_RECORD=#{value.inspect} not applied: #{why}")
      end
    end
  end
end
