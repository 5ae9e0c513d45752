# frozen_string_literal: true

# Block probes keep the rule StaticTracing.tracepoint documents for its
# blocks' mistakes, and run where method tracing cannot reach its state.
RSpec.describe "Block probes' fidelity" do
  after { StaticTracing.disable! }

  describe "StaticTracing.tracepoint, unattached" do
    it "runs a block once, on its tracepoint's first call, and raises its mistake there" do
      runs = 0
      call = -> { StaticTracing.tracepoint(:fidelity_blocks, :wrong_type, Integer) { (runs += 1) && "text" } }
      expect { call.call }.to raise_error(TypeError, /fidelity_blocks:wrong_type.*Integer.*String/)
      expect(call.call).to be_nil
      expect(runs).to eq(1)
    end

    it "raises the block's own exception on the first call, and returns nil without firing when it is right" do
      expect { StaticTracing.tracepoint(:fidelity_blocks, :raising) { raise KeyError, "no such key: :id" } }
        .to raise_error(KeyError, /:id/)
      expect(StaticTracing.tracepoint(:fidelity_blocks, :right, Integer, String) { [1, "a"] }).to be_nil
    end
  end

  describe "StaticTracing.latency with tracing on" do
    before { StaticTracing.enable! }

    it "names the provider after a BasicObject subclass" do
      stub_const("FidelityBasic", Class.new(BasicObject) do
        def timed = ::StaticTracing.latency(name: :timed) { :done }
      end)
      expect(FidelityBasic.new.timed).to eq(:done)
      expect(StaticTracing.providers[:fidelity_basic].tracepoints).to include(:timed)
    end

    it "runs its block untraced inside a non-main Ractor" do
      ractor = Ractor.new { StaticTracing.latency(name: :in_ractor, provider: :fidelity_blocks) { 6 * 7 } }
      expect(ractor.take).to eq(42)
    end
  end

  it "puts the count of block mistakes made while traced in the state file's snapshot" do
    expect(StaticTracing::State.snapshot).to include("block_errors" => StaticTracing::Blocks.errors)
  end

  describe "a block's mistake while a tracer is attached", :e2e do
    include CLIHelpers

    let(:app) do
      ruby_repl(<<~RUBY)
        StaticTracing::Provider.register(:fidelity_mistakes).add_tracepoint(:wrong, Integer)
        StaticTracing::Provider.register(:fidelity_mistakes).add_tracepoint(:raising, Integer)
        StaticTracing::Provider.load(:fidelity_mistakes)
      RUBY
    end

    it "never raises into the caller: counted, warned once, visible in the state file and to static-tracing list" do
      # The first unattached call checks each block; these pass it.
      app.evaluate("$bad = false")
      expect(app.evaluate('StaticTracing.tracepoint(:fidelity_mistakes, :wrong, Integer) { $bad ? "x" : 1 }')).to be_nil
      raising = "StaticTracing.tracepoint(:fidelity_mistakes, :raising, Integer) { $bad ? raise('boom') : 1 }"
      expect(app.evaluate(raising)).to be_nil
      tracer = attach_bpftrace(app.pid, "usdt:*:fidelity_mistakes:* { @hits = count(); }")
      results = app.evaluate(<<~RUBY)
        $bad = true
        Array.new(3) do
          [StaticTracing.tracepoint(:fidelity_mistakes, :wrong, Integer) { $bad ? "x" : 1 },
           StaticTracing.tracepoint(:fidelity_mistakes, :raising, Integer) { $bad ? raise("boom") : 1 }]
        end
      RUBY
      expect(results.flatten).to all(be_nil)
      expect(app.evaluate("StaticTracing::Blocks.errors")).to eq(6)
      # Written at the first mistake, then at most once a second.
      state = JSON.parse(File.read(app.evaluate("StaticTracing::State.path")))
      expect(state["block_errors"]).to be_between(1, 6)
      listed = run_cli("list", app.pid).stdout[/, (\d+) tracepoint block errors? \(see the process's warnings\)/, 1]
      expect(Integer(listed)).to be_between(state["block_errors"], 6)
      tracer.finish
      expect(app.output.scan(/fidelity_mistakes.*wrong.*failed while traced.*TypeError/).size).to eq(1)
      expect(app.output.scan(/fidelity_mistakes.*raising.*failed while traced.*RuntimeError: boom/).size).to eq(1)
    end
  end
end
