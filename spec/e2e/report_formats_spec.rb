# frozen_string_literal: true

require "json"
require "open3"
require "rexml/document"
require "tmpdir"
require "static_tracing/cli"

# `static-tracing report --format` read by the programs users open it
# with, on what a real program recorded (`record -- ruby ...`): speedscope's
# own schema (from its npm package, which bin/setup installs under tmp/npm),
# `go tool pprof` (Debian's golang-go), an XML parser for the SVG, and JSON
# for the rest.
module ReportFormats
  SPEEDSCOPE_SCHEMA = File.join(E2E::ROOT, "tmp", "npm", "node_modules", "speedscope", "dist", "release",
                                "file-format-schema.json")
  # Debian's Python, whose python3-jsonschema bin/setup installs (a python3
  # earlier on PATH may be another one).
  SYSTEM_PYTHON = "/usr/bin/python3"
  CALLS = { "formats_app:index" => 34, "formats_app:show" => 12, "formats_stacks_stack:leaf" => 8,
            "formats_stacks_stack:branch" => 3 }.freeze

  PROGRAM = <<~RUBY
    class FormatsApp
      include StaticTracing::LatencyTracer
      def index(value) = value
      def show(seconds) = sleep(seconds)
    end
    class FormatsStacks
      include StaticTracing::StackTracer
      def leaf = :leaf
      def branch = leaf
    end
    def outer = FormatsStacks.new.leaf
    30.times { |i| FormatsApp.new.index(i) }
    12.times { FormatsApp.new.show(0.001) }
    5.times { outer }
    3.times { FormatsStacks.new.branch }
    # Named, and alive a while after its calls: `record` reads a thread's
    # name while it runs.
    Thread.new do
      Thread.current.name = "formats-worker"
      4.times { FormatsApp.new.index(0) }
      sleep 0.5
    end.join
  RUBY
end

