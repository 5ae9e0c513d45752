# frozen_string_literal: true

require "fileutils"
require "open3"
require "tmpdir"
require "static_tracing/cli"

# The ring lives in memory (docs/recording.md, "Where rings live"): a
# process recording steadily writes nothing to a disk; a ring its tmpfs
# cannot hold (a container's /dev/shm) is a one-line refusal at `record`,
# and one it holds is reserved whole, so that filling the tmpfs later
# never faults the process; the rings of killed processes are bounded.
module RingInMemory
  MIB = 1 << 20
  # Bytes of a one-Integer record: a slot of the ring.
  SLOT = 32
  # Rings of dead processes kept in a directory (ext/stapsdt/src/leftovers.rs).
  KEPT_RINGS = 8
  # The size of the /dev/shm of "a container" below.
  SHM_SIZE = "4m"
end

RSpec.describe "The ring in memory", :subprocess do
  include CLIHelpers
  include E2E::Recording

  # A directory of this example's in /dev/shm, for STATIC_TRACING_RING_DIR.
  let(:ring_dir) { Dir.mktmpdir("static_tracing-memory", "/dev/shm") }

  after { FileUtils.rm_rf(ring_dir) }

  # The name of the file system +path+ is on.
  def file_system(path)
    out, status = Open3.capture2("stat", "-f", "-c", "%T", path)
    raise "stat -f #{path} failed" unless status.success?

    out.strip
  end

  # The process's own count of bytes it had written to a disk's page cache
  # (its dirty pages included): `write_bytes` in /proc/PID/io.
  def write_bytes(pid)
    Integer(File.read("/proc/#{pid}/io")[/^write_bytes: (\d+)$/, 1])
  end

  # Bytes written to the machine's disks (whole disks, not partitions,
  # nor loop, RAM or mapper devices): sectors written in /proc/diskstats.
  def disk_bytes_written
    disks = Dir.children("/sys/block").select { |name| File.exist?("/sys/block/#{name}/device") }
    File.foreach("/proc/diskstats").sum do |line|
      fields = line.split
      disks.include?(fields[2]) ? Integer(fields[9]) * 512 : 0
    end
  end

  # Everything dirty written out now, as the kernel would write it within
  # a writeback period (vm.dirty_expire_centisecs, 30 s by default, plus
  # vm.dirty_writeback_centisecs): so a window that ends with a sync sees
  # every write the pages dirtied in it cost, without waiting for it.
  def sync_disks
    _, status = Open3.capture2e("timeout", "120", "sync")
    raise "sync did not finish within 120s" unless status.success?
  end

  describe "while recording" do
    # Fires forever, in bursts: 2,000,000 records (a lap of a 64M ring) in
    # a fraction of a second, with pauses that leave the machine's other
    # core free.
    let(:script) do
      <<~'RUBY'
        $stdout.sync = true
        tracepoint = StaticTracing::Tracepoint.new(:memory_spec, :value, Integer)
        StaticTracing::Recorder.start(flight: true, size: "#{ENV.fetch("RING_MIB")}M")
        puts "RING #{StaticTracing::Recorder.status["ring"]}"
        i = 0
        loop do
          20_000.times { tracepoint.fire(i += 1) }
          sleep 0.001
        end
      RUBY
    end

    # A window from a sync to a sync in which the ring made one more lap:
    # what process +pid+ and the disks wrote in it.
    def window(pid, ring, slots)
      sync_disks
      written = write_bytes(pid)
      disks = disk_bytes_written
      head = ring_counters(ring)[:head]
      eventually("the ring made a lap", timeout: 60) { ring_counters(ring)[:head] >= head + slots }
      sync_disks
      { process: write_bytes(pid) - written, disks: disk_bytes_written - disks }
    end

    def recording_child(size, env)
      child = ruby_process(script, env: { "RING_MIB" => (size / RingInMemory::MIB).to_s, **env })
      ring = child.wait_for(/^RING (\S+)$/, timeout: 60)[1]
      slots = size / RingInMemory::SLOT
      eventually("the ring wrapped", timeout: 60) { ring_counters(ring)[:head] >= slots }
      [child, ring, slots]
    end

    it "writes nothing to a disk: write_bytes and the disks' written sectors stay flat over a lap and a sync" do
      size = 64 * RingInMemory::MIB
      # No XDG_RUNTIME_DIR, as under most init systems, containers and CI:
      # the stub directory is /tmp's, on a disk here.
      child, ring, slots = recording_child(size, "STATIC_TRACING_DIR" => nil, "XDG_RUNTIME_DIR" => nil,
                                                 "STATIC_TRACING_RING_DIR" => nil)
      stub_dir = published_state(child.pid).dir
      shared = "/dev/shm/static_tracing-#{Process.euid}"
      expect(File.dirname(ring)).to eq(file_system(stub_dir) == "tmpfs" ? stub_dir : shared)
      expect(file_system(ring)).to eq("tmpfs")

      # The machine's other work writes to the disks too: of three windows,
      # one must be quieter than half the ring, which a ring on a disk
      # writes in every window (the next example).
      windows = []
      3.times do
        windows << window(child.pid, ring, slots)
        break if windows.last[:disks] < size / 2
      end
      expect(windows.map { |seen| seen[:process] }).to all(be < 64 * 1024), windows.inspect
      expect(windows.map { |seen| seen[:disks] }.min).to be < size / 2, windows.inspect
    end

    it "writes the ring to the disk in every window when STATIC_TRACING_RING_DIR names a directory on one" do
      size = 16 * RingInMemory::MIB
      on_disk = Dir.mktmpdir("static_tracing-memory-disk", "/var/tmp")
      skip "/var/tmp is in memory here" if file_system(on_disk) == "tmpfs"
      child, ring, slots = recording_child(size, "STATIC_TRACING_RING_DIR" => on_disk)
      expect(child.output).to match(/^static_tracing: the ring #{Regexp.quote(ring)} is on \S+, a disk: /)

      # Pages the process dirtied again before the first sync ended count
      # in its write_bytes before the window: some of a lap, not all.
      seen = window(child.pid, ring, slots)
      expect(seen[:process]).to be > 64 * 1024, seen.inspect
      expect(seen[:disks]).to be >= size / 2, seen.inspect
    ensure
      child&.kill
      FileUtils.rm_rf(on_disk) if on_disk
    end
  end

  # A process with a /dev/shm of its own, 4 MiB, in a mount namespace of its
  # own: a container's, whose /dev/shm Docker makes 64 MiB.
  describe "in a /dev/shm too small for the ring" do
    def self.unavailable_reason
      return "needs root to mount a tmpfs (running as uid #{Process.euid})" unless Process.euid.zero?

      out, status = Open3.capture2e("unshare", "--mount", "--propagation", "private", "sh", "-c",
                                    "mount -t tmpfs -o size=#{RingInMemory::SHM_SIZE} tmpfs /dev/shm")
      "unshare --mount cannot mount a tmpfs here: #{out.strip}" unless status.success?
    rescue SystemCallError => e
      "unshare cannot run here: #{e.message}"
    end

    before do
      reason = self.class.unavailable_reason or next
      cannot_run!(reason)
    end

    # Fills /dev/shm to its last byte; returns the bytes written.
    let(:setup) do
      <<~'RUBY'
        $tracepoint = StaticTracing::Tracepoint.new(:small_shm, :value, Integer)
        def fill_shm
          File.open("/dev/shm/filler", "w") do |file|
            written = 0
            loop { written += file.write("x" * 65_536) }
          rescue Errno::ENOSPC
            written
          end
        end
      RUBY
    end

    let(:app) do
      mount = "mount -t tmpfs -o size=#{RingInMemory::SHM_SIZE} tmpfs /dev/shm && exec \"$@\""
      ruby_repl(setup, env: { "STATIC_TRACING_RING_DIR" => nil },
                       prefix: ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, "sh"])
    end

    it "refuses at `record` in one line naming --size and STATIC_TRACING_RING_DIR; a ring that fits never faults" do
      refused = run_cli("record", app.pid, "--flight", "--size", "8M")
      expect(refused.exitstatus).to eq(1)
      expect(refused.stderr.lines.size).to eq(1), refused.stderr
      refusal = "static-tracing: process #{app.pid} refused: no room for the ring \\S+ \\([\\d.]+ MiB\\) in " \
                "/dev/shm/static_tracing-\\d+, where [\\d.]+ MiB are free"
      expect(refused.stderr).to match(/\A#{refusal}/)
        .and include("--size").and include("STATIC_TRACING_RING_DIR").and include("--shm-size")
      expect(app.evaluate("StaticTracing::Recorder.recording?")).to be(false)

      started = run_cli("record", app.pid, "--flight", "--size", "1M")
      expect(started.exitstatus).to eq(0), started.stderr
      ring = published_state(app.pid).recorder.fetch("ring")
      expect(ring).to start_with("/dev/shm/static_tracing-")
      expect(File.exist?(ring)).to be(false), "the ring is in the process's own /dev/shm, not the host's"

      expect(app.evaluate("fill_shm")).to be < 4 * RingInMemory::MIB
      laps = 3 * (1 << 20) / RingInMemory::SLOT
      app.evaluate("#{laps}.times { |i| $tracepoint.fire(i) }; :fired")
      expect(app.alive?).to be(true)

      trace_path = File.join(Dir.mktmpdir("static_tracing-memory-dump"), "small.trace")
      dumped = run_cli("dump", app.pid, "-o", trace_path)
      expect(dumped.exitstatus).to eq(0), dumped.stderr
      trace = read_trace(trace_path)
      expect(trace.records.last.args).to eq([laps - 1])
      expect(trace.records.size).to eq((1 << 20) / RingInMemory::SLOT)
    ensure
      FileUtils.rm_rf(File.dirname(trace_path)) if trace_path
    end
  end

  describe "the rings of killed processes" do
    # A parent that records, and forks children that record each into a
    # ring of its own (a recording the process started restarts in each
    # child), all in ring_dir.
    let(:parent) do
      ruby_repl(<<~'RUBY', env: { "STATIC_TRACING_RING_DIR" => ring_dir })
        $last = StaticTracing::Tracepoint.new(:killed, :last, Integer)
        StaticTracing::Recorder.start(flight: true, size: "64K")
        # A child recording into a ring of its own: [its pid, its ring].
        def recording_child
          reader, writer = IO.pipe
          pid = fork do
            reader.close
            sleep 0.001 until (status = StaticTracing::Recorder.status)
            $last.fire(Process.pid)
            writer.puts(status["ring"])
            writer.close
            sleep
          end
          writer.close
          ring = reader.gets.chomp
          reader.close
          Process.detach(pid)
          [pid, ring]
        end
      RUBY
    end

    def rings
      Dir.children(ring_dir).grep(/\A\d+-\d+\.ring\z/).map { |name| File.join(ring_dir, name) }
    end

    def gone?(pid)
      File.read("/proc/#{pid}/stat").split[2] == "Z"
    rescue Errno::ENOENT, Errno::ESRCH
      true
    end

    it "keeps the newest #{RingInMemory::KEPT_RINGS} rings of 50 killed processes: each start and the command sweep" do
      own = parent.evaluate("StaticTracing::Recorder.status['ring']")
      killed = 50.times.map do
        pid, ring = parent.evaluate("recording_child")
        # Bounded as the child started: what it found, and its own.
        expect(rings.size).to be <= RingInMemory::KEPT_RINGS + 1 + 2
        Process.kill("KILL", pid)
        eventually("process #{pid} is gone") { gone?(pid) }
        ring
      end

      # The last one killed is a ninth nobody has swept yet, until the
      # command reads a ring there.
      expect(rings - [own]).to match_array(killed.last(RingInMemory::KEPT_RINGS + 1))
      dumped = run_cli("dump", parent.pid, "-o", File.join(ring_dir, "parent.trace"))
      expect(dumped.exitstatus).to eq(0), dumped.stderr
      expect(rings).to match_array(killed.last(RingInMemory::KEPT_RINGS) + [own])

      # What a killed process recorded last is there to read.
      report = run_cli("report", killed.last)
      expect(report.exitstatus).to eq(0), report.stderr
      expect(report.stdout).to match(/^killed:last  1 call\b/)
    end
  end
end
