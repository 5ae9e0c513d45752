# frozen_string_literal: true

require "static_tracing/cli"

# The `static-tracing` command loads none of the extension (see
# ARCHITECTURE.md), so the rules it shares with the gem are written twice:
# in Rust (ext/stapsdt, and the reports of ext/trace_report) and in Ruby.
# These examples hold the two equal by asking both sides about the same
# process or the same values: where its files are, what they are called,
# what a stub's notes say, which directories it passes over, which signals
# may toggle it, how a duration is written.
RSpec.describe "Contracts between the gem and the static-tracing command", :subprocess do
  include CLIHelpers
  include_context "with a temporary directory", "contracts"

  def private_dir(name)
    File.join(@dir, name).tap { |path| Dir.mkdir(path, 0o700) }
  end

  def child(env)
    ruby_repl(<<~RUBY, env:)
      $provider = StaticTracing::Provider.register(:contract_app)
      $provider.add_tracepoint(:hello, Integer)
      $provider.load
    RUBY
  end

  it "names and places the state file and the stubs where the command looks for them" do
    dir = private_dir("stubs")
    app = child("STATIC_TRACING_DIR" => dir)
    state_path = app.evaluate("StaticTracing::State.path")
    stub_path = app.evaluate("$provider.path")

    process = StaticTracing::CLI::ProcessState.new(app.pid)
    expect(process.candidates.first.dir).to eq(dir)
    expect(File.join(dir, process.file_name)).to eq(state_path)
    expect(process.read&.path).to eq(state_path)

    expect(File.basename(stub_path)).to match(StaticTracing::CLI::Target::STUB_FILE)
    stubs = StaticTracing::CLI::Target.new(app.pid).stubs
    expect(stubs.map { |stub| [stub.provider, stub.path] }).to eq([["contract_app", stub_path]])
    # The notes ext/stapsdt wrote, as the command's StubFile reads them.
    notes = StaticTracing::CLI::StubFile.read(stub_path).probes
    expect(notes.map { |probe| [probe.provider, probe.name, probe.args] })
      .to eq([["contract_app", "hello", ["Integer"]]])
  end

  it "passes over the same directories: a control character in a path, a relative $XDG_RUNTIME_DIR" do
    runtime = private_dir("runtime")
    { "\n" => 0x0a, "\x1f" => 0x1f, "\x7f" => 0x7f }.each do |character, code|
      bad = File.join(@dir, "bad#{character}dir")
      app = child("STATIC_TRACING_DIR" => bad, "XDG_RUNTIME_DIR" => runtime)
      state_path = app.evaluate("StaticTracing::State.path")
      expect(File.dirname(state_path)).to eq(File.join(runtime, "static_tracing")), "0x#{code.to_s(16)}"

      process = StaticTracing::CLI::ProcessState.new(app.pid)
      expect(process.candidates.map(&:dir)).not_to include(bad)
      expect(process.read&.path).to eq(state_path)
      app.kill
    end

    # A space is no control character: both use such a directory.
    spaced = private_dir("with space")
    app = child("STATIC_TRACING_DIR" => spaced, "XDG_RUNTIME_DIR" => "relative/runtime")
    expect(File.dirname(app.evaluate("StaticTracing::State.path"))).to eq(spaced)
    expect(StaticTracing::CLI::ProcessState.new(app.pid).candidates.map(&:origin))
      .to eq(%w[$STATIC_TRACING_DIR default])
  end

  # The process picks where its ring goes (ext/stapsdt/src/ring_dir.rs);
  # the command believes a ring only where RingDirectories says it may be.
  it "puts the ring where the command reads it: the directory named, a stub directory in memory, else /dev/shm" do
    in_memory = Array.new(2) { Dir.mktmpdir("contracts", "/dev/shm") }
    named, memory_stubs = in_memory
    disk_stubs = private_dir("disk_stubs")
    {
      { "STATIC_TRACING_DIR" => disk_stubs, "STATIC_TRACING_RING_DIR" => named } => named,
      { "STATIC_TRACING_DIR" => memory_stubs } => memory_stubs,
      { "STATIC_TRACING_DIR" => disk_stubs } => "/dev/shm/static_tracing-#{Process.euid}"
    }.each do |env, dir|
      app = child(env.merge("XDG_RUNTIME_DIR" => nil))
      ring = app.evaluate("StaticTracing::Recorder.start(size: '64K')['ring']")
      expect(File.dirname(ring)).to eq(dir), env.inspect
      expect(StaticTracing::CLI::ProcessState.new(app.pid).read&.recorder&.fetch("ring")).to eq(ring), env.inspect
      app.kill
    end
  ensure
    FileUtils.rm_rf(in_memory) if in_memory
  end

  it "accepts as the toggle signal exactly the signals the command will send" do
    accepted = Signal.list.keys.reject { |name| name == "EXIT" }.select do |name|
      StaticTracing::Configuration.parse_signal(name, "signal")
    rescue ArgumentError
      false
    end
    canonical = accepted.map { |name| Signal.signame(Signal.list[name]) }.uniq.sort
    expect(canonical).to eq(StaticTracing::SignalRules::ALLOWED.sort)
    expect(StaticTracing::Configuration::Modes::SIGNALS.names.sort).to eq(canonical)
  end

  it "knows the same modes: every mode the gem publishes is one the command reads" do
    expect(StaticTracing::CLI::ProcessState::MODES).to eq(StaticTracing::Configuration::Modes::ALL.map(&:to_s))
  end

  # Durations are written by the gem's Ruby (Durations: `latency`, a
  # trigger's warnings, recording settings) and by the reports, in Rust.
  it "writes a duration as the gem does: the report's max of a call is Durations.format of its latency" do
    latencies = [0, 1, 999, 1000, 1125, 1500, 2675, 8995, 9995, 9994, 99_950, 999_499, 999_500, 999_950,
                 999_999, 1_000_000, 1_234_567, 59_999_999_999, 10**12, 123_456_789_012_345, -1, -1500,
                 -999_500_000, 2**62, (2**63) - 1, -(2**63)] +
                Array.new(200) { |i| (1.37**(i % 120)).round + i }
    probes = latencies.each_index.map do |id|
      StaticTracing::CLI::TraceFile::Probe.new(id, "contract", "p#{id}", ["Integer"], 0, nil)
    end
    records = latencies.zip(probes).map do |latency, probe|
      StaticTracing::CLI::TraceFile::Record.new(nil, 1_000, probe, 1, [latency])
    end
    path = File.join(@dir, "durations.trace")
    File.binwrite(path, TraceImage.new.bytes(probes:, records:))

    stdout = cli("report", path).stdout
    reported = stdout.scan(/^contract:p(\d+)  1 call, .*, max (\S+)$/).to_h.transform_keys { |id| Integer(id) }
    expected = latencies.each_with_index.to_h { |latency, id| [id, StaticTracing::Durations.format(latency)] }
    expect(reported).to eq(expected)
  end
end
