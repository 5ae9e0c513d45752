# frozen_string_literal: true

require "fileutils"
require "json"
require "open3"

# `static-tracing list` and a process whose root directory is not the
# command's: a chroot, a chroot with a mount namespace of its own (a
# container built inside one), and the command itself in a chroot. The
# kernel names a mapped file from the reader's root; the command shows a
# stub's path as the process sees it (its provider.path), which is also the
# path bpftrace -p PID resolves through the process's root.
#
# Everything happens in a private mount namespace holding a bind of this
# root directory with a /tmp of its own, so no mount outlives the example.
RSpec.describe "static-tracing list for a process with another root directory", :subprocess do
  # Prints the stub path it sees, then waits.
  let(:script) do
    <<~'RUBY'
      $stdout.sync = true
      provider = StaticTracing::Provider.register(:chroot_app)
      provider.add_tracepoint(:tick, Integer)
      provider.load
      puts "READY #{provider.path}"
      $stdin.gets
    RUBY
  end
  let(:lib) { File.join(E2E.portable_root, "lib") }
  let(:exe) { File.join(E2E.portable_root, "exe", "static-tracing") }
  let(:ruby_with_gem) { [RbConfig.ruby, "-I", lib, "-r", "static_tracing", "-e", script] }

  # Binds / (recursively: the chroot has this root's /proc, /dev and Ruby)
  # on the directory $0, with a /tmp of its own; then runs +holder+.
  def self.setup_script(holder)
    %(mount --rbind / "$0" && mount -t tmpfs tmpfs "$0/tmp" && echo MOUNTED && #{holder})
  end

  def self.unavailable_reason
    return "needs root to mount and chroot (running as uid #{Process.euid})" unless Process.euid.zero?

    missing = %w[unshare nsenter chroot].reject { |tool| system("command -v #{tool} >/dev/null 2>&1") }
    return "#{missing.join(", ")} (util-linux, coreutils) not installed" unless missing.empty?

    Dir.mktmpdir("static_tracing-chroot", "/var/tmp") do |dir|
      out, status = Open3.capture2e("unshare", "--mount", "--propagation", "private", "sh", "-c",
                                    setup_script("true"), dir)
      "cannot bind / and mount a tmpfs in a mount namespace here: #{out.strip}" unless status.success?
    end
  end

  before do
    skip "USDT probes are not supported on #{RUBY_PLATFORM}" unless StaticTracing.supported?
    reason = self.class.unavailable_reason or next
    cannot_run!(reason)
  end

  # The chroot directory, as the command and the namespace see it.
  let(:chroot_dir) { Dir.mktmpdir("static_tracing-chroot", "/var/tmp") }
  let(:namespace) do
    shell = E2E::Child.new("unshare", "--mount", "--propagation", "private", "sh", "-c",
                           self.class.setup_script("exec cat"), chroot_dir)
    started_processes << shell
    shell.wait_for(/^MOUNTED$/)
    shell
  end

  after do
    stop_started_processes
    FileUtils.rmdir(chroot_dir) if File.directory?(chroot_dir)
  end

  # +command+ run in the namespace, with its root and working directory.
  def in_namespace(*command)
    ["nsenter", "--target", namespace.pid.to_s, "--mount", "--root", "--wd", *command]
  end

  # The process started with +command+ (which execs it, so its pid is the
  # child's), and the stub path it sees.
  def start(*command)
    process = E2E::Child.new(*command).tap { |child| started_processes << child }
    [process, process.wait_for(/^READY (\S+)$/)[1]]
  end

  def listed_stub(pid, command)
    result = run_cli("list", "--json", pid, command:)
    expect(result).to have_attributes(exitstatus: 0, stderr: "")
    stubs = JSON.parse(result.stdout)["providers"]
    expect(stubs.map { |stub| stub["name"] }).to eq(["chroot_app"])
    expect(stubs.first["probes"].map { |probe| probe["name"] }).to eq(["tick"])
    stubs.first
  end

  it "shows a chrooted process's stub by its path in the chroot, not by the command's path to it" do
    process, path = start(*in_namespace("chroot", chroot_dir, *ruby_with_gem))
    stub = listed_stub(process.pid, in_namespace(RbConfig.ruby, exe))
    expect(stub["path"]).to eq(path)
    expect(stub["mapping"]).to eq(File.join(chroot_dir, path))
  end

  it "does so for a chrooted process in a mount namespace and a /tmp of its own" do
    contained = ["unshare", "--mount", "sh", "-c", 'mount -t tmpfs tmpfs /tmp && exec "$0" "$@"', *ruby_with_gem]
    process, path = start(*in_namespace("chroot", chroot_dir, *contained))
    stub = listed_stub(process.pid, in_namespace(RbConfig.ruby, exe))
    expect(stub["path"]).to eq(path)
    expect(stub["mapping"]).to end_with(path).and(satisfy("name a path longer than #{path}") { |name| name != path })
  end

  it "shows the stub of a process outside the command's chroot by the process's path to it" do
    process, path = start(*in_namespace(*ruby_with_gem))
    stub = listed_stub(process.pid, in_namespace("chroot", chroot_dir, RbConfig.ruby, exe))
    expect(stub["path"]).to eq(path)
    # The kernel names the file from the reader's root, or from the top of
    # the mount tree when that root does not lead to it (this run itself in a chroot).
    expect(stub["mapping"]).to end_with(path)
  end
end
