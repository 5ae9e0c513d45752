# frozen_string_literal: true

require "fileutils"
require "static_tracing/cli"
require "timeout"
require "tmpdir"

# Every file the command writes (trace files, reports) is a new private
# file that takes its name only once written: never written through a
# link, into a FIFO or device, or into an inode it did not make, and 0600
# whatever the umask.
RSpec.describe StaticTracing::CLI::OutputFile do
  let(:error) { StaticTracing::CLI::Error }
  let(:dir) { Dir.mktmpdir("output_file") }
  # Somewhere else: what a planted link points to.
  let(:elsewhere) { Dir.mktmpdir("output_file-elsewhere") }

  after { FileUtils.rm_rf([dir, elsewhere]) }

  def path(name)
    File.join(dir, name)
  end

  def with_umask(mask)
    previous = File.umask(mask)
    yield
  ensure
    File.umask(previous)
  end

  def secret
    File.join(elsewhere, "secret").tap { |file| File.write(file, "not yours\n", perm: 0o600) }
  end

  describe ".write" do
    it "writes what the block writes and returns the path" do
      result = described_class.write(path("out.trace")) { |file| file.write("bytes\0") }
      expect(result).to eq(path("out.trace"))
      expect(File.binread(path("out.trace"))).to eq("bytes\0")
      expect(Dir.children(dir)).to eq(["out.trace"])
    end

    it "creates the file with mode 0600, whatever the umask" do
      [0, 0o022, 0o077, 0o777].each do |mask|
        written = path("umask-#{mask.to_s(8)}.trace")
        with_umask(mask) { described_class.write(written) { |file| file.write("x") } }
        expect(File.stat(written).mode & 0o7777).to eq(0o600), "umask #{format("%04o", mask)}"
      end
    end

    it "writes into a hidden file of an unguessable name, which takes the destination's name once written" do
      seen = []
      %w[first second].each do |contents|
        described_class.write(path("out.trace")) do |file|
          seen << Dir.children(dir).grep_v("out.trace")
          seen << (File.exist?(path("out.trace")) ? File.read(path("out.trace")) : :none)
          file.write(contents)
        end
      end
      hidden, before, hidden_again, before_again = seen
      expect([before, before_again]).to eq([:none, "first"])
      expect([hidden.size, hidden_again.size]).to eq([1, 1])
      expect(hidden + hidden_again).to all(start_with("."))
      expect(hidden).not_to eq(hidden_again)
      expect(File.read(path("out.trace"))).to eq("second")
    end

    it "replaces a regular file at the destination, and leaves a hard link to it with the old contents" do
      File.write(path("out.trace"), "old\n")
      File.link(path("out.trace"), File.join(elsewhere, "hard-link"))
      described_class.write(path("out.trace")) { |file| file.write("new\n") }
      expect(File.read(path("out.trace"))).to eq("new\n")
      expect(File.read(File.join(elsewhere, "hard-link"))).to eq("old\n")
      expect(File.stat(path("out.trace")).nlink).to eq(1)
    end

    it "refuses a symbolic link at the destination, and leaves what it points to untouched" do
      target = secret
      File.symlink(target, path("out.trace"))
      ran = false
      expect { described_class.write(path("out.trace")) { ran = true } }
        .to raise_error(error, /#{Regexp.escape(path("out.trace"))}: .*symbolic link/)
      expect(ran).to be(false)
      expect(File.read(target)).to eq("not yours\n")
      expect(File.stat(target).mode & 0o7777).to eq(0o600)
      expect(File.readlink(path("out.trace"))).to eq(target)
      expect(Dir.children(dir)).to eq(["out.trace"])
    end

    it "refuses a dangling symbolic link, and creates nothing where it points" do
      target = File.join(elsewhere, "created-through-the-link")
      File.symlink(target, path("out.trace"))
      expect { described_class.write(path("out.trace")) { |file| file.write("x") } }
        .to raise_error(error, /#{Regexp.escape(path("out.trace"))}: .*symbolic link/)
      expect(File.exist?(target)).to be(false)
      expect(Dir.children(dir)).to eq(["out.trace"])
    end

    it "refuses a FIFO at the destination without blocking on it, and a directory" do
      File.mkfifo(path("fifo"))
      Dir.mkdir(path("directory"))
      Timeout.timeout(5) do
        expect { described_class.write(path("fifo")) { |file| file.write("x") } }
          .to raise_error(error, /#{Regexp.escape(path("fifo"))}: .*FIFO.*not a regular file/)
      end
      expect { described_class.write(path("directory")) { |file| file.write("x") } }
        .to raise_error(error, /#{Regexp.escape(path("directory"))}: .*directory.*not a regular file/)
      expect(File.ftype(path("fifo"))).to eq("fifo")
      expect(Dir.children(dir).sort).to eq(%w[directory fifo])
    end

    it "refuses a device at the destination" do
      expect { described_class.write("/dev/null") { |file| file.write("x") } }
        .to raise_error(error, %r{/dev/null: .*character device, not a regular file})
    end

    it "leaves the destination as it was, and no file behind, when the block raises" do
      File.write(path("kept.trace"), "the last one\n")
      expect { described_class.write(path("kept.trace")) { |file| file.write("half") && raise("cut short") } }
        .to raise_error(RuntimeError, "cut short")
      expect { described_class.write(path("new.trace")) { |file| file.write("half") && raise(Interrupt) } }
        .to raise_error(Interrupt)
      expect(File.read(path("kept.trace"))).to eq("the last one\n")
      expect(Dir.children(dir)).to eq(["kept.trace"])
    end

    it "says why in a CLI::Error naming the path when writing fails, and leaves no file behind" do
      expect { described_class.write(path("full.trace")) { raise Errno::ENOSPC } }
        .to raise_error(error, "cannot write #{path("full.trace")}: No space left on device")
      expect { described_class.write(path("report.txt"), contents: "the report") { raise Errno::EIO } }
        .to raise_error(error, /\Acannot write the report to #{Regexp.escape(path("report.txt"))}: /)
      expect(Dir.children(dir)).to eq([])
    end

    it "says so clearly when the directory is missing, or is not one" do
      missing = File.join(dir, "no", "out.trace")
      expect { described_class.write(missing) { |file| file.write("x") } }
        .to raise_error(error, "cannot write #{missing}: No such file or directory")
      File.write(path("file"), "")
      inside_a_file = File.join(path("file"), "out.trace")
      expect { described_class.write(inside_a_file) { |file| file.write("x") } }
        .to raise_error(error, /\Acannot write #{Regexp.escape(inside_a_file)}: Not a directory/)
    end

    describe "with replace: false (a name nobody asked for)" do
      it "replaces nothing: a name taken, even by a link, means the next free one, before the extension" do
        target = secret
        File.write(path("record.trace"), "someone's\n")
        File.symlink(target, path("record-2.trace"))
        File.symlink(File.join(elsewhere, "dangling"), path("record-3.trace"))
        written = with_umask(0) do
          described_class.write(path("record.trace"), replace: false) { |file| file.write("mine") }
        end
        expect(written).to eq(path("record-4.trace"))
        expect(File.read(written)).to eq("mine")
        expect(File.stat(written).mode & 0o7777).to eq(0o600)
        expect(File.read(path("record.trace"))).to eq("someone's\n")
        expect(File.read(target)).to eq("not yours\n")
        expect(File.exist?(File.join(elsewhere, "dangling"))).to be(false)
      end

      it "removes what it created when the block raises" do
        expect { described_class.write(path("record.trace"), replace: false) { raise Errno::ENOSPC } }
          .to raise_error(error, /No space left on device/)
        expect(Dir.children(dir)).to eq([])
      end

      it "gives up, in one error, when every name it would try is taken" do
        File.write(path("record.trace"), "")
        (2..described_class::FREE_NAMES).each { |number| File.write(path("record-#{number}.trace"), "") }
        expect { described_class.write(path("record.trace"), replace: false) { |file| file.write("x") } }
          .to raise_error(error, /\Acannot write #{Regexp.escape(path("record.trace"))}: .*taken/)
      end
    end
  end

  describe ".check" do
    it "passes a destination that can be written, existing or not, and returns it" do
      expect(described_class.check(path("new.trace"))).to eq(path("new.trace"))
      File.write(path("old.trace"), "")
      expect(described_class.check(path("old.trace"))).to eq(path("old.trace"))
      expect(Dir.children(dir)).to eq(["old.trace"])
    end

    it "refuses what #write would refuse, and creates nothing" do
      File.symlink(secret, path("link.trace"))
      Dir.mkdir(path("directory"))
      expect { described_class.check(path("link.trace")) }.to raise_error(error, /symbolic link/)
      expect { described_class.check(path("directory")) }.to raise_error(error, /directory, not a regular file/)
      expect { described_class.check(File.join(dir, "no", "x.trace")) }
        .to raise_error(error, /No such file or directory/)
      expect(Dir.children(dir).sort).to eq(%w[directory link.trace])
    end

    it "looks only at the directory with replace: false, whatever is at the name" do
      File.symlink(secret, path("record.trace"))
      expect(described_class.check(path("record.trace"), replace: false)).to eq(path("record.trace"))
      expect { described_class.check(File.join(dir, "no", "x.trace"), replace: false) }
        .to raise_error(error, /No such file or directory/)
    end
  end
end

# The command itself, run as an operator runs it: root in a directory
# another user owns, and umasks that would otherwise widen or narrow its
# files.
RSpec.describe "Files static-tracing writes", :subprocess do
  include CLIHelpers
  include E2E::Recording

  let(:setup) do
    <<~'RUBY'
      class OutputApp
        include StaticTracing::LatencyTracer
        def index(value) = value
      end
      APP = OutputApp.new
      def run(count) = count.times { |i| APP.index(i) }
    RUBY
  end

  let(:app) { ruby_repl(setup) }
  let(:dir) { Dir.mktmpdir("static_tracing-output") }
  let(:elsewhere) { Dir.mktmpdir("static_tracing-output-elsewhere") }

  after { FileUtils.rm_rf([dir, elsewhere]) }

  # The command, started in +chdir+ under umask +umask+.
  def command_in(chdir: dir, umask: "022")
    ["sh", "-c", %(cd "$1" && umask "$2" && shift 2 && exec "$@"), "sh", chdir, umask, RbConfig.ruby, CLIHelpers::EXE]
  end

  def empty_trace
    File.join(dir, "empty.trace").tap do |path|
      File.binwrite(path, TraceImage.new.bytes(probes: [], records: []))
    end
  end

  # A file only root may read or write, which a planted link points to.
  def root_only_file
    File.join(elsewhere, "root-only").tap { |path| File.write(path, "root's\n", perm: 0o600) }
  end

  def mode(path)
    File.lstat(path).mode & 0o7777
  end

  it "refuses a report -o that is a link planted by the directory's owner, as root, in one line" do
    require_unprivileged!
    trace = empty_trace
    target = root_only_file
    E2E::Unprivileged.directory do |theirs|
      link = File.join(theirs, "report.txt")
      File.symlink(target, link)
      File.lchown(E2E::Unprivileged::UID, E2E::Unprivileged::GID, link)

      result = run_cli("report", trace, "-o", link)
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr.lines.size).to eq(1)
      expect(result.stderr).to start_with("static-tracing: ").and include(link, "symbolic link")
      expect(File.read(target)).to eq("root's\n")
      expect(File.stat(target)).to have_attributes(uid: 0, mode: 0o100600)
      expect(File.readlink(link)).to eq(target)
      expect(Dir.children(theirs)).to eq(["report.txt"])
    end
  end

  it "never writes record's default file through a link, as root in a directory of the target's user" do
    require_unprivileged!
    target = root_only_file
    E2E::Unprivileged.directory do |theirs|
      # Every name the trace file could get in the next minute, planted.
      now = Time.now
      (-1..60).each do |offset|
        name = "static-tracing-#{app.pid}-#{(now + offset).strftime("%Y%m%d-%H%M%S")}.trace"
        File.symlink(target, File.join(theirs, name))
        File.lchown(E2E::Unprivileged::UID, E2E::Unprivileged::GID, File.join(theirs, name))
      end
      app.evaluate("Thread.new { loop { run(10); sleep 0.01 } }; nil")

      result = run_cli("record", app.pid, "--seconds", "0.3", command: command_in(chdir: theirs))
      expect(result.exitstatus).to eq(0), result.stderr
      written = result.stdout[/^Wrote \d+ records? to (\S+-2\.trace), from /, 1]
      expect(written).not_to be_nil, result.stdout
      expect(File.read(target)).to eq("root's\n")
      path = File.join(theirs, written)
      expect(File.lstat(path)).to have_attributes(file?: true, uid: 0)
      expect(mode(path)).to eq(0o600)
      expect(recorded_calls(read_trace(path)).keys).to eq(["output_app:index"])
    end
  end

  it "writes record's and dump's files with mode 0600, whatever the umask" do
    app.evaluate("Thread.new { loop { run(10); sleep 0.01 } }; nil")
    %w[000 077].each do |umask|
      trace = File.join(dir, "record-#{umask}.trace")
      result = run_cli("record", app.pid, "--seconds", "0.3", "-o", trace, command: command_in(umask:))
      expect(result.exitstatus).to eq(0), result.stderr
      expect(mode(trace)).to eq(0o600), "record under umask #{umask}"
    end

    result = run_cli("record", app.pid, "--seconds", "0.3", command: command_in(umask: "000"))
    expect(result.exitstatus).to eq(0), result.stderr
    default = Dir[File.join(dir, "static-tracing-#{app.pid}-*.trace")]
    expect(default.size).to eq(1)
    expect(mode(default.first)).to eq(0o600)

    expect(run_cli("record", app.pid, "--flight", "--size", "64K").exitstatus).to eq(0)
    %w[000 077].each do |umask|
      trace = File.join(dir, "dump-#{umask}.trace")
      result = run_cli("dump", app.pid, "-o", trace, command: command_in(umask:))
      expect(result.exitstatus).to eq(0), result.stderr
      expect(mode(trace)).to eq(0o600), "dump under umask #{umask}"
    end
    expect(run_cli("record", app.pid, "--stop").exitstatus).to eq(0)
  end

  it "refuses an output it cannot write before recording starts, and leaves the process as it was" do
    missing = "/nonexistent-dir-#{Process.pid}/x.trace"
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    result = run_cli("record", app.pid, "--seconds", "30", "-o", missing, timeout: 60)
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started

    expect(result).to have_attributes(exitstatus: 1, stdout: "")
    expect(result.stderr.lines.size).to eq(1)
    expect(result.stderr).to start_with("static-tracing: ").and include(missing)
    expect(result.stderr).not_to include("Recording")
    expect(elapsed).to be < 15
    expect(published_state(app.pid).recorder).to be_nil
    expect(app.evaluate("OutputApp.instance_method(:index).owner == OutputApp")).to be(true)
  end

  it "refuses, as a user without privilege, an output in a directory only root may write, before recording" do
    require_unprivileged!
    unprivileged = E2E::Unprivileged
    script = "#{setup}\n$stdout.sync = true\nputs :ready\n$stdin.read"
    target = E2E::Child.new(*unprivileged.command, RbConfig.ruby, "-I", File.join(E2E.portable_root, "lib"),
                            "-r", "static_tracing", "-e", script, env: unprivileged::ENV_RESET, chdir: "/")
    started_processes << target
    target.wait_for(/^ready$/)

    command = unprivileged.command("sh", "-c", 'cd / && exec "$@"', "sh", RbConfig.ruby, portable_exe)
    result = run_cli("record", target.pid, "--seconds", "30", "-o", "/root/x.trace",
                     timeout: 60, env: unprivileged::ENV_RESET, command:)
    expect(result).to have_attributes(exitstatus: 1, stdout: "")
    expect(result.stderr).to start_with("static-tracing: ").and include("/root/x.trace", "uid #{unprivileged::UID}")
    expect(result.stderr.lines.size).to eq(1)
    expect(File.exist?("/root/x.trace")).to be(false)
    expect(published_state(target.pid).recorder).to be_nil
  end
end
