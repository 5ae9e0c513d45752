# frozen_string_literal: true

require "json"
require "open3"
require "tmpdir"
require "static_tracing/cli"

# `report --format chrome` opened by speedscope itself: its release bundle
# (the speedscope npm package, which bin/setup installs under tmp/npm) run
# under Node.js by spec/support/speedscope_import.js, which hands a file to
# speedscope's own importer as speedscope.app does when a file is dropped
# on it. speedscope reads every time as a JavaScript double: what it makes
# of the file is what a user sees.
module SpeedscopeImport
  RELEASE = File.join(E2E::ROOT, "tmp", "npm", "node_modules", "speedscope", "dist", "release")
  SCRIPT = File.join(E2E::ROOT, "spec", "support", "speedscope_import.js")

  # Two threads, each with stacks and with calls nested three deep (a
  # method, a latency block inside it, a method inside that).
  PROGRAM = <<~RUBY
    class ImportStacks
      include StaticTracing::StackTracer
      def leaf = :leaf
      def branch = leaf
    end
    class ImportCalls
      include StaticTracing::LatencyTracer
      def inner(n) = n.times.sum
      def outer(n)
        StaticTracing.latency(name: :block, provider: :import_blocks) { inner(n) }
      end
    end
    workers = 2.times.map do |number|
      Thread.new do
        Thread.current.name = "import-\#{number}"
        200.times do |i|
          ImportStacks.new.branch
          ImportCalls.new.outer(i % 50)
          ImportStacks.new.leaf
        end
      end
    end
    workers.each(&:join)
  RUBY
end

RSpec.describe "Chrome JSON as speedscope imports it", :subprocess do
  include CLIHelpers
  include E2E::Recording

  before(:context) do
    @dir = Dir.mktmpdir("static_tracing-speedscope")
    @trace = File.join(@dir, "app.trace")
    command = [RbConfig.ruby, "-I", E2E::LIB, "-r", "static_tracing", "-e", SpeedscopeImport::PROGRAM]
    @recording = run_cli("record", "-o", @trace, "--", *command, timeout: 60)
  end

  after(:context) { FileUtils.rm_rf(@dir) }

  let(:trace) { read_trace(@trace) }
  let(:node) { E2E.which("node") }
  let(:bundle) { Dir[File.join(SpeedscopeImport::RELEASE, "speedscope-*.js")].first }

  before do
    expect(@recording.exitstatus).to eq(0), @recording.stderr
    cannot_run!("node is not installed (bin/setup installs it)") unless node
    cannot_run!("#{SpeedscopeImport::RELEASE} holds no speedscope bundle (bin/setup installs it)") unless bundle
  end

  # The Chrome JSON report of the probes +pattern+ names, as speedscope
  # imports it from a file named +name+.
  def imported(pattern, name)
    path = File.join(@dir, "#{pattern.tr(":*", "__")}.json")
    result = run_cli("report", @trace, "--format", "chrome", "--probe", pattern, "-o", path, timeout: 60)
    expect(result).to have_attributes(exitstatus: 0, stderr: "")
    out, err, status = Open3.capture3(node, SpeedscopeImport::SCRIPT, bundle, path, name)
    expect(status).to be_success, err
    JSON.parse(out)
  end

  # Each call's duration in ns, by frame name, as speedscope has them.
  def durations(document)
    document["profiles"].flat_map { |profile| profile["calls"] }
                        .group_by(&:first)
                        .transform_values { |calls| calls.map { |_, start, stop| (stop - start) * 1000 }.sort }
  end

  def recorded_latencies(label)
    trace.records.select { |record| record.probe.label == label }.map { |record| record.args[0] }.sort
  end

  def expect_within_a_nanosecond(shown, recorded)
    expect(shown.size).to eq(recorded.size)
    shown.zip(recorded).each { |got, want| expect(got).to be_within(1).of(want) }
  end

  %w[app.json app.chrome.json].each do |name|
    it "reads the nested calls of two threads from #{name} with no warning, each lasting what was recorded" do
      document = imported("import_*", name)
      expect(document["warnings"]).to eq([])
      importer = name.end_with?(".chrome.json") ? "Chrome Timeline" : "Trace Event Format profile"
      expect(document["importer"]).to eq("Importing as #{importer}")
      latency = document["profiles"].reject { |profile| profile["name"].include?("stacks") }
      expect(latency.size).to eq(2)
      shown = durations("profiles" => latency)
      labels = %w[import_calls:outer import_calls:inner import_blocks:block]
      expect(shown.keys).to match_array(labels)
      report = JSON.parse(run_cli("report", @trace, "--format", "json", timeout: 60).stdout)
      labels.each do |label|
        expect_within_a_nanosecond(shown.fetch(label), recorded_latencies(label))
        max = report["probes"].find { |probe| probe["probe"] == label }["latency"]["max_ns"]
        expect(shown.fetch(label).max).to be_within(1).of(max)
      end
    end
  end

  it "reads the stacks of two threads with no warning, each frame lasting from its record to the next" do
    document = imported("import_stacks_stack", "stacks.json")
    expect(document["warnings"]).to eq([])
    expect(document["profiles"].size).to eq(2)
    stacks = trace.records.select { |record| record.probe.stack_arg }
    last = trace.records.map(&:time_ns).max
    document["profiles"].zip(stacks.group_by(&:tid).sort.map(&:last)).each do |profile, records|
      # The thread's root frame is on every stack: one run, from its first
      # stack to the file's last record.
      root = records.first.args[0].split(";").first
      runs = profile["calls"].select { |frame, _, _| frame == root }
      expect(runs.size).to eq(1)
      _, start, stop = runs.first
      expect((stop - start) * 1000).to be_within(1).of(last - records.first.time_ns)
      # Each stack ending in a leaf call is a run of it, but one that lasts
      # nothing (a thread's last stack, at the file's last record): a
      # flame graph has no room for it.
      leaves = records.count { |record| record.args[0].end_with?(";ImportStacks#leaf") && record.time_ns < last }
      expect(profile["calls"].count { |frame, _, _| frame == "ImportStacks#leaf" }).to eq(leaves)
    end
  end
end
