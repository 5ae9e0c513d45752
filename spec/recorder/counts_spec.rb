# frozen_string_literal: true

require "tmpdir"
require "static_tracing/cli"

# lost = dropped + overwritten, exactly, while the process goes on
# writing: a record written after a read's cut is not the read's, and is
# never called lost; one before it is read. A 64M flight ring that has
# not wrapped holds every record written before the cut, so a dump of it,
# a trigger's snapshot and a streaming recording's trace lose none.
RSpec.describe "The counts of a recording read while it is written", :subprocess do
  include CLIHelpers
  include E2E::Recording

  # A thread fires count_flight:event with 1, 2, 3... about 100,000 a
  # second: far from filling a 64M ring (2,097,152 slots) in a spec's time.
  let(:app) do
    ruby_repl(<<~'RUBY')
      class CountApp
        include StaticTracing::LatencyTracer
        def slow(seconds) = sleep(seconds)
      end
      EVENT = StaticTracing::Tracepoint.new(:count_flight, :event, Integer)
      def write_on = $writer = Thread.new { i = 0; loop { 100.times { EVENT.fire(i += 1) }; sleep 0.001 } }
    RUBY
  end
  let(:dir) { Dir.mktmpdir("static_tracing-counts") }

  after { FileUtils.rm_rf(dir) }

  # The ring's records counter reached +count+.
  def wait_for_records(count)
    eventually("#{count} records are written", timeout: 30) do
      ring_counters(ring_path(app.pid))[:records] >= count
    end
  end

  # Every record 1..N with none missing, and nothing said lost.
  def expect_whole(trace)
    values = trace.records.map { |record| record.args.first }
    expect(values).to eq((1..values.size).to_a)
    expect([trace.lost, trace.dropped, trace.records_total]).to eq([0, 0, values.size])
    values.size
  end

  it "dumps a flight ring that never wrapped whole, while it is written: none lost, none overwritten" do
    expect(run_cli("record", app.pid, "count_flight:*", "--flight", "--size", "64M").exitstatus).to eq(0)
    app.evaluate("write_on; nil")
    wait_for_records(20_000)

    2.times do |round|
      trace = File.join(dir, "dump-#{round}.trace")
      result = run_cli("dump", app.pid, "-o", trace)
      expect(result.exitstatus).to eq(0), result.stderr
      held = expect_whole(read_trace(trace))
      expect(result.stdout).to eq("Wrote #{held} records of process #{app.pid} to #{trace}.\n")
      report = run_cli("report", trace).stdout
      expect(report.lines.first).to match(/\ARead 1 file: process #{app.pid}, #{held} records over \S+; none lost\.$/)
    end
  end

  it "snapshots a ring that never wrapped whole when a trigger fires, while it is written" do
    result = run_cli("record", app.pid, "--size", "64M", "--dump-when", "count_app:slow > 1ms", "--dump-dir", dir)
    expect(result.exitstatus).to eq(0), result.stderr
    app.evaluate("write_on; nil")
    wait_for_records(20_000)
    app.evaluate("CountApp.new.slow(0.01)")

    snapshot = app.wait_for(/static_tracing: count_app:slow took \S+ \(count_app:slow > 1ms\): wrote (\S+)$/)[1]
    trace = read_trace(snapshot)
    events = trace.records.select { |record| record.probe.label == "count_flight:event" }.map { |r| r.args.first }
    expect(events).to eq((1..events.size).to_a)
    expect([trace.lost, trace.dropped]).to eq([0, 0])
    expect(trace.records_total).to eq(trace.records.size)
  end

  it "writes a streaming recording whole, the process writing until it is stopped: none lost" do
    trace = File.join(dir, "streamed.trace")
    command = start_record(app.pid, "count_flight:*", "--size", "64M", "-o", trace)
    app.evaluate("write_on; nil")
    wait_for_records(20_000)
    output = interrupt_record(command)

    held = expect_whole(read_trace(trace))
    expect(output).to match(wrote_line(held, trace, "interrupted"))
    expect(output).to match(/^Read 1 file: process #{app.pid}, #{held} records over \S+; none lost\.$/)
  end
end
