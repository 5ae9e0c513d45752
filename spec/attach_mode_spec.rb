# frozen_string_literal: true

require "open3"

# Attach mode in this process: what is loaded, watched and wrapped before
# and after a tracer attaches. The tracer itself is the real bpftrace in
# spec/e2e/attach_mode_spec.rb; here the Watcher's news is given by hand.
RSpec.describe "Attach mode" do
  let(:config) { StaticTracing::Configuration }

  around do |example|
    mode = config.mode
    delay = config.attach_delay
    config.mode = :attach
    example.run
  ensure
    config.attach_delay = delay
    config.mode = mode
  end

  include_context "traced classes"

  def probe(klass, name)
    StaticTracing::MethodTracing.probes(klass).find { |candidate| candidate.method_name == name }
  end

  let(:shop) do
    define_class(:AttachShop) do
      include StaticTracing::LatencyTracer
      def buy = :bought
      def sell = :sold
    end
  end

  it "loads a traced class's provider as its methods are declared, watches each probe, and wraps nothing" do
    shop
    provider = StaticTracing.providers[:attach_shop]
    expect(provider).to be_loaded
    expect(provider.tracepoints.keys).to eq(%i[buy sell])
    expect(provider.tracepoints.values).to all(satisfy { |tp| StaticTracing::Watcher.watching?(tp) })
    expect([wrapped?(shop, :buy), wrapped?(shop, :sell)]).to eq([false, false])
    expect(StaticTracing.enabled?).to be(false)
    expect(StaticTracing::State.snapshot).to include("mode" => "attach", "enabled" => false, "armed" => [])
  end

  it "wraps exactly the method whose probe a tracer attached to, until the last one leaves" do
    probe(shop, :buy).attach_changed(true)
    expect([wrapped?(shop, :buy), wrapped?(shop, :sell)]).to eq([true, false])
    expect(shop.new.buy).to eq(:bought)
    expect(StaticTracing::MethodTracing.armed_by_attach).to eq(["attach_shop:buy"])

    probe(shop, :buy).attach_changed(false)
    expect(wrapped?(shop, :buy)).to be(false)
    expect(StaticTracing::State.snapshot["armed"]).to eq([])
  end

  it "keeps a method wrapped for another reason when its tracer leaves" do
    probe(shop, :sell).attach_changed(true)
    StaticTracing.enable!
    probe(shop, :sell).attach_changed(false)
    expect(wrapped?(shop, :sell)).to be(true)
    StaticTracing.disable!
    expect(wrapped?(shop, :sell)).to be(false)
    expect(StaticTracing.providers[:attach_shop]).to be_loaded
  end

  it "declares and loads latency blocks' tracepoints as they first run" do
    expect(StaticTracing.latency(name: :pay, provider: :attach_checkout) { :paid }).to eq(:paid)
    expect(StaticTracing.providers[:attach_checkout]).to be_loaded
  end

  it "stops watching and unloads what it loaded when the mode changes; wraps nothing when it comes back from ON" do
    shop
    tracepoints = StaticTracing.providers[:attach_shop].tracepoints.values
    config.mode = :signal
    expect(StaticTracing.providers[:attach_shop]).not_to be_loaded
    expect(tracepoints.map { |tp| StaticTracing::Watcher.watching?(tp) }).to eq([false, false])
    expect(StaticTracing::State.snapshot["armed"]).to be_nil

    config.mode = :on
    expect(wrapped?(shop, :buy)).to be(true)
    config.mode = :attach
    expect([wrapped?(shop, :buy), wrapped?(shop, :sell)]).to eq([false, false])
    expect(StaticTracing.providers[:attach_shop]).to be_loaded
    expect(tracepoints).to all(satisfy { |tp| StaticTracing::Watcher.watching?(tp) })
  end

  # A server that lists threads right after boot (puma warns about them)
  # sees whose each is. The watcher reads the control channel in every mode.
  { "attach" => ["static_tracing watcher"],
    "signal" => ["static_tracing signal", "static_tracing watcher"] }.each do |mode, names|
    it "names its threads in #{mode} mode before they first run" do
      script = <<~RUBY
        class Shop; include StaticTracing::LatencyTracer; def buy = 1; end
        puts Thread.list.map(&:name).compact.grep(/static_tracing/).inspect
      RUBY
      out, status = Open3.capture2e({ "STATIC_TRACING_MODE" => mode }, RbConfig.ruby, "-I", E2E::LIB,
                                    "-rstatic_tracing", "-e", script)
      expect(status).to be_success, out
      expect(out.lines.last.chomp).to eq(names.inspect)
    end
  end

  # Ruby frees every object at exit, a provider maybe before its
  # tracepoints, while the watcher's thread goes on scanning their probes
  # (every millisecond here). A crash report printed then did not even
  # change the exit status, so the output is what is checked.
  it "lets a process with watched probes exit as it would untraced, however its objects are freed" do
    script = <<~'RUBY'
      20.times do |i|
        Object.const_set("Shop#{i}", Class.new).class_eval do
          include StaticTracing::LatencyTracer
          10.times { |j| define_method("m#{j}") { j } }
        end
      end
      puts "declared"
    RUBY
    env = { "STATIC_TRACING_MODE" => "attach", "STATIC_TRACING_ATTACH_DELAY" => "0.002" }
    10.times do
      out, status = Open3.capture2e(env, RbConfig.ruby, "-I", E2E::LIB, "-rstatic_tracing", "-e", script)
      expect([out, status.exitstatus]).to eq(["declared\n", 0])
    end
  end

  describe "declaring into a loaded provider" do
    def notes(path)
      `readelf -n #{path} 2>&1`.scan(/Name: (\w+)/).flatten
    end

    let(:provider) { StaticTracing::Provider.register(:attach_burst).tap { |p| p.add_tracepoint(:first).load } }

    def wait_for_notes(count)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
      sleep 0.01 until notes(provider.path).size == count || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    end

    it "rebuilds the stub once for a burst of declarations, attachable within attach_delay" do
      config.attach_delay = 0.05
      allow(provider).to receive(:_load).and_call_original
      names = Array.new(300) { |index| :"probe_#{index}" }
      names.each { |name| provider.add_tracepoint(name, Integer) }
      wait_for_notes(301)
      expect(notes(provider.path)).to eq(["first", *names.map(&:to_s)])
      expect(provider).to have_received(:_load).once
    end

    it "asks the Watcher once a burst, and again for the next" do
      config.attach_delay = 0.05
      provider
      allow(StaticTracing::Watcher).to receive(:soon).and_call_original
      names = Array.new(2) { |burst| Array.new(100) { |index| "burst_#{burst}_#{index}" } }
      names.each_with_index do |burst, index|
        burst.each { |name| provider.add_tracepoint(name, Integer) }
        wait_for_notes(1 + (100 * (index + 1)))
      end
      expect(notes(provider.path)).to eq(["first", *names.flatten])
      expect(StaticTracing::Watcher).to have_received(:soon).twice
    end

    it "makes them attachable as soon as Provider#load returns" do
      config.attach_delay = 60
      path = provider.path
      provider.add_tracepoint(:second, String)
      expect(notes(path)).to eq(["first"])
      provider.load
      expect(provider.path).to eq(path)
      expect(notes(path)).to eq(%w[first second])
    end
  end

  describe "Configuration.attach_delay" do
    it "takes seconds from 0.002 to 60, as numbers or strings, from the environment too" do
      config.attach_delay = "0.25"
      expect(config.attach_delay).to eq(0.25)
      config.configure_from_environment("STATIC_TRACING_MODE" => "attach", "STATIC_TRACING_ATTACH_DELAY" => "0.5")
      expect([config.mode, config.attach_delay]).to eq([:attach, 0.5])
      StaticTracing.configure { |settings| settings.attach_delay = 2 }
      expect(config.attach_delay).to eq(2.0)
    end

    it "refuses anything else, naming the value and the range, and keeps the delay" do
      config.attach_delay = 0.2
      [0, 0.001, 61, -1, "soon", "", nil, Float::NAN, Float::INFINITY].each do |value|
        expect { config.attach_delay = value }
          .to raise_error(ArgumentError, /invalid attach_delay #{Regexp.escape(value.inspect)}: .*0\.002 to 60\.0/)
        expect(config.attach_delay).to eq(0.2)
      end
    end

    it "warns about a bad STATIC_TRACING_ATTACH_DELAY and uses the default" do
      expect do
        config.configure_from_environment("STATIC_TRACING_MODE" => "attach", "STATIC_TRACING_ATTACH_DELAY" => "fast")
      end.to output(/STATIC_TRACING_ATTACH_DELAY "fast".*default, 0\.1/).to_stderr
      expect(config.attach_delay).to eq(0.1)
    end
  end
end
