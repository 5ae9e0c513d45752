# frozen_string_literal: true

require "static_tracing/cli"

# The recorder never harms the process it records: a limit it would break
# is a one-line refusal, never a signal; a start that fails leaves nothing;
# making a large ring and copying it never stop the process's threads; a
# snapshot holds what the ring holds, no more.
RSpec.describe "The recorder's harmlessness" do
  include E2E::Helpers
  include_context "with a temporary directory", "recorder_harm"

  include_context "with the recorder of this process"

  let(:recorder) { StaticTracing::Recorder }

  # This process's ring files, wherever its rings may be (others may
  # record in the same directories).
  def ring_files
    dirs = StaticTracing::CLI::ProcessState.new(Process.pid).ring_dirs(StaticTracing::State.path)
    dirs.select { |dir| Dir.exist?(dir) }.flat_map { |dir| Dir.children(dir) }.grep(/\A#{Process.pid}-\d+\.ring\z/)
  end

  # Where the children's rings go: a directory of this example's, in memory.
  let(:ring_dir) { Dir.mktmpdir("recorder_harm", "/dev/shm") }

  # A Ruby child with the gem, allowed files of +kib+ KiB at most (ulimit
  # -f), as a process started under that limit has it from its first line.
  def limited_ruby(kib, script, env: {})
    command = ["sh", "-c", "ulimit -f #{kib} && exec \"$@\"", "sh",
               RbConfig.ruby, "-I", E2E::LIB, "-r", "static_tracing", "-e", script]
    E2E::Child.new(*command, env: { "STATIC_TRACING_DIR" => @dir, "STATIC_TRACING_RING_DIR" => ring_dir, **env })
              .tap { |child| started_processes << child }
  end

  after do
    stop_started_processes
    FileUtils.rm_rf(ring_dir)
  end

  describe "a file-size limit (ulimit -f)" do
    it "refuses a boot recording (STATIC_TRACING_RECORD) the limit cannot hold with one line; the app boots" do
      child = limited_ruby(8192, "puts \"booted, recording: \#{StaticTracing::Recorder.recording?}\"",
                           env: { "STATIC_TRACING_RECORD" => "--flight" })
      status = child.wait(timeout: 30)

      expect(status.signaled?).to be(false), "killed by signal #{status.termsig}:\n#{child.output}"
      expect(status.exitstatus).to eq(0), child.output
      expect(child.output).to include("booted, recording: false")
      warning = child.output.lines.grep(/STATIC_TRACING_RECORD/)
      expect(warning.size).to eq(1), child.output
      expect(warning.first).to match(/ulimit -f/).and match(/--size/)
      expect(Dir.children(ring_dir).grep(/\.ring\z/)).to be_empty
    end

    it "refuses Recorder.start past the limit with a RecorderError, and a ring within it records" do
      child = limited_ruby(8192, <<~RUBY)
        begin
          StaticTracing::Recorder.start(size: "16M")
        rescue StaticTracing::RecorderError => e
          puts "refused: \#{e.message}"
        end
        tracepoint = StaticTracing::Tracepoint.new(:harm_limit, :event, Integer)
        StaticTracing::Recorder.start(size: "1M")
        tracepoint.fire(7)
        puts "recording: \#{StaticTracing::Recorder.status["ring"]}"
      RUBY
      status = child.wait(timeout: 30)

      expect(status.exitstatus).to eq(0), child.output
      expect(child.output).to match(/^refused: .*ulimit -f.*--size/)
      expect(child.output).to match(/^recording: .*\.ring$/)
    end

    it "refuses a snapshot the limit cannot hold (it was lowered since the ring was made): the process lives" do
      child = limited_ruby(8192, <<~RUBY)
        tracepoint = StaticTracing::Tracepoint.new(:harm_snapshot, :event, String)
        StaticTracing::Recorder.start(flight: true, size: "1M")
        2000.times { tracepoint.fire("x" * 100) }
        Process.setrlimit(:FSIZE, 4096)
        begin
          StaticTracing::Recorder.dump(File.join(#{@dir.dump}, "big.trace"))
        rescue StaticTracing::RecorderError => e
          puts "refused: \#{e.message}"
        end
        puts "still running"
      RUBY
      status = child.wait(timeout: 30)

      expect(status.signaled?).to be(false), "killed by signal #{status.termsig}:\n#{child.output}"
      expect(child.output).to match(/^refused: cannot write .*big\.trace: .*ulimit -f/)
      expect(child.output).to include("still running")
      expect(File.exist?(File.join(@dir, "big.trace"))).to be(false)
    end
  end

  describe "a start that fails" do
    it "leaves nothing: no recording, no ring file, nothing armed, and the next start works" do
      armed = StaticTracing::Tracepoint.new(:harm_start, :first, Integer)
      StaticTracing::Tracepoint.new(:harm_start, :second, Integer)
      calls = 0
      allow(StaticTracing::Native).to receive(:recorder_arm).and_wrap_original do |original, *args|
        raise RangeError, "the second probe cannot be armed" if (calls += 1) == 2

        original.call(*args)
      end

      expect { recorder.start(probes: ["harm_start:*"]) }.to raise_error(RangeError, /second probe/)
      expect(recorder.recording?).to be(false)
      expect(recorder.status).to be_nil
      expect(armed.recorded?).to be(false)
      expect(ring_files).to be_empty

      RSpec::Mocks.space.proxy_for(StaticTracing::Native).reset
      recorder.start(probes: ["harm_start:*"])
      expect(recorder.status["armed"]).to eq(2)
    end
  end

  describe "a large ring" do
    # Counts the turns a thread gets while +work+ runs in this one: a
    # thread waiting for the GVL all along gets none.
    def turns_of_another_thread_during
      ticks = 0
      running = true
      ticker = Thread.new { ticks += 1 while running }
      Thread.pass until ticks.positive?
      before = ticks
      yield
      ticks - before
    ensure
      running = false
      ticker&.join
    end

    it "is made while the process's other threads run" do
      turns = turns_of_another_thread_during { recorder.start(flight: true, size: "256M") }
      expect(turns).to be > 0
    end

    it "is copied into a snapshot while the process's other threads run, recording too" do
      tracepoint = StaticTracing::Tracepoint.new(:harm_copy, :event, Integer)
      recorder.start(flight: true, size: "8M")
      slots = (8 << 20) / 32
      slots.times { |i| tracepoint.fire(i) }
      path = File.join(@dir, "big.trace")

      turns = turns_of_another_thread_during { recorder.dump(path) }
      expect(turns).to be > 0
      expect(StaticTracing::CLI::TraceFile.read(path).records.size).to eq(slots)
    end
  end

  describe "a snapshot" do
    it "is sized to the records it holds, not to the ring" do
      tracepoint = StaticTracing::Tracepoint.new(:harm_size, :event, Integer)
      recorder.start(flight: true, size: "16M")
      5.times { |i| tracepoint.fire(i) }
      path = File.join(@dir, "five.trace")
      recorder.dump(path)

      expect(File.size(path)).to be < 8192
      trace = StaticTracing::CLI::TraceFile.read(path)
      expect(trace.records.map(&:args)).to eq([[0], [1], [2], [3], [4]])
      expect(trace.lost).to eq(0)
      expect(File.stat(path).mode & 0o777).to eq(0o600)
    end

    it "is never written over an existing file nor through a link" do
      recorder.start(flight: true, size: "64K")
      target = File.join(@dir, "target")
      File.write(target, "kept")
      link = File.join(@dir, "link.trace")
      File.symlink(target, link)

      expect { recorder.dump(link) }.to raise_error(StaticTracing::RecorderError, /link\.trace/)
      expect { recorder.dump(target) }.to raise_error(StaticTracing::RecorderError, /target.*exists/)
      expect(File.read(target)).to eq("kept")
    end
  end
end
