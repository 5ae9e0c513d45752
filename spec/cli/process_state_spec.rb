# frozen_string_literal: true

require "fileutils"
require "json"
require "tmpdir"
require "static_tracing/cli"

# Finding and trusting a process's `<pid>-<pidns>.state` file, against a
# fake /proc tree where the process's environment, pids and start time are
# made up; its uid is this process's, which owns the files written here.
RSpec.describe StaticTracing::CLI::ProcessState do
  let(:pid) { 4_194_301 }
  # The pid the process sees itself as (NSpid): another in a container.
  let(:own_pid) { pid }
  let(:start_time) { 987_654 }
  let(:uid) { Process.euid }
  let(:root) { Dir.mktmpdir("process_state") }
  let(:proc_dir) { File.join(root, "proc") }
  let(:cwd) { File.join(root, "cwd") }

  after { FileUtils.rm_rf(root) }

  # /proc/PID as far as ProcessState reads it. The command name has a
  # space and a parenthesis, as a process can choose. Its root is this
  # process's; its pid namespace is a file whose inode number stands for it.
  def fake_process(env: {}, start: start_time, caught: [5])
    dir = File.join(proc_dir, pid.to_s)
    FileUtils.mkdir_p([dir, cwd, File.join(dir, "ns")])
    File.write(File.join(dir, "environ"), env.map { |name, value| "#{name}=#{value}\0" }.join)
    write_stat(dir, start)
    write_status(dir, caught)
    File.write(File.join(dir, "ns", "pid"), "")
    File.symlink(cwd, File.join(dir, "cwd"))
    File.symlink("/", File.join(dir, "root"))
    described_class.new(pid, proc_dir:)
  end

  def state_file_name
    "#{own_pid}-#{File.stat(File.join(proc_dir, pid.to_s, "ns", "pid")).ino}.state"
  end

  def write_status(dir, caught)
    mask = caught.sum { |signal| 1 << (signal - 1) }
    File.write(File.join(dir, "status"), "Name:\truby\nUid:\t1000\t#{uid}\t#{uid}\t#{uid}\n" \
                                         "NSpid:\t#{pid}\t#{own_pid}\n" \
                                         "SigIgn:\t0000000000000000\nSigCgt:\t#{format("%016x", mask)}\n")
  end

  def write_stat(dir, start)
    fields = ["S", *Array.new(18, "0"), start.to_s, *Array.new(30, "0")]
    File.write(File.join(dir, "stat"), "#{pid} (ruby (worker) 1) #{fields.join(" ")}\n")
  end

  def state(**overrides)
    { "format" => 1, "pid" => own_pid, "start_time" => start_time, "mode" => "signal", "signal" => "TRAP",
      "signal_number" => 5, "enabled" => false, "version" => "0.1.0", "ruby" => "3.1.2" }.merge(overrides)
  end

  # Writes the state file as the gem does: in a private directory, privately.
  def publish(dir, contents)
    FileUtils.mkdir_p(dir, mode: 0o700)
    File.chmod(0o700, dir)
    path = File.join(dir, state_file_name)
    File.write(path, contents.is_a?(Hash) ? JSON.generate(contents) : contents, perm: 0o600)
    path
  end

  describe "#candidates" do
    it "follows the process's environment, in the order the process uses, then its uid's default" do
      process = fake_process(env: { "STATIC_TRACING_DIR" => "/srv/stubs", "XDG_RUNTIME_DIR" => "/run/user/4242" })
      expect(process.candidates.map(&:to_a)).to eq(
        [["/srv/stubs", "$STATIC_TRACING_DIR"], ["/run/user/4242/static_tracing", "$XDG_RUNTIME_DIR"],
         ["/tmp/static_tracing-#{uid}", "default"]]
      )
    end

    it "resolves a relative STATIC_TRACING_DIR against the process's working directory" do
      process = fake_process(env: { "STATIC_TRACING_DIR" => "tmp/stubs" })
      expect(process.candidates.first.dir).to eq(File.join(cwd, "tmp/stubs"))
    end

    it "skips empty settings and a relative XDG_RUNTIME_DIR, as the process does" do
      process = fake_process(env: { "STATIC_TRACING_DIR" => "", "XDG_RUNTIME_DIR" => "run/user" })
      expect(process.candidates.map(&:origin)).to eq(["default"])
    end

    it "skips a directory whose path holds a control character, as the process does" do
      process = fake_process(env: { "STATIC_TRACING_DIR" => "/srv/a\nb", "XDG_RUNTIME_DIR" => "/run/\x7f" })
      expect(process.candidates.map(&:origin)).to eq(["default"])
    end

    it "names the default directory by the uid as the process sees it, through its uid_map" do
      File.write(File.join(proc_dir, pid.to_s, "uid_map").tap { fake_process }, "0 #{uid} 1\n")
      expect(described_class.new(pid, proc_dir:).candidates.last.dir).to eq("/tmp/static_tracing-0")
    end

    it "takes the effective uid" do
      expect(fake_process.uid).to eq(uid)
    end
  end

  describe "#read" do
    let(:env) { { "STATIC_TRACING_DIR" => File.join(root, "dir"), "XDG_RUNTIME_DIR" => File.join(root, "xdg") } }

    it "reads the process's state" do
      process = fake_process(env:)
      usr2 = state("enabled" => true, "signal" => "USR2", "signal_number" => 12)
      path = publish(File.join(root, "xdg", "static_tracing"), usr2)
      expect(process.read).to have_attributes(path:, mode: "signal", signal: "USR2", signal_number: 12,
                                              enabled: true, signal_name: "SIGUSR2")
    end

    it "takes the first candidate that has the file" do
      process = fake_process(env:)
      first = publish(File.join(root, "dir"), state("enabled" => true))
      publish(File.join(root, "xdg", "static_tracing"), state("enabled" => false))
      expect(process.read).to have_attributes(path: first, enabled: true)
    end

    it "reads it anew on each call" do
      process = fake_process(env:)
      dir = File.join(root, "dir")
      publish(dir, state("enabled" => false))
      expect(process.read.enabled).to be(false)
      publish(dir, state("enabled" => true))
      expect(process.read.enabled).to be(true)
    end

    it "reads a state file the process replaced between open and check (it publishes by rename)" do
      process = fake_process(env:)
      path = publish(File.join(root, "dir"), state("enabled" => false))
      replaced = false
      allow(File).to receive(:open).and_wrap_original do |open, name, *rest, &block|
        next open.call(name, *rest, &block) if replaced || File.basename(name) != File.basename(path)

        open.call(name, *rest) do |file|
          # The file this reader holds loses its last link, as a republish does.
          replaced = true
          File.write("#{path}.new", JSON.generate(state("enabled" => true)), perm: 0o600)
          File.rename("#{path}.new", path)
          block.call(file)
        end
      end
      expect(process.read).to have_attributes(path:, enabled: true)
      expect(replaced).to be(true)
    end

    it "is nil when the process published nothing" do
      expect(fake_process(env:).read).to be_nil
    end

    it "sets aside a file an earlier process with the same pid left, and goes on to the next" do
      process = fake_process(env:)
      stale = publish(File.join(root, "dir"), state("start_time" => start_time - 1000, "mode" => "on"))
      expect(process.read).to be_nil
      expect(process.rejected.map { |file| [file.path, file.reason] }).to eq(
        [[stale, "it was written by an earlier process with the same pid (started at tick #{start_time - 1000}; " \
                 "process #{pid} started at tick #{start_time})"]]
      )

      fresh = publish(File.join(root, "xdg", "static_tracing"), state)
      expect(process.read).to have_attributes(path: fresh, mode: "signal")
    end

    it "sets aside files that are not this process's state" do
      process = fake_process(env:)
      {
        "{not json" => /\Ait is not valid JSON/,
        "[1, 2]" => "it is not a JSON object",
        JSON.generate(state("pid" => own_pid + 1)) => "it names pid #{own_pid + 1}",
        JSON.generate(state("format" => 2)) => "it has format 2, this static-tracing reads format 1",
        JSON.generate(state("mode" => "sometimes")) => 'its mode "sometimes" is not one of on, off, signal, attach'
      }.each do |contents, reason|
        publish(File.join(root, "dir"), contents)
        expect(process.read).to be_nil
        expect(process.rejected.map(&:reason)).to contain_exactly(reason)
      end
    end
  end

  # A state file says where the ring is; it is believed only where the
  # process keeps rings (StaticTracing::RingDirectories), under its name.
  describe "#read, placing the ring" do
    let(:dir) { File.join(root, "dir") }
    let(:env) { { "STATIC_TRACING_DIR" => dir } }
    let!(:process) { fake_process(env:) }

    def ring_name
      state_file_name.sub(/\.state\z/, ".ring")
    end

    def ring_seen(ring)
      publish(dir, state("recorder" => { "ring" => ring, "flight" => true }))
      process.read.recorder&.fetch("ring")
    end

    it "believes a ring next to the state file, or in the process's /dev/shm" do
      [File.join(dir, ring_name), File.join("/dev/shm/static_tracing-#{uid}", ring_name)].each do |ring|
        expect(ring_seen(ring)).to eq(ring)
      end
    end

    it "believes no ring anywhere else, nor under another name: the process is then not recording" do
      [File.join(root, "elsewhere", ring_name), File.join("/dev/shm/static_tracing-#{uid + 1}", ring_name),
       File.join(dir, "1-1.ring"), File.join(dir, "..", "dir", ring_name), 42].each do |ring|
        expect(ring_seen(ring)).to be_nil, ring.inspect
      end
    end

    context "with STATIC_TRACING_RING_DIR" do
      let(:env) { { "STATIC_TRACING_DIR" => dir, "STATIC_TRACING_RING_DIR" => File.join(root, "rings") } }

      it "believes a ring in the directory it names too" do
        ring = File.join(root, "rings", ring_name)
        expect(ring_seen(ring)).to eq(ring)
      end
    end

    context "with a relative STATIC_TRACING_RING_DIR" do
      let(:env) { { "STATIC_TRACING_DIR" => dir, "STATIC_TRACING_RING_DIR" => "rings" } }

      it "resolves it against the process's working directory" do
        ring = File.join(cwd, "rings", ring_name)
        expect(ring_seen(ring)).to eq(ring)
      end
    end
  end

  describe "#read in a container" do
    let(:own_pid) { 7 }

    it "looks for the file by the pid the process sees itself as and its pid namespace" do
      process = fake_process(env: { "STATIC_TRACING_DIR" => File.join(root, "dir") })
      path = publish(File.join(root, "dir"), state)
      expect(File.basename(path)).to match(/\A7-\d+\.state\z/)
      expect(process.read).to have_attributes(path:, mode: "signal")
    end
  end

  # Only a signal the gem toggles on, by its own number, is ever believed:
  # whoever could plant the file would otherwise choose what is sent.
  describe "#read, vetting the signal" do
    let(:env) { { "STATIC_TRACING_DIR" => File.join(root, "dir") } }

    {
      { "signal_number" => 15 } => "it names SIGTRAP with signal number 15, but SIGTRAP is #{Signal.list["TRAP"]}",
      { "signal" => "TERM", "signal_number" => 15 } => /\Ait names SIGTERM, which static_tracing never toggles on/,
      { "signal" => "CHLD", "signal_number" => 17 } => /\Ait names SIGCHLD, which static_tracing never toggles on/,
      { "signal" => "BOGUS" } => 'it names signal "BOGUS", which is no signal\'s name',
      { "signal" => nil, "signal_number" => nil } => "it names no signal although its mode is signal"
    }.each do |overrides, reason|
      it "refuses a state file with #{overrides}" do
        process = fake_process(env:)
        path = publish(File.join(root, "dir"), state(**overrides))
        expect(process.read).to be_nil
        expect(process.rejected.map(&:path)).to eq([path])
        expect(process.rejected.first.reason).to match(reason)
        expect(process.rejected.first.to_s).to start_with("refusing #{path}: ")
      end
    end

    it "takes a mode without signal that names none" do
      process = fake_process(env:)
      publish(File.join(root, "dir"), state("mode" => "on", "signal" => nil, "signal_number" => nil))
      expect(process.read).to have_attributes(mode: "on", signal: nil)
    end
  end

  describe "#catches?" do
    it "reads the caught signals from the process's status" do
      process = fake_process(caught: [5, 12, 64])
      expect([5, 12, 64].map { |signal| process.catches?(signal) }).to all(be(true))
      expect([1, 10, 15, 63].map { |signal| process.catches?(signal) }).to all(be(false))
    end
  end

  describe "#alive?" do
    it "is false once another process has the pid" do
      process = fake_process
      expect(process.start_time).to eq(start_time)
      expect(process.alive?).to be(true)
      write_stat(File.join(proc_dir, pid.to_s), start_time + 5)
      expect(process.alive?).to be(false)
    end
  end

  it "refuses a pid no process has" do
    expect { described_class.new(pid, proc_dir:) }
      .to raise_error(StaticTracing::CLI::Error, "no process with PID #{pid}: check the PID (ps -p #{pid})")
  end

  it "reads what this process publishes, through the real /proc" do
    skip "USDT probes are not supported on #{RUBY_PLATFORM}" unless StaticTracing.supported?

    StaticTracing::State.publish
    published = described_class.new(Process.pid).read
    expect(published).to have_attributes(path: StaticTracing::State.path,
                                         mode: StaticTracing::Configuration.mode.to_s,
                                         signal: StaticTracing::SignalToggle.signal,
                                         enabled: StaticTracing.enabled?)
  end

  # The gem writes the start time, the command checks it: both must find
  # field 22 past a command name that holds ") ", as an executable's can.
  it "trusts the state a process publishes whose command name holds \") \"", :subprocess do
    skip "USDT probes are not supported on #{RUBY_PLATFORM}" unless StaticTracing.supported?

    ruby = File.join(root, "rb) 1 2 3")
    File.symlink(RbConfig.ruby, ruby)
    stubs = File.join(root, "stubs")
    child = E2E::Child.new(ruby, "-I", E2E::LIB, "-r", "static_tracing", "-e",
                           'StaticTracing::State.publish; puts "published"; $stdout.flush; $stdin.gets',
                           env: { "STATIC_TRACING_DIR" => stubs })
    started_processes << child
    child.wait_for(/^published$/)
    expect(File.read("/proc/#{child.pid}/comm")).to eq("rb) 1 2 3\n")
    process = described_class.new(child.pid)
    expect(process.read).to have_attributes(path: File.join(stubs, StubNames.state_file(child.pid)))
    expect(process.rejected).to be_empty
  end
end
