# frozen_string_literal: true

require "fileutils"
require "json"
require "tmpdir"

# `static-tracing enable|disable|toggle PID` against real Ruby children,
# whose own StaticTracing.enabled? is asked after each command. Signalling
# one's own children needs no tracer and no root.
RSpec.describe "static-tracing enable, disable and toggle" do
  include E2E::Helpers

  before { skip "USDT probes are not supported on #{RUBY_PLATFORM}" unless StaticTracing.supported? }
  after { stop_started_processes }

  let(:tmp) { Dir.mktmpdir("cli_switch") }

  after { FileUtils.rm_rf(tmp) }

  # A child in the default mode (signal) unless +env+ says otherwise.
  def child(setup = "", env: {})
    ruby_repl(setup, env:)
  end

  def enabled?(process)
    process.evaluate("StaticTracing.enabled?")
  end

  def received(process)
    process.evaluate("StaticTracing::SignalToggle.received")
  end

  def expect_success(result, stdout)
    expect(result).to have_attributes(exitstatus: 0, stdout:, stderr: "")
  end

  it "enables, disables and toggles tracing with the process's signal, and waits for each change" do
    process = child
    pid = process.pid
    expect(enabled?(process)).to be(false)

    expect_success(run_cli("enable", pid), "Tracing enabled in process #{pid} (sent SIGTRAP).\n")
    expect(enabled?(process)).to be(true)

    expect_success(run_cli("disable", pid), "Tracing disabled in process #{pid} (sent SIGTRAP).\n")
    expect(enabled?(process)).to be(false)

    expect_success(run_cli("toggle", pid), "Tracing enabled in process #{pid} (sent SIGTRAP).\n")
    expect(enabled?(process)).to be(true)

    expect_success(run_cli("toggle", pid), "Tracing disabled in process #{pid} (sent SIGTRAP).\n")
    expect(enabled?(process)).to be(false)
    expect(received(process)).to eq(4)
  end

  it "sends nothing when tracing is already as asked" do
    process = child("StaticTracing.enable!")
    pid = process.pid
    expect_success(run_cli("enable", pid), "Tracing is already enabled in process #{pid}; nothing sent.\n")
    expect(enabled?(process)).to be(true)

    process.evaluate("StaticTracing.disable!")
    expect_success(run_cli("disable", pid), "Tracing is already disabled in process #{pid}; nothing sent.\n")
    expect(enabled?(process)).to be(false)
    expect(received(process)).to eq(0)
  end

  it "uses the signal the process is configured for (STATIC_TRACING_SIGNAL=USR2)" do
    process = child(env: { "STATIC_TRACING_SIGNAL" => "USR2" })
    expect_success(run_cli("enable", process.pid), "Tracing enabled in process #{process.pid} (sent SIGUSR2).\n")
    expect(enabled?(process)).to be(true)
    expect(process.evaluate("StaticTracing::SignalToggle.signal")).to eq("USR2")
    expect(received(process)).to eq(1)
  end

  it "finds the state of a process that puts its stubs in STATIC_TRACING_DIR" do
    dir = File.join(tmp, "stubs")
    process = child("StaticTracing::Provider.register(:cli_switch_dir).add_tracepoint(:tick, Integer)",
                    env: { "STATIC_TRACING_DIR" => dir })
    expect_success(run_cli("enable", process.pid), "Tracing enabled in process #{process.pid} (sent SIGTRAP).\n")
    expect(enabled?(process)).to be(true)

    listed = run_cli("list", "--json", process.pid)
    document = JSON.parse(listed.stdout)
    expect(document["tracing"]).to include("mode" => "signal", "signal" => "TRAP", "enabled" => true,
                                           "state_file" => File.join(dir, StubNames.state_file(process.pid)))
    expect(document["providers"].map { |provider| File.dirname(provider["path"]) }).to eq([dir])
    expect(run_cli("list", process.pid).stdout)
      .to start_with("PID #{process.pid}: 1 provider, 1 probe, 0 attached; mode signal (SIGTRAP), tracing enabled\n")
  end

  it "switches one unicorn worker, forked from a master that loaded the gem, and no other process" do
    unicorn = start_unicorn(workers: 2)
    first, second = unicorn.worker_pids
    expect_success(run_cli("enable", first), "Tracing enabled in process #{first} (sent SIGTRAP).\n")
    expect(JSON.parse(run_cli("list", "--json", first).stdout)["tracing"]).to include("enabled" => true)
    [second, unicorn.pid].each do |other|
      expect_success(run_cli("disable", other), "Tracing is already disabled in process #{other}; nothing sent.\n")
    end

    expect_success(run_cli("toggle", first), "Tracing disabled in process #{first} (sent SIGTRAP).\n")
    expect(unicorn).to be_alive
    expect([first, second]).to all(satisfy { |pid| File.directory?("/proc/#{pid}") })
    expect(unicorn.output).not_to include("reaped")
  end

  describe "refusals, with the process left alive and untouched" do
    def expect_refusal(result, *fragments)
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to start_with("static-tracing: ").and include(*fragments)
      expect(result.stderr.lines.size).to eq(1)
    end

    def expect_untouched(process, enabled:)
      expect(process).to be_alive
      expect(enabled?(process)).to be(enabled)
      expect(received(process)).to eq(0)
    end

    it "refuses a process in mode on: tracing is always on there" do
      process = child(env: { "STATIC_TRACING_MODE" => "on" })
      %w[enable disable toggle].each do |command|
        expect_refusal(run_cli(command, process.pid),
                       "process #{process.pid} runs static_tracing in mode on: tracing is always on there",
                       "nothing was sent", "STATIC_TRACING_MODE=signal")
      end
      expect_untouched(process, enabled: true)
    end

    it "refuses a process in mode off: only its code switches tracing" do
      process = child(env: { "STATIC_TRACING_MODE" => "off" })
      %w[enable toggle].each do |command|
        expect_refusal(run_cli(command, process.pid),
                       "process #{process.pid} runs static_tracing in mode off: only its own code switches",
                       "StaticTracing.enable!/disable!", "nothing was sent")
      end
      expect_untouched(process, enabled: false)
    end

    it "refuses a process in mode attach: its methods arm themselves as tracers attach" do
      process = child(env: { "STATIC_TRACING_MODE" => "attach" })
      %w[enable disable toggle].each do |command|
        expect_refusal(run_cli(command, process.pid),
                       "process #{process.pid} runs static_tracing in mode attach",
                       "nothing was sent", "bpftrace -p #{process.pid}", "list #{process.pid}")
      end
      expect_untouched(process, enabled: false)
    end

    # Configuration does not republish the state on a mode change by
    # itself: the child does.
    it "follows a mode changed at run time, once the process has published it" do
      process = child
      process.evaluate("StaticTracing::Configuration.mode = :on; StaticTracing::State.publish")
      expect_refusal(run_cli("disable", process.pid), "runs static_tracing in mode on")
      expect_untouched(process, enabled: true)

      process.evaluate("StaticTracing::Configuration.mode = :signal; StaticTracing::State.publish")
      expect_success(run_cli("enable", process.pid), "Tracing enabled in process #{process.pid} (sent SIGTRAP).\n")
    end

    it "refuses a process that does not catch the signal its state file names" do
      process = child
      process.evaluate("StaticTracing::SignalToggle.release")
      expect_refusal(run_cli("enable", process.pid), "process #{process.pid} does not catch SIGTRAP now",
                     "nothing was sent, since the signal could end the process")
      expect_untouched(process, enabled: false)
    end

    it "says what to check when a process with the gem published no state" do
      process = child
      File.delete(process.evaluate("StaticTracing::State.path"))
      expect_refusal(run_cli("enable", process.pid),
                     "process #{process.pid} has loaded static_tracing but published no tracing state",
                     "no #{StubNames.state_file(process.pid)} owned by its user in ",
                     "/tmp/static_tracing-#{Process.euid} (default)", "nothing was sent",
                     "Check its stderr")
      expect_untouched(process, enabled: false)
    end

    it "says the gem is not loaded in a process that does not use it" do
      process = E2E::Child.new(RbConfig.ruby, "-e", "$stdout.sync = true; puts 'READY'; $stdin.gets")
      started_processes << process
      process.wait_for(/^READY$/)
      expect_refusal(run_cli("toggle", process.pid),
                     "process #{process.pid} has not loaded the static_tracing gem (no static_tracing.so in " \
                     "/proc/#{process.pid}/maps): require \"static_tracing\" in it first; nothing was sent")
      expect(process).to be_alive
    end

    # The file an earlier process with the same pid left is set aside by
    # start time (see spec/cli/process_state_spec.rb); here it is also in
    # a directory the gem would not use, which is passed over as the gem does.
    it "passes over a state file in a directory the process could not use, and finds the one it published" do
      unusable = File.join(tmp, "shared")
      FileUtils.mkdir_p(unusable, mode: 0o755)
      File.chmod(0o755, unusable)
      xdg = File.join(tmp, "xdg")
      FileUtils.mkdir_p(xdg)
      # The process cannot use its first directory (not private), so it
      # publishes in the second; a state file in the first is looked at first.
      process = child(env: { "STATIC_TRACING_DIR" => unusable, "XDG_RUNTIME_DIR" => xdg })
      published = process.evaluate("StaticTracing::State.path")
      expect(published).to eq(File.join(xdg, "static_tracing", StubNames.state_file(process.pid)))
      fresh = JSON.parse(File.read(published))
      File.write(File.join(unusable, StubNames.state_file(process.pid)),
                 JSON.generate(fresh.merge("start_time" => fresh["start_time"] - 100, "mode" => "on")))

      expect_success(run_cli("enable", process.pid), "Tracing enabled in process #{process.pid} (sent SIGTRAP).\n")
      expect(enabled?(process)).to be(true)
    end

    it "ignores the state file of a dead process" do
      pid = dead_pid
      dir = "/tmp/static_tracing-#{Process.euid}"
      FileUtils.mkdir_p(dir, mode: 0o700)
      stale = File.join(dir, "#{pid}-#{StubNames.pid_namespace}.state")
      File.write(stale, JSON.generate("format" => 1, "pid" => pid, "start_time" => 1, "mode" => "signal",
                                      "signal" => "TRAP", "signal_number" => 5, "enabled" => false))
      result = run_cli("enable", pid)
      expect(result).to have_attributes(exitstatus: 1, stdout: "",
                                        stderr: "static-tracing: no process with PID #{pid}: check the PID " \
                                                "(ps -p #{pid})\n")
    ensure
      FileUtils.rm_f(stale) if stale
    end

    # Someone who can write where the process's state file is looked for
    # must not choose what the command sends, nor make it hang or eat memory.
    describe "a state file the command must not trust" do
      let(:dir) { File.join(tmp, "private") }
      let(:process) { child(env: { "STATIC_TRACING_DIR" => dir }) }
      let(:path) { process.evaluate("StaticTracing::State.path") }

      def expect_refused_state(*fragments)
        expect(path).to eq(File.join(dir, StubNames.state_file(process.pid)))
        yield path
        %w[enable toggle].each do |command|
          expect_refusal(run_cli(command, process.pid, timeout: 10), "refusing #{path}: ", *fragments,
                         "nothing was sent")
        end
        expect_untouched(process, enabled: false)
      end

      it "refuses one that names SIGTRAP with SIGTERM's number" do
        expect_refused_state("SIGTRAP with signal number 15", "SIGTRAP is #{Signal.list["TRAP"]}") do |file|
          File.write(file, JSON.generate(JSON.parse(File.read(file)).merge("signal_number" => 15)))
        end
      end

      it "refuses one that names a signal the system sends by itself" do
        expect_refused_state("SIGCHLD", "never toggles on") do |file|
          File.write(file, JSON.generate(JSON.parse(File.read(file)).merge("signal" => "CHLD",
                                                                           "signal_number" => Signal.list["CHLD"])))
        end
      end

      it "refuses a FIFO at once, without waiting for a writer" do
        expect_refused_state("fifo, not a regular file") do |file|
          File.delete(file)
          File.mkfifo(file, 0o600)
        end
      end

      it "refuses a symbolic link to /dev/zero" do
        expect_refused_state("symbolic link") do |file|
          File.delete(file)
          File.symlink("/dev/zero", file)
        end
      end

      it "refuses a file with a second link" do
        expect_refused_state("2 links") { |file| File.link(file, File.join(dir, "planted")) }
      end

      it "refuses a file larger than a state file can be" do
        expect_refused_state("more than the 65536") do |file|
          File.write(file, File.read(file).sub("}", "#{" " * 70_000}}"))
        end
      end

      it "refuses a file in a directory others can write to" do
        expect_refused_state("its directory has mode 0770") { File.chmod(0o770, dir) }
      end

      it "refuses a file owned by another user" do
        skip "needs root to give a file to another user" unless Process.euid.zero?

        expect_refused_state("owned by uid 65534, not by uid 0 (the uid process #{process.pid} runs as)") do |file|
          File.chown(65_534, nil, file)
        end
      end
    end

    it "says what to do when the process belongs to another user" do
      skip "needs root and setpriv(1)" unless Process.euid.zero? &&
                                              system("setpriv", "--help", out: File::NULL, err: File::NULL)

      process = child
      result = run_cli("enable", process.pid, command: ["setpriv", "--reuid=65534", "--regid=65534",
                                                        "--clear-groups", RbConfig.ruby, portable_exe])
      expect_refusal(result, "permission denied reading /proc/#{process.pid}/environ: process #{process.pid} " \
                             "runs as uid 0, you as uid 65534; run static-tracing as root or as uid 0")
      expect_untouched(process, enabled: false)
    end
  end

  # Its state file says mode signal and SigCgt shows the signal caught, but
  # the handler is the application's, which replaced the gem's.
  it "names the application's own trap as a likely cause when nothing changes" do
    process = child('Signal.trap("TRAP") { $stderr.puts "app trap" }')
    result = run_cli("enable", process.pid, "--timeout", "0.3")
    expect(result).to have_attributes(exitstatus: 1, stdout: "")
    expect(result.stderr).to start_with("static-tracing: process #{process.pid} was sent SIGTRAP but did not report " \
                                        "tracing enabled within 0.3s")
      .and include("trapped SIGTRAP", "Signal.trap", "STATIC_TRACING_SIGNAL=")
    process.wait_for(/^app trap$/)
    expect(enabled?(process)).to be(false)
    expect(received(process)).to eq(0)
  end

  it "times out with a clear error when the process does not apply the signal in time" do
    process = child
    # The process's signal thread applies a toggle under STATE_LOCK: held
    # here, it cannot until it is let go.
    process.evaluate("StaticTracing::STATE_LOCK.mon_enter")
    result = run_cli("enable", process.pid, "--timeout", "0.3")
    expect(result).to have_attributes(exitstatus: 1, stdout: "")
    expect(result.stderr).to start_with(
      "static-tracing: process #{process.pid} was sent SIGTRAP but did not report tracing enabled within 0.3s: " \
      "#{process.evaluate("StaticTracing::State.path")} still says tracing is disabled. It may be busy"
    ).and include("try a longer --timeout")

    process.evaluate("StaticTracing::STATE_LOCK.mon_exit")
    eventually("the process applies the signal") { enabled?(process) }
    expect_success(run_cli("enable", process.pid),
                   "Tracing is already enabled in process #{process.pid}; nothing sent.\n")
  end
end