RSpec.describe "Report formats, as the programs that open them read them", :subprocess do
  include CLIHelpers
  include E2E::Recording

  # One recording for every example: recording a program takes a while.
  before(:context) do
    @dir = Dir.mktmpdir("static_tracing-formats")
    @trace = File.join(@dir, "app.trace")
    command = [RbConfig.ruby, "-I", E2E::LIB, "-r", "static_tracing", "-e", ReportFormats::PROGRAM]
    @recording = run_cli("record", "-o", @trace, "--", *command, timeout: 60)
  end

  after(:context) { FileUtils.rm_rf(@dir) }

  let(:trace) { @trace }
  let(:records) { read_trace(trace).records }

  before do
    expect(@recording.exitstatus).to eq(0), @recording.stderr
    expect(recorded_calls(read_trace(trace))).to eq(ReportFormats::CALLS)
  end

  def report(*args)
    result = run_cli("report", trace, *args, timeout: 60)
    expect(result).to have_attributes(exitstatus: 0, stderr: "")
    result.stdout
  end

  def report_to_file(format, *args)
    path = File.join(@dir, "report.#{format}")
    report("--format", format, "-o", path, *args)
    path
  end

  # Each stack the stack probes recorded, as its frames, root first.
  def recorded_stacks
    records.select { |record| record.probe.stack_arg }.map { |record| record.args[record.probe.stack_arg].split(";") }
  end

  def require_program!(path, component)
    cannot_run!("#{path} is not installed (bin/setup installs it)", component:) unless File.exist?(path)
  end

  it "json: the text report's figures, per probe" do
    document = JSON.parse(report("--format", "json"))
    expect(document).to include("files" => [trace], "records" => ReportFormats::CALLS.values.sum,
                                "lost" => { "total" => 0, "dropped" => 0, "overwritten" => 0, "being_written" => 0 })
    expect(document["probes"].to_h { |probe| [probe["probe"], probe["calls"]] }).to eq(ReportFormats::CALLS)
    show = document["probes"].find { |probe| probe["probe"] == "formats_app:show" }["latency"]
    durations = records.select { |record| record.probe.label == "formats_app:show" }.map { |record| record.args[0] }
    expect(show).to include("max_ns" => durations.max, "p50_ns" => durations.sort[5])
    expect(show["histogram"].sum { |bucket| bucket["count"] }).to eq(12)
  end

  it "speedscope: validates against the schema speedscope ships, with every call and stack in it" do
    require_program!(ReportFormats::SPEEDSCOPE_SCHEMA, :speedscope)
    require_program!(ReportFormats::SYSTEM_PYTHON, :speedscope)
    path = report_to_file("speedscope")
    check = "import json, sys, jsonschema\n" \
            "jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1])))\nprint('valid')"
    out, status = Open3.capture2e(ReportFormats::SYSTEM_PYTHON, "-c", check, ReportFormats::SPEEDSCOPE_SCHEMA, path)
    expect([out, status.success?]).to eq(["valid\n", true])

    document = JSON.parse(File.read(path))
    frames = document["shared"]["frames"].map { |frame| frame["name"] }
    opened = Hash.new(0)
    samples = []
    document["profiles"].each do |profile|
      if profile["type"] == "evented"
        profile["events"].each { |event| opened[frames[event["frame"]]] += 1 if event["type"] == "O" }
      else
        samples.concat(profile["samples"].map { |stack| stack.map { |frame| frames[frame] } })
      end
    end
    expect(opened).to eq(ReportFormats::CALLS.slice("formats_app:index", "formats_app:show"))
    expect(samples).to match_array(recorded_stacks)
    # The program's second thread has a profile of its own, named as it
    # named itself.
    evented = document["profiles"].select { |profile| profile["type"] == "evented" }.map { |profile| profile["name"] }
    expect(evented).to contain_exactly(/\Aruby \d+ thread \d+ \(ruby[\d.]*\): latency probes\z/,
                                       /\Aruby \d+ thread \d+ \(formats-worker\): latency probes\z/)
  end

  it "pprof: go tool pprof -top lists the probes' calls, and -tags counts each probe's samples" do
    go = E2E.which("go") || "/usr/lib/go/bin/go"
    require_program!(go, :pprof)
    path = report_to_file("pprof")
    top, status = Open3.capture2e(go, "tool", "pprof", "-top", path)
    expect(status).to be_success, top
    flat = top.scan(/^\s*(\d+)\s+\S+%\s+\S+%\s+\d+\s+\S+%\s+(.+)$/).to_h { |count, name| [name, count.to_i] }
    expect(flat).to include("formats_app:index" => 34, "formats_app:show" => 12, "FormatsStacks#leaf" => 8,
                            "FormatsStacks#branch" => 3)
    expect(top).to include("Total samples = #{ReportFormats::CALLS.values.sum}")

    tags, status = Open3.capture2e(go, "tool", "pprof", "-tags", path)
    expect(status).to be_success, tags
    probes = tags[/^ probe: .*?(?=^ \S|\z)/m].scan(/^\s+([\d.]+) \(.*?\): (\S+)$/)
    expect(probes.to_h { |count, probe| [probe, count.to_f] }).to eq(ReportFormats::CALLS.transform_values(&:to_f))
    expect(tags).to match(/^\s+4\.0 \(.*\): formats-worker$/)

    latency, status = Open3.capture2e(go, "tool", "pprof", "-top", "-sample_index=latency", "-unit=ns", path)
    expect(status).to be_success, latency
    shown = records.select { |record| record.probe.label == "formats_app:show" }.sum { |record| record.args[0] }
    expect(latency).to match(/^\s*#{shown}ns .*formats_app:show$/)
  end

  it "pprof: go tool pprof and speedscope open the same sample type, and keep every character of a frame's name" do
    go = E2E.which("go") || "/usr/lib/go/bin/go"
    require_program!(go, :pprof)
    node = E2E.which("node")
    bundle = Dir[File.join(File.dirname(ReportFormats::SPEEDSCOPE_SCHEMA), "speedscope-*.js")].first
    require_program!(node || "node", :speedscope)
    require_program!(bundle || ReportFormats::SPEEDSCOPE_SCHEMA.sub("file-format-schema.json", "speedscope-*.js"),
                     :speedscope)
    # A profile of stacks alone: no call has a latency.
    path = report_to_file("pprof", "--probe", "formats_stacks_stack")
    top, status = Open3.capture2e(go, "tool", "pprof", "-top", path)
    expect(status).to be_success, top
    expect(top).to include("Type: calls")
    names = recorded_stacks.flatten.uniq
    expect(names).to include(a_string_including("<main>"))
    names.each { |name| expect(top).to match(/ #{Regexp.quote(name)}$/) }

    out, err, status = Open3.capture3(node, File.join(E2E::ROOT, "spec", "support", "speedscope_import.js"),
                                      bundle, path)
    expect(status).to be_success, err
    document = JSON.parse(out)
    expect(document).to include("importer" => "Importing as protobuf encoded pprof file", "warnings" => [])
    expect(document["profiles"].size).to eq(1)
    profile = document["profiles"].first
    # Counts, not nanoseconds: the calls, as go tool pprof shows them.
    expect(profile["unit"]).to eq("none")
    leaf = profile["calls"].select { |frame, _, _| frame == "FormatsStacks#leaf" }.sum { |_, start, stop| stop - start }
    expect(leaf).to eq(ReportFormats::CALLS["formats_stacks_stack:leaf"])
    expect(profile["calls"].map(&:first).uniq).to match_array(names)
  end

  it "svg: well-formed XML that names every frame of every recorded stack" do
    svg = File.read(report_to_file("svg"))
    document = REXML::Document.new(svg)
    expect(document.root.name).to eq("svg")
    titles = REXML::XPath.match(document, "//title").map(&:text)
    frames = titles.filter_map { |title| title[/\A(.*) \(\d+ calls, [\d.]+%\)\z/, 1] }
    expect(frames).to include(*recorded_stacks.flatten.uniq)
    expect(titles).to include("Object#outer (5 calls, 45.45%)", "FormatsStacks#branch (6 calls, 54.55%)")
    expect(svg).to include("Widths count calls")
  end

  it "chrome: names each thread as its process named it" do
    document = JSON.parse(report("--format", "chrome"))
    names = document.select { |event| event["name"] == "thread_name" }
    worker = records.find { |record| record.probe.label == "formats_app:index" && record.tid != read_trace(trace).pid }
    expect(names).to include(include("ph" => "M", "tid" => worker.tid, "args" => { "name" => "formats-worker" }))
    threads, tracks = names.partition { |event| event["tid"] < 2**31 }
    expect(threads.map { |event| event["tid"] }).to match_array(records.map(&:tid).uniq)
    # The main thread's stacks, which a recording takes at points in time,
    # are on a track of their own beside its calls.
    main = threads.find { |event| event["tid"] == read_trace(trace).pid }
    expect(tracks.map { |event| event["args"]["name"] }).to eq(["#{main["args"]["name"]} stacks"])
  end

  it "chrome: a recording of stacks alone is a timeline of complete events, one per frame run" do
    document = JSON.parse(report("--format", "chrome", "--probe", "formats_stacks_stack"))
    complete = document.select { |event| event["ph"] == "X" }
    expect(complete).not_to be_empty
    expect(complete.map { |event| event["cat"] }.uniq).to eq(["stack"])
    expect(complete.map { |event| event["name"] }.uniq).to match_array(recorded_stacks.flatten.uniq)
    # The last stack's frames last until the last record.
    last = document.filter_map { |event| event["ts"] if event["ph"] == "i" }.max
    expect(complete.map { |event| event["ts"] + event["dur"] }.max).to eq(last)
  end
end
