# frozen_string_literal: true

require "fileutils"
require "rbconfig"
require "tmpdir"

# Processes in different pid namespaces (containers sharing a volume) share
# one stub directory. Their pids mean nothing to each other, and two of them
# may have the same pid: none may remove or overwrite another's files.
module SharedAcrossNamespaces
  # A REPL child (see spec/support/e2e.rb) in a pid namespace of its own,
  # whose /proc is its own. The namespace's init is a shell; the shell
  # first runs +before+ commands (each takes a pid), then Ruby. So two of
  # these children can have the same pid, and a third one a pid that is
  # free in the first two's namespaces but not in its own.
  class NamespacedRepl < E2E::Repl
    def initialize(setup, env:, before: []) # rubocop:disable Lint/MissingSuper
      script = (before + ['"$@"', "exit $?"]).join("; ")
      command = ["unshare", "--pid", "--fork", "--mount-proc", "--", "sh", "-c", script, "sh",
                 RbConfig.ruby, "-I", File.join(E2E.portable_root, "lib"), "-r", "static_tracing", "-e",
                 "#{setup}\n#{SERVER}"]
      E2E::Child.instance_method(:initialize).bind_call(self, *command, env:)
      @pid_inside = Integer(wait_for(/^REPL_READY (\d+)$/)[1])
      @next_id = 0
    end

    # Its pid as it sees it.
    attr_reader :pid_inside

    # Ends the REPL's input: Ruby exits normally, running its at_exit hooks.
    def close_input
      @stdin.close
    end
  end

  SETUP = <<~RUBY
    $provider = StaticTracing::Provider.register(:shared)
    $provider.add_tracepoint(:hello, Integer)
    $provider.load
    StaticTracing::State.publish

    # This process's files, as it sees them: path => [inode, contents] (a
    # FIFO, its control channel, has none to read).
    def own_files
      [$provider.path, StaticTracing::State.path, StaticTracing::Control.path].to_h do |path|
        stat = File.stat(path)
        [path, [stat.ino, stat.pipe? ? :fifo : File.binread(path)]]
      end
    end
  RUBY
end

RSpec.describe "Processes of different pid namespaces sharing a stub directory", :subprocess do
  before do
    require_unshare!
    @base = Dir.mktmpdir("static_tracing_namespaces", "/var/tmp")
    @dir = File.join(@base, "stubs")
  end

  after do
    stop_started_processes
    FileUtils.rm_rf(@base) if @base
  end

  def require_unshare!
    reason =
      if !RUBY_PLATFORM.include?("linux") then "pid namespaces are Linux only"
      elsif !StaticTracing.supported? then "USDT probes are not supported on #{RUBY_PLATFORM}"
      elsif Process.euid != 0 then "unsharing a pid namespace needs root (running as uid #{Process.euid})"
      elsif !system("unshare --pid --fork --mount-proc true", err: File::NULL)
        "unshare --pid --fork --mount-proc does not work here"
      end
    cannot_run!(reason) if reason
  end

  def namespaced(before: [])
    SharedAcrossNamespaces::NamespacedRepl
      .new(SharedAcrossNamespaces::SETUP, env: { "STATIC_TRACING_DIR" => @dir }, before:)
      .tap { |child| started_processes << child }
  end

  # Each process still has its files, the very same ones, untouched.
  def expect_intact(files_by_process)
    files_by_process.each do |process, files|
      expect(process.evaluate("own_files")).to eq(files)
      files.each do |path, (inode, contents)|
        stat = File.stat(path)
        expect([stat.ino, stat.pipe? ? :fifo : File.binread(path)]).to eq([inode, contents])
      end
    end
  end

  it "never removes or overwrites a live process's stub or state file, and removes an exited one's" do
    first = namespaced
    second = namespaced
    expect([first.pid_inside, second.pid_inside]).to eq([2, 2])
    files = [first, second].to_h { |process| [process, process.evaluate("own_files")] }
    expect(files.values.flat_map(&:keys).uniq.size).to eq(6)
    expect_intact(files)

    # Pid 2 does not exist in the third one's namespace: it must not take
    # the first two's files for those of a dead process.
    third = namespaced(before: ["/bin/true"])
    expect(third.pid_inside).to eq(3)
    files[third] = third.evaluate("own_files")
    expect_intact(files)

    first.close_input
    expect(first.wait).to be_success
    expect(files.delete(first).keys.select { |path| File.exist?(path) }).to be_empty
    expect_intact(files)
    expect(Dir.children(@dir)).to match_array(files.values.flat_map(&:keys).map { |path| File.basename(path) })
  end
end
