# frozen_string_literal: true

require "fileutils"
require "rbconfig"
require "tmpdir"

# Stub directories someone prepared badly, or with intent: on a noexec or
# read-only mount, full, a symbolic link planted where the gem looks, owned
# by another user, open to the group or the world. Each example runs a Ruby
# child in a mount namespace of its own whose /tmp is a directory of the
# example's, so that the default candidate (/tmp/static_tracing-<uid>) is
# the example's to plant things at and nothing is shared with other runs.
module HostileStubDirectories
  # A REPL child (see spec/support/e2e.rb) whose /tmp is +tmp+, bind-mounted
  # in a private mount namespace; unshare and sh exec, so its pid is Ruby's.
  # It loads the gem from a copy outside /tmp: the checkout may be under it.
  class IsolatedRepl < E2E::Repl
    def initialize(setup, tmp:, env:) # rubocop:disable Lint/MissingSuper
      command = ["unshare", "--mount", "--propagation", "private", "--",
                 "sh", "-c", 'mount --rbind "$0" /tmp && exec "$@"', tmp,
                 RbConfig.ruby, "-I", File.join(E2E.portable_root, "lib"), "-r", "static_tracing", "-e",
                 "#{setup}\n#{SERVER}"]
      E2E::Child.instance_method(:initialize).bind_call(self, *command, env:)
      wait_for(/^REPL_READY \d+$/)
      @next_id = 0
    end
  end

  CHILD_SETUP = <<~RUBY
    def load_probe(name)
      provider = StaticTracing::Provider.register(name)
      hello = provider.add_tracepoint(:hello, Integer, String)
      provider.load
      raise "fired while no tracer is attached" if hello.fire(1, "stub is callable")

      provider.path
    end

    def refused?(name)
      StaticTracing::Provider.load(name)
      false
    rescue ArgumentError
      true
    end

    def mapped(path)
      File.readlines("/proc/self/maps").grep(/\#{Regexp.escape(path)}/)
    end
  RUBY

  # Settings that would choose other candidates than the example's.
  CLEAN_ENV = %w[STATIC_TRACING_DIR XDG_RUNTIME_DIR STATIC_TRACING_MODE STATIC_TRACING_SIGNAL]
              .to_h { |name| [name, nil] }

  NOBODY = 65_534
end

RSpec.describe "Hostile stub directories" do
  include E2E::Helpers

  let(:uid) { Process.euid }
  let(:default_dir) { "/tmp/static_tracing-#{uid}" }

  before do
    require_root!
    @mounts = []
    @base = Dir.mktmpdir("static_tracing_hostile", "/var/tmp")
    @tmp = File.join(@base, "tmp")
    Dir.mkdir(@tmp)
    File.chmod(0o1777, @tmp)
  end

  after do
    stop_started_processes
    @mounts&.reverse_each do |mount|
      system("umount", mount, err: File::NULL) or system("umount", "--lazy", mount, exception: true)
    end
    FileUtils.rm_rf(@base) if @base
  end

  # Mounting, chowning to another user and unsharing need root; skipped
  # otherwise, failed when STATIC_TRACING_REQUIRE_E2E=1.
  def require_root!
    reason =
      if !RUBY_PLATFORM.include?("linux") then "stub directories are Linux only"
      elsif !StaticTracing.supported? then "USDT probes are not supported on #{RUBY_PLATFORM}"
      elsif Process.euid != 0 then "mounting test file systems needs root (running as uid #{Process.euid})"
      elsif !system("command -v unshare >/dev/null 2>&1") then "unshare (util-linux) is not installed"
      end
    cannot_run!(reason) if reason
  end

  def start_child(env = {})
    env = HostileStubDirectories::CLEAN_ENV.merge(env)
    HostileStubDirectories::IsolatedRepl.new(HostileStubDirectories::CHILD_SETUP, tmp: @tmp, env:)
                                        .tap { |child| started_processes << child }
  end

  def path_in(*parts)
    File.join(@base, *parts)
  end

  # A private directory (0700, ours) under the example's base.
  def private_dir(*parts, mode: 0o700)
    path_in(*parts).tap do |path|
      FileUtils.mkdir_p(path)
      File.chmod(mode, path)
    end
  end

  def mount_tmpfs(name, options)
    private_dir(name).tap do |path|
      system("mount", "-t", "tmpfs", "-o", options, "tmpfs", path, exception: true)
      @mounts << path
    end
  end

  # Fills the file system of +dir+ up with a file named filler.
  def fill(dir)
    File.open(File.join(dir, "filler"), "wb") do |file|
      loop { file.syswrite("\0" * 4096) }
    rescue Errno::ENOSPC
      nil
    end
  end

  # Where a path of the child's is seen from here: its /tmp is @tmp.
  def host_path(path)
    path.start_with?("/tmp/") ? File.join(@tmp, path.delete_prefix("/tmp/")) : path
  end

  def default_host_dir
    host_path(default_dir)
  end

  # What the child printed besides its REPL answers: the gem's warnings.
  def warnings(child)
    child.output.lines.map(&:chomp).grep_v(/\A(REPL_READY \d+|r\d+ \w+ \S*)\z/)
  end

  # How a warning names a candidate that was skipped, and why.
  def skipped(path, origin, reason)
    /#{Regexp.escape(path)} \(#{Regexp.escape(origin)}\): #{reason}/
  end

  def expect_one_warning(child, *reasons)
    lines = warnings(child)
    expect(lines.size).to eq(1), "expected one warning, got:\n#{lines.join("\n")}"
    state = "cannot publish this process's tracing state .*memfd.*: no stub directory is usable"
    expect(lines.first).to match(/\Astatic_tracing: (stub directory skipped|#{state}): /)
    reasons.each { |reason| expect(lines.first).to match(reason) }
  end

  def stub_file_pattern(child, dir, provider)
    %r{\A#{Regexp.escape(dir)}/#{provider}-#{StubNames.process_key(child.pid)}-\d+\.so\z}
  end

  # The child's stub is a real file, the only entry in +dir+ with the state.
  def expect_stub_in(child, dir, path, provider: "hostile")
    expect(path).to match(stub_file_pattern(child, dir, provider))
    host = host_path(path)
    expect(File.lstat(host)).to be_file
    expect(File.lstat(host).uid).to eq(uid)
    expect(child.evaluate("mapped(#{path.inspect}).size")).to be >= 1
  end

  def expect_memfd(child, path, provider: "hostile")
    expect(path).to match(%r{\A/proc/#{child.pid}/fd/\d+\z})
    expect(child.evaluate("mapped('memfd:static_tracing:#{provider} (deleted)').size")).to be >= 1
  end

  # `<pid>-<pidns>.state` is published in +dir+ (the child's view), a regular 0600
  # file of ours; or nowhere, when +dir+ is nil.
  def expect_state_in(child, dir)
    path = child.evaluate("StaticTracing::State.path")
    if dir.nil?
      expect(path).to be_nil
    else
      expect(path).to eq(File.join(dir, StubNames.state_file(child.pid)))
      stat = File.lstat(host_path(path))
      expect(stat).to be_file
      expect([stat.mode & 0o7777, stat.uid]).to eq([0o600, uid])
    end
  end

  def expect_no_writable_executable_mapping(child)
    maps = File.readlines("/proc/#{child.pid}/maps")
    expect(maps.size).to be > 10
    expect(maps.select { |line| line.split[1].match?(/w.x/) }).to be_empty
  end

  # Nothing was created in, or removed from, +dir+.
  def expect_untouched(dir, entries = [])
    expect(Dir.children(dir).sort).to eq(entries.sort)
  end

  it "skips a directory on a noexec mount for the next candidate, saying so once" do
    noexec = mount_tmpfs("noexec", "noexec,nosuid,size=1m,mode=0700")
    child = start_child("STATIC_TRACING_DIR" => noexec)

    path = child.evaluate("load_probe(:hostile)")
    expect_stub_in(child, default_dir, path)
    expect_one_warning(child, skipped(noexec, "$STATIC_TRACING_DIR", "it is on a file system mounted noexec\\z"))
    expect(child.evaluate("load_probe(:second)")).to match(stub_file_pattern(child, default_dir, "second"))
    expect(warnings(child).size).to eq(1)
    expect_state_in(child, default_dir)
    expect_untouched(noexec)
    expect_no_writable_executable_mapping(child)
  end

  it "skips a read-only directory, and a candidate it cannot create on a read-only mount" do
    readonly = mount_tmpfs("readonly", "ro,size=1m,mode=0700")
    child = start_child("STATIC_TRACING_DIR" => readonly, "XDG_RUNTIME_DIR" => readonly)

    path = child.evaluate("load_probe(:hostile)")
    expect_stub_in(child, default_dir, path)
    expect_one_warning(
      child,
      skipped(readonly, "$STATIC_TRACING_DIR", "cannot write a file in it \\(Read-only file system"),
      skipped("#{readonly}/static_tracing", "$XDG_RUNTIME_DIR", "cannot create it \\(Read-only file system")
    )
    expect_state_in(child, default_dir)
    expect_untouched(readonly)
    expect_no_writable_executable_mapping(child)
  end

  it "skips a full directory and leaves no partial file in it" do
    full = mount_tmpfs("full", "size=64k,mode=0700")
    fill(full)
    child = start_child("STATIC_TRACING_DIR" => full)

    path = child.evaluate("load_probe(:hostile)")
    expect_stub_in(child, default_dir, path)
    expect_one_warning(child, skipped(full, "$STATIC_TRACING_DIR", "cannot write a file in it \\(No space left"))
    expect_state_in(child, default_dir)
    expect_untouched(full, ["filler"])
    expect_no_writable_executable_mapping(child)
  end

  it "never follows a symbolic link planted at the default path, and loads from a memfd as the last resort" do
    target = private_dir("target")
    File.symlink(target, default_host_dir)
    child = start_child

    path = child.evaluate("load_probe(:hostile)")
    expect_memfd(child, path)
    expect_one_warning(child, /: #{skipped(default_dir, "default", "it is a symbolic link\\z")}/)
    expect(child.evaluate("load_probe(:second)")).to match(%r{\A/proc/#{child.pid}/fd/\d+\z})
    expect(warnings(child).size).to eq(1)
    expect_state_in(child, nil)
    expect_untouched(target)
    expect(File.readlink(default_host_dir)).to eq(target)
    expect_no_writable_executable_mapping(child)
  end

  it "never follows symbolic links at $STATIC_TRACING_DIR or the $XDG_RUNTIME_DIR candidate, dangling or not" do
    target = private_dir("target")
    missing = path_in("missing")
    File.symlink(missing, path_in("dangling"))
    xdg = private_dir("xdg")
    File.symlink(target, File.join(xdg, "static_tracing"))
    child = start_child("STATIC_TRACING_DIR" => path_in("dangling"), "XDG_RUNTIME_DIR" => xdg)

    path = child.evaluate("load_probe(:hostile)")
    expect_stub_in(child, default_dir, path)
    expect_one_warning(child,
                       skipped(path_in("dangling"), "$STATIC_TRACING_DIR", "it is a symbolic link"),
                       skipped("#{xdg}/static_tracing", "$XDG_RUNTIME_DIR", "it is a symbolic link"))
    expect_state_in(child, default_dir)
    expect_untouched(target)
    expect(File.exist?(missing)).to be(false)
    expect_no_writable_executable_mapping(child)
  end

  it "refuses directories owned by another user" do
    other = private_dir("other")
    File.chown(HostileStubDirectories::NOBODY, HostileStubDirectories::NOBODY, other)
    xdg = private_dir("xdg")
    others_candidate = private_dir("xdg", "static_tracing")
    File.chown(HostileStubDirectories::NOBODY, nil, others_candidate)
    child = start_child("STATIC_TRACING_DIR" => other, "XDG_RUNTIME_DIR" => xdg)

    path = child.evaluate("load_probe(:hostile)")
    expect_stub_in(child, default_dir, path)
    owned = "it is owned by uid #{HostileStubDirectories::NOBODY}, not by this process's uid #{uid}"
    expect_one_warning(child,
                       skipped(other, "$STATIC_TRACING_DIR", owned),
                       skipped(others_candidate, "$XDG_RUNTIME_DIR", owned))
    expect_state_in(child, default_dir)
    expect_untouched(other)
    expect_untouched(others_candidate)
    expect_no_writable_executable_mapping(child)
  end

  it "refuses group- or world-writable directories" do
    world = private_dir("world", mode: 0o777)
    xdg = private_dir("xdg")
    group = private_dir("xdg", "static_tracing", mode: 0o770)
    child = start_child("STATIC_TRACING_DIR" => world, "XDG_RUNTIME_DIR" => xdg)

    path = child.evaluate("load_probe(:hostile)")
    expect_stub_in(child, default_dir, path)
    expect_one_warning(child,
                       skipped(world, "$STATIC_TRACING_DIR", "its mode is 0777: .*private"),
                       skipped(group, "$XDG_RUNTIME_DIR", "its mode is 0770: .*private"))
    expect_state_in(child, default_dir)
    expect_untouched(world)
    expect_untouched(group)
    expect_no_writable_executable_mapping(child)
  end

  it "loads from a memfd when every candidate is hostile, and says once why each was skipped" do
    noexec = mount_tmpfs("noexec", "noexec,size=1m,mode=0700")
    xdg = private_dir("xdg")
    open_candidate = private_dir("xdg", "static_tracing", mode: 0o1777)
    File.chown(HostileStubDirectories::NOBODY, nil, private_dir("tmp", "static_tracing-#{uid}"))
    child = start_child("STATIC_TRACING_DIR" => noexec, "XDG_RUNTIME_DIR" => xdg)

    path = child.evaluate("load_probe(:hostile)")
    expect_memfd(child, path)
    expect_one_warning(child,
                       skipped(noexec, "$STATIC_TRACING_DIR", "it is on a file system mounted noexec"),
                       skipped(open_candidate, "$XDG_RUNTIME_DIR", "its mode is 1777"),
                       skipped(default_dir, "default", "it is owned by uid #{HostileStubDirectories::NOBODY}"))
    expect(child.evaluate("StaticTracing.providers[:hostile].tracepoints[:hello].fire(2, 'memfd')")).to be(false)
    expect_state_in(child, nil)
    [noexec, open_candidate, default_host_dir].each { |dir| expect_untouched(dir) }
    expect_no_writable_executable_mapping(child)
  end

  it "loads from a memfd when every candidate is read-only or full, and says so once for stubs and state alike" do
    full = mount_tmpfs("full", "size=64k,mode=0700")
    fill(full)
    xdg = mount_tmpfs("xdg", "size=1m,mode=0700")
    Dir.mkdir(File.join(xdg, "static_tracing"), 0o700)
    system("mount", "-o", "remount,ro", xdg, exception: true)
    default_full = mount_tmpfs(File.join("tmp", "static_tracing-#{uid}"), "size=64k,mode=0700")
    fill(default_full)
    child = start_child("STATIC_TRACING_DIR" => full, "XDG_RUNTIME_DIR" => xdg)

    path = child.evaluate("load_probe(:hostile)")
    expect_memfd(child, path)
    expect_one_warning(child,
                       skipped(full, "$STATIC_TRACING_DIR", "cannot write a file in it \\(No space left"),
                       skipped("#{xdg}/static_tracing", "$XDG_RUNTIME_DIR", "cannot write a file in it \\(Read-only"),
                       skipped(default_dir, "default", "cannot write a file in it \\(No space left"))
    expect_state_in(child, nil)
    expect_untouched(full, ["filler"])
    expect_untouched(File.join(xdg, "static_tracing"))
    expect_untouched(default_full, ["filler"])
    expect_no_writable_executable_mapping(child)
  end

  it "names stub files <provider>-<pid>-<pidns>-<generation>.so, directly inside the directory, for any valid name" do
    dir = path_in("stubs")
    child = start_child("STATIC_TRACING_DIR" => dir)
    names = ["_", "a" * 128, "A9_z", "__proto__", "dev_null", "CON"]

    paths = names.map { |name| child.evaluate("load_probe(#{name.inspect})") }
    names.zip(paths).each { |name, path| expect_stub_in(child, dir, path, provider: name) }
    escapes = ["../x", "a/b", "/etc/passwd", ".", "..", "", "a\0b", "x.so", "a\nb"]
    expect(child.evaluate("#{escapes.inspect}.map { |name| refused?(name) }")).to all(be(true))
    expect(Dir.children(dir))
      .to match_array(paths.map { |path| File.basename(path) } +
                      [StubNames.state_file(child.pid), StubNames.control_file(child.pid)])
    expect(File.stat(dir).mode & 0o7777).to eq(0o700)
    expect(warnings(child)).to be_empty
    expect_no_writable_executable_mapping(child)
  end

  it "replaces links planted at its own file names instead of writing through them" do
    victim = path_in("victim")
    File.write(victim, "not to be touched\n")
    before = File.stat(victim)
    child = start_child
    key = StubNames.process_key(child.pid)
    expect_state_in(child, default_dir)
    dir = default_host_dir
    4.times { |generation| File.symlink(victim, File.join(dir, "planted-#{key}-#{generation}.so")) }
    File.symlink(victim, File.join(dir, ".#{key}.state.new"))
    File.unlink(File.join(dir, "#{key}.state"))
    File.symlink(victim, File.join(dir, "#{key}.state"))

    path = child.evaluate("load_probe(:planted)")
    child.evaluate("StaticTracing::State.publish")
    expect_stub_in(child, default_dir, path, provider: "planted")
    expect_state_in(child, default_dir)
    expect(File.read(victim)).to eq("not to be touched\n")
    expect([File.stat(victim).size, File.stat(victim).mtime]).to eq([before.size, before.mtime])
    links = Dir.children(dir).select { |name| File.symlink?(File.join(dir, name)) }
    expect(links.size).to eq(3)
    expect(links).to all(match(/\Aplanted-#{key}-[0-3]\.so\z/))
    expect(links).not_to include(File.basename(path))
    expect(warnings(child)).to be_empty
    expect_no_writable_executable_mapping(child)
  end
end
