# frozen_string_literal: true

require "static_tracing/cli"

# Probes held in constants, for hot paths: Tracepoint#measure and
# #fire_if_enabled keep the rules of StaticTracing.latency and
# StaticTracing.tracepoint blocks, without finding the probe on each call.
# Wanted here means recorded (the recorder arms a probe as an attached
# tracer does); the real bpftrace is attached in the :e2e examples.
RSpec.describe "Probes held in constants" do
  after { StaticTracing::Recorder.stop }

  def recorded_args(label)
    StaticTracing::CLI::TraceFile.read(StaticTracing::Recorder.status.fetch("ring"))
                                 .records.select { |record| record.probe.label == label }.map(&:args)
  end

  describe "Tracepoint#measure" do
    let(:probe) { StaticTracing::Tracepoint.new(:held, :timed, Integer, latency: 0) }

    it "runs the block once and returns its value, wanted or not, and fires its duration only while wanted" do
      runs = 0
      expect(probe.measure { runs += 1 }).to eq(1)
      StaticTracing::Recorder.start(probes: ["held:*"])
      expect(probe.measure { (runs += 1) && sleep(0.002) && :slept }).to eq(:slept)
      expect(runs).to eq(2)
      durations = recorded_args("held:timed").flatten
      expect(durations.size).to eq(1)
      expect(durations.first).to be_between(2_000_000, 1_000_000_000)
    end

    it "fires even when the block raises, and lets the exception through unchanged" do
      StaticTracing::Recorder.start(probes: ["held:*"])
      error = Class.new(StandardError)
      expect { probe.measure { raise error, "inside" } }.to raise_error(error, "inside")
      expect(recorded_args("held:timed").size).to eq(1)
      thrown = catch(:out) { probe.measure { throw :out, :thrown } }
      expect(thrown).to eq(:thrown)
      expect(recorded_args("held:timed").size).to eq(2)
    end

    it "refuses a probe that is not of one Integer, or no block, whether wanted or not" do
      text = StaticTracing::Tracepoint.new(:held, :text, String)
      expect { text.measure { 1 } }
        .to raise_error(ArgumentError, "tracepoint held:text is declared (String): measure fires one Integer " \
                                       "(Integer), the block's duration")
      expect { probe.measure }.to raise_error(ArgumentError, /held:timed measure needs a block/)
    end

    it "is the probe StaticTracing.latency fires, from StaticTracing.latency_probe" do
      held = StaticTracing.latency_probe(:lookup, provider: :held_latency)
      expect(held).to equal(StaticTracing::Tracepoint.new(:held_latency, :lookup, Integer))
      expect(held.latency_argument).to eq(0)
      stub_const("HeldCache", Class.new)
      HeldCache.class_eval { const_set(:PROBE, StaticTracing.latency_probe(:hit)) }
      expect(HeldCache::PROBE).to equal(StaticTracing.providers[:held_cache].tracepoints[:hit])
    end

    # Per call: 10,000 calls make fewer than 10 objects (GC.stat itself may).
    it "allocates nothing a call, wanted or not" do
      counts = [false, true].map do |wanted|
        StaticTracing::Recorder.start(probes: ["held:*"], flight: true) if wanted
        probe.measure { nil }
        before = GC.stat(:total_allocated_objects)
        10_000.times { probe.measure { nil } }
        GC.stat(:total_allocated_objects) - before
      end
      expect(counts).to all(be < 10)
    end
  end

  describe "Tracepoint#fire_if_enabled" do
    let(:probe) { StaticTracing::Tracepoint.new(:held, :values, Integer, String) }

    it "refuses no block, every time, wanted or not, and still checks the first block it is given" do
      2.times do
        expect { probe.fire_if_enabled }.to raise_error(ArgumentError, /held:values fire_if_enabled needs a block/)
      end
      runs = 0
      expect(probe.fire_if_enabled { (runs += 1) && [1, "a"] }).to be_nil
      expect(runs).to eq(1)
      StaticTracing::Recorder.start(probes: ["held:values"], flight: true)
      expect { probe.fire_if_enabled }.to raise_error(ArgumentError, /held:values fire_if_enabled needs a block/)
    end

    it "runs the block once to check it, then not at all until the probe is wanted" do
      runs = 0
      expect(probe.fire_if_enabled { (runs += 1) && [1, "a"] }).to be_nil
      3.times { expect(probe.fire_if_enabled { (runs += 1) && [1, "a"] }).to be_nil }
      expect(runs).to eq(1)
      StaticTracing::Recorder.start(probes: ["held:*"])
      expect(probe.fire_if_enabled { (runs += 1) && [7, "seven"] }).to eq([7, "seven"])
      expect(runs).to eq(2)
      expect(recorded_args("held:values")).to eq([[7, "seven"]])
    end

    it "raises a mistake on the check, and counts it without raising while wanted" do
      wrong = StaticTracing::Tracepoint.new(:held, :wrong, Integer)
      expect { wrong.fire_if_enabled { "text" } }.to raise_error(TypeError, /held:wrong argument 1 must be an Integer/)
      StaticTracing::Recorder.start(probes: ["held:*"])
      errors = StaticTracing::Blocks.errors
      expect { expect(wrong.fire_if_enabled { "text" }).to be_nil }
        .to output(/the block computing the values of tracepoint held:wrong failed while traced/).to_stderr
      expect(StaticTracing::Blocks.errors).to eq(errors + 1)
    end

    it "takes one value for a one-argument probe, and fires a probe of none" do
      one = StaticTracing::Tracepoint.new(:held, :one, Integer)
      none = StaticTracing::Tracepoint.new(:held, :none)
      StaticTracing::Recorder.start(probes: ["held:*"])
      expect(one.fire_if_enabled { 5 }).to eq(5)
      expect(none.fire_if_enabled { :ignored }).to eq(:ignored)
      expect([recorded_args("held:one"), recorded_args("held:none")]).to eq([[[5]], [[]]])
    end

    it "allocates nothing while unwanted" do
      probe.fire_if_enabled { [1, "a"] }
      before = GC.stat(:total_allocated_objects)
      10_000.times { probe.fire_if_enabled { [1, "a"] } }
      expect(GC.stat(:total_allocated_objects) - before).to be < 10
    end
  end

  describe "with bpftrace attached", :e2e do
    it "fires measured durations and computed values as the block forms do" do
      app = ruby_repl(<<~RUBY)
        TIMED = StaticTracing.latency_probe(:timed, provider: :held_e2e)
        VALUES = StaticTracing::Tracepoint.new(:held_e2e, :values, Integer, String)
        StaticTracing::Provider.load(:held_e2e)
      RUBY
      tracer = attach_bpftrace(app.pid, "usdt:*:held_e2e:timed { @timed = count(); @slow = count(); } " \
                                        "usdt:*:held_e2e:values { @sum = sum(arg0); }")
      app.evaluate("3.times { TIMED.measure { sleep 0.001 } }; 4.times { |i| VALUES.fire_if_enabled { [i, 'x'] } }")
      counts = tracer.finish.scan(/^@(\w+): (\d+)$/).to_h.transform_values(&:to_i)
      expect(counts).to eq("timed" => 3, "slow" => 3, "sum" => 6)
    end
  end
end
