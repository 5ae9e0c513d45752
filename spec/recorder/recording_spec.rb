# frozen_string_literal: true

require "static_tracing/cli"

# The recorder in this process: what it arms, what it records, and that it
# leaves nothing armed behind. The ring is read back as static-tracing reads
# it (CLI::TraceFile), from its file.
RSpec.describe StaticTracing::Recorder do
  include E2E::Helpers
  include_context "with the recorder of this process"

  include_context "traced classes"

  # What the running recording's ring holds now.
  def ring
    StaticTracing::CLI::TraceFile.read(described_class.status.fetch("ring"))
  end

  def calls(trace, label)
    trace.records.select { |record| record.probe.label == label }
  end

  describe "what it arms" do
    let!(:controller) do
      define_class(:RecController) do
        include StaticTracing::LatencyTracer
        def index = :index
        def show(id) = id
      end
    end

    it "wraps only the methods of the probes named, and unwraps them when it stops" do
      described_class.start(probes: ["rec_controller:index"])

      expect(wrapped?(controller, :index)).to be(true)
      expect(wrapped?(controller, :show)).to be(false)
      expect(described_class.status).to include("probes" => ["rec_controller:index"], "armed" => 1)
      expect(described_class.stop).to be(true)
      expect(wrapped?(controller, :index)).to be(false)
      expect(described_class.stop).to be(false)
    end

    it "takes a provider alone as all its probes, and no pattern as every probe" do
      StaticTracing::Tracepoint.new(:rec_other, :event, Integer)
      described_class.start(probes: [:rec_controller])
      expect(described_class.status["armed"]).to eq(2)
      described_class.stop
      described_class.start
      expect(described_class.status["armed"]).to eq(3)
    end

    it "arms a probe declared later that a pattern names, and only that one" do
      described_class.start(probes: ["rec_late:*"])
      late = define_class(:RecLate) do
        include StaticTracing::LatencyTracer
        def work = 1
      end
      unnamed = StaticTracing::Tracepoint.new(:rec_unnamed, :event, Integer)

      expect(wrapped?(late, :work)).to be(true)
      expect(unnamed.recorded?).to be(false)
      3.times { late.new.work }
      expect(calls(ring, "rec_late:work").size).to eq(3)
    end

    it "leaves what tracing wraps for its own reasons wrapped when it stops" do
      StaticTracing.enable!
      described_class.start(probes: ["rec_controller:*"])
      described_class.stop
      expect(wrapped?(controller, :index)).to be(true)
    ensure
      StaticTracing.disable!
    end

    it "makes enabled? true for the probes it records, so their arguments are computed" do
      recorded = StaticTracing::Tracepoint.new(:rec_custom, :hit, Integer)
      other = StaticTracing::Tracepoint.new(:rec_custom_other, :hit, Integer)
      described_class.start(probes: ["rec_custom:*"])
      expect([recorded.enabled?, recorded.recorded?, other.enabled?]).to eq([true, true, false])
      described_class.stop
      expect(recorded.enabled?).to be(false)
    end
  end

  describe "what it records" do
    it "records every call, exactly, with the method's result and exceptions untouched" do
      controller = define_class(:RecExact) do
        include StaticTracing::LatencyTracer
        def index(value) = value * 2
        def fail = raise(ArgumentError, "no")
      end
      described_class.start(probes: ["rec_exact:*"])
      object = controller.new
      results = Array.new(1000) { |i| object.index(i) }
      7.times { expect { object.fail }.to raise_error(ArgumentError, "no") }

      trace = ring
      expect(results).to eq(Array.new(1000) { |i| i * 2 })
      expect(calls(trace, "rec_exact:index").size).to eq(1000)
      expect(calls(trace, "rec_exact:fail").size).to eq(7)
      expect(trace.lost).to eq(0)
      index = trace.probes.find { |probe| probe.label == "rec_exact:index" }
      expect([index.types, index.latency_arg]).to eq([["Integer"], 0])
      expect(calls(trace, "rec_exact:index").map { |record| record.args.first }).to all(be_positive)
    end

    it "records each thread's calls under its own thread id" do
      worker = define_class(:RecThreads) do
        include StaticTracing::LatencyTracer
        def work = nil
      end
      described_class.start(probes: ["rec_threads:*"])
      threads = Array.new(4) { Thread.new { 250.times { worker.new.work } } }
      threads.each(&:join)

      by_thread = calls(ring, "rec_threads:work").group_by(&:tid)
      expect(by_thread.size).to eq(4)
      expect(by_thread.values.map(&:size)).to all(eq(250))
    end

    it "records a tracepoint's arguments as fired: Integers, Floats and Strings (cut at 1024 bytes)" do
      tracepoint = StaticTracing::Tracepoint.new(:rec_args, :event, Integer, Float, String)
      described_class.start(probes: ["rec_args:event"])
      long = "é#{"x" * 2000}"
      values = [[-(2**63), -0.0, ""], [(2**63) - 1, Float::INFINITY, "hi\0there"], [7, 1.5, long]]
      values.each { |args| expect(tracepoint.fire(*args)).to be(true) }

      args = ring.records.map(&:args)
      expect(args[0]).to eq([-(2**63), -0.0, ""])
      expect(args[1]).to eq([(2**63) - 1, Float::INFINITY, "hi\0there"])
      expect(args[2][2].b).to eq(long.b.byteslice(0, 1024))
    end

    it "records latency blocks and tracepoint blocks, which run while recorded" do
      described_class.start(probes: ["rec_blocks:*"])
      ran = 0
      3.times { expect(StaticTracing.latency(name: :step, provider: :rec_blocks) { :value }).to eq(:value) }
      2.times { StaticTracing.tracepoint(:rec_blocks, :custom, Integer) { ran += 1 } }

      trace = ring
      expect(calls(trace, "rec_blocks:step").size).to eq(3)
      expect(calls(trace, "rec_blocks:custom").map(&:args)).to eq([[1], [2]])
      expect(ran).to eq(2)
    end

    it "records StackTracer's folded stacks as its stack argument" do
      klass = define_class(:RecStacks) do
        include StaticTracing::StackTracer
        def leaf = :leaf
      end
      described_class.start(probes: ["rec_stacks_stack:*"])
      klass.new.leaf

      record = calls(ring, "rec_stacks_stack:leaf").first
      expect(record.probe.stack_arg).to eq(0)
      expect(record.args.first).to end_with("RecStacks#leaf")
    end

    it "keeps a long folded stack's innermost frames, from the start of a frame, under a root that says it was cut, " \
       "and any other String's first bytes" do
      stack = StaticTracing::Tracepoint.new(:rec_cut, :stack, String, stack: 0)
      text = StaticTracing::Tracepoint.new(:rec_cut, :text, String)
      frames = Array.new(200) { |i| "Frame#{i}#call" }.join(";")
      described_class.start(probes: ["rec_cut:*"])
      stack.fire(frames)
      text.fire(frames)

      kept_stack, kept_text = ring.records.map { |record| record.args.first }
      expect(kept_stack.bytesize).to be <= 1024
      root, kept = kept_stack.split(";", 2)
      expect(root).to eq("[truncated]")
      expect(frames).to end_with(";#{kept}")
      expect(kept).to start_with("Frame").and end_with("Frame199#call")
      expect(kept_stack.bytesize).to be > 1024 - "Frame100#call;".bytesize
      expect(kept_text).to eq(frames.byteslice(0, 1024))
    end

    it "fires a trigger from a custom probe's latency argument, as from a latency method's" do
      dir = Dir.mktmpdir("rec_trigger")
      stderr = $stderr
      $stderr = StringIO.new
      request = StaticTracing::Tracepoint.new(:rec_rack, :request, String, Integer, latency: 1)
      described_class.start(probes: ["rec_rack:*"], dump_when: "rec_rack:request > 1ms", dump_dir: dir, size: "64K")
      request.fire("/fast", 10_000)
      expect(Dir.children(dir)).to be_empty
      request.fire("/slow", 5_000_000)

      snapshot = eventually("the snapshot") { Dir[File.join(dir, "*.trace")].first }
      expect(File.basename(snapshot)).to start_with("#{Process.pid}-rec_rack-request-")
      expect(StaticTracing::CLI::TraceFile.read(snapshot).records.map(&:args))
        .to eq([["/fast", 10_000], ["/slow", 5_000_000]])
      eventually("the snapshot's warning") { $stderr.string.end_with?("\n") }
      expect($stderr.string).to eq("static_tracing: rec_rack:request took 5ms (rec_rack:request > 1ms): " \
                                   "wrote #{snapshot}\n")
    ensure
      $stderr = stderr
      FileUtils.rm_rf(dir)
    end

    it "records into the ring even where no provider is loaded (no stub, no tracer)" do
      tracepoint = StaticTracing::Tracepoint.new(:rec_unloaded, :event, Integer)
      described_class.start(probes: ["rec_unloaded:*"])
      expect(tracepoint.provider.loaded?).to be(false)
      expect(tracepoint.fire(5)).to be(true)
      expect(ring.records.map(&:args)).to eq([[5]])
    end

    it "counts what a full ring cannot hold as dropped, without flight" do
      tracepoint = StaticTracing::Tracepoint.new(:rec_full, :event, Integer)
      described_class.start(probes: ["rec_full:*"], size: "64K")
      slots = 64 * 1024 / 32
      (slots + 100).times { |i| tracepoint.fire(i) }

      trace = ring
      expect(trace.records.size).to eq(slots)
      expect(trace.dropped).to eq(100)
      expect(trace.records.map { |record| record.args.first }).to eq((0...slots).to_a)
    end
  end

  describe "its settings" do
    it "refuses bad settings with ArgumentError, and starts nothing" do
      expect { described_class.start(size: "3X") }.to raise_error(ArgumentError, /ring size "3X".*16M/)
      expect { described_class.start(size: "1K") }.to raise_error(ArgumentError, /out of range: from 64K to 4G/)
      expect { described_class.start(probes: ["a:b:c"]) }.to raise_error(ArgumentError, /probe pattern "a:b:c"/)
      expect { described_class.start(dump_when: "x > soon") }.to raise_error(ArgumentError, /duration "soon"/)
      expect { described_class.start(max_dumps: 0) }.to raise_error(ArgumentError, /maximum of dumps 0/)
      expect(described_class.recording?).to be(false)
    end

    it "refuses a second recording, naming the one that runs" do
      described_class.start(flight: true, size: "64K")
      expect { described_class.start }
        .to raise_error(StaticTracing::RecorderError, /running already \(flight, started by the process itself/)
    end

    it "rounds the size up to a power of two" do
      described_class.start(size: "100K")
      expect(described_class.status["size"]).to eq(128 * 1024)
      expect(File.size(described_class.status["ring"])).to eq((128 * 1024) + 65_536)
    end

    it "removes its ring file when it stops" do
      described_class.start
      path = described_class.status["ring"]
      expect(File.stat(path).mode & 0o777).to eq(0o600)
      described_class.stop
      expect(File.exist?(path)).to be(false)
    end
  end
end
