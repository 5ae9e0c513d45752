# frozen_string_literal: true

require "static_tracing/cli"

# The process inspected here is this one: its own stubs, read from the
# outside through /proc/self, with tracers simulated by writing its memory.
RSpec.describe StaticTracing::CLI::Target do
  before { skip "USDT probes are not supported on #{RUBY_PLATFORM}" unless StaticTracing.supported? }

  let(:web) do
    StaticTracing::Provider.register(:cli_target_web).tap do |provider|
      provider.add_tracepoint(:request, Integer, String)
      provider.add_tracepoint(:render, Integer)
      provider.load
    end
  end
  let(:db) do
    StaticTracing::Provider.register(:cli_target_db).tap do |provider|
      provider.add_tracepoint(:query, String, Float)
      provider.load
    end
  end
  let(:target) { described_class.new(Process.pid) }

  def mine(states)
    states.select { |state| state.stub.provider.start_with?("cli_target_") }
  end

  def state_of(probe)
    mine(target.probe_states).find { |state| state.probe.name == probe }
  end

  # Stores +bytes+ at +address+ in this process, as a tracer would, for the
  # duration of the block.
  def poke(address, bytes)
    File.open("/proc/self/mem", "r+b") do |memory|
      saved = memory.pread(bytes.bytesize, address)
      memory.pwrite(bytes, address)
      yield
    ensure
      memory.pwrite(saved, address) if saved
    end
  end

  def address_of(provider, probe, field)
    stub = target.stubs.find { |candidate| candidate.provider == provider.name.to_s }
    stub.bias + stub.probes.find { |candidate| candidate.name == probe }.public_send(field)
  end

  it "finds the loaded providers, their stub paths and probes, none attached" do
    web
    db
    stubs = target.stubs.select { |stub| stub.provider.start_with?("cli_target_") }
    expect(stubs.map { |stub| [stub.provider, stub.path, stub.memfd] })
      .to eq([["cli_target_db", db.path, false], ["cli_target_web", web.path, false]])
    expect(mine(target.probe_states).map { |state| [state.probe.name, state.attached] })
      .to eq([["query", false], ["request", false], ["render", false]])
    expect(target.extension_loaded?).to be(true)
  end

  it "sees a raised semaphore as attached, as the gem itself does" do
    tracepoint = web.tracepoints[:render]
    poke(address_of(web, "render", :semaphore), [1].pack("S<")) do
      expect(tracepoint.enabled?).to be(true)
      expect(state_of("render")).to have_attributes(attached: true, semaphore: 1, breakpoint: false)
      expect(state_of("request")).to have_attributes(attached: false, semaphore: 0)
    end
    expect(state_of("render")).to have_attributes(attached: false, semaphore: 0)
  end

  # What a tracer leaves on the probe site (x86-64's 5-byte NOP): an int3 on
  # its first byte, or, where the kernel optimizes uprobes (Linux 6.18+), a
  # call to its trampoline over all five. Nothing fires the probe while
  # either is poked there: it would trap, or call nowhere.
  {
    "a breakpoint (int3)" => "\xCC".b,
    "a call to the kernel's trampoline (an optimized uprobe)" => "\xE8\x10\x20\x30\x40".b
  }.each do |form, bytes|
    it "sees #{form} on the probe site as attached" do
      skip "the probe site bytes are x86-64's" unless RbConfig::CONFIG["host_cpu"] == "x86_64"

      tracepoint = web.tracepoints[:request]
      poke(address_of(web, "request", :pc), bytes) do
        expect(tracepoint.enabled?).to be(true)
        expect(state_of("request")).to have_attributes(attached: true, semaphore: 0, breakpoint: true)
      end
      expect(state_of("request")).to have_attributes(attached: false, breakpoint: false)
    end
  end

  it "forgets a provider once it is unloaded" do
    web
    db.unload
    expect(target.stubs.map(&:provider)).to include("cli_target_web")
    expect(target.stubs.map(&:provider)).not_to include("cli_target_db")
  end

  # A deploy that installs a new release and removes the old one leaves the
  # running workers with their extension mapped from a deleted file: they
  # still have the gem loaded.
  it "sees the extension in a process whose copy of the gem was removed after it loaded" do
    Dir.mktmpdir("static_tracing-removed-gem") do |dir|
      FileUtils.cp_r(File.expand_path("../../lib", __dir__), dir)
      IO.popen([RbConfig.ruby, "-I", File.join(dir, "lib"), "-e",
                "require 'static_tracing'; puts :loaded; $stdout.flush; $stdin.read"], "r+") do |process|
        expect(process.wait_readable(30) && process.gets).to eq("loaded\n")
        FileUtils.rm_rf(File.join(dir, "lib"))
        child = described_class.new(process.pid)
        expect(File.read("/proc/#{process.pid}/maps")).to match(%r{/static_tracing\.so \(deleted\)$})
        expect(child.extension_loaded?).to be(true)
      ensure
        process.close_write
      end
    end
  end

  it "says when there is no such process" do
    pid = dead_pid
    expect { described_class.new(pid) }
      .to raise_error(StaticTracing::CLI::Error, "no process with PID #{pid}: check the PID (ps -p #{pid})")
  end
end
