# frozen_string_literal: true

require "fileutils"
require "open3"
require_relative "../spec/support/e2e"

module Bench
  ROOT = File.expand_path("..", __dir__)
  # Generated sources, binaries, configurations and process logs.
  WORK_DIR = File.join(ROOT, "tmp", "bench")

  # A process started by the benchmark, in a process group of its own (so
  # that its children, unicorn's workers, go with it), its stdout and
  # stderr written to a log file that is read as it grows: no thread of
  # the benchmark's own has to read a pipe while it times calls. Every
  # wait is bounded and ends on what the process printed or on its exit.
  class Child
    POLL = 0.01

    attr_reader :pid, :log

    def initialize(*command, log:, env: {})
      FileUtils.mkdir_p(File.dirname(log))
      @log = log
      @command = command
      @pid = Process.spawn(env, *command, in: File::NULL, out: [log, "w"], err: %i[child out], pgroup: true,
                                          chdir: ROOT)
      @status = nil
    end

    def output
      File.read(@log)
    rescue Errno::ENOENT
      ""
    end

    # Waits until the output matches +pattern+; returns the MatchData.
    def wait_for(pattern, timeout:)
      deadline = Bench.now_ns + (timeout * 1e9)
      loop do
        match = output.match(pattern)
        return match if match
        raise "#{name} exited (#{@status.inspect}) before printing #{pattern.inspect}:\n#{tail}" if exited?
        raise "timed out after #{timeout} s waiting for #{pattern.inspect} from #{name}:\n#{tail}" if
          Bench.now_ns > deadline

        sleep POLL
      end
    end

    def exited?
      @status ||= Process.waitpid2(@pid, Process::WNOHANG)&.last
      !@status.nil?
    end

    # Waits for the exit; kills the group when it takes longer than +timeout+.
    def wait(timeout:)
      deadline = Bench.now_ns + (timeout * 1e9)
      sleep POLL until exited? || Bench.now_ns > deadline
      return @status if exited?

      kill
      raise "#{name} did not exit within #{timeout} s:\n#{tail}"
    end

    def stop(signal = "TERM", timeout: 10)
      signal_group(signal)
      wait(timeout:)
    end

    # For ensure blocks: whatever state the process is in, it is gone after.
    def kill
      return if exited?

      signal_group("KILL")
      @status = Process.waitpid2(@pid).last
    rescue Errno::ECHILD
      nil
    end

    def name
      "#{File.basename(@command.first)} (pid #{@pid})"
    end

    def tail(lines = 20)
      output.lines.last(lines).join
    end

    private

    def signal_group(signal)
      Process.kill(signal, -@pid)
    rescue Errno::ESRCH
      nil
    end
  end

  # Runs +command+ to its end, bounded by +timeout+; returns its output,
  # raising with it when the command fails.
  def self.run_command(*command, log:, timeout:, env: {})
    child = Child.new(*command, log:, env:)
    status = child.wait(timeout:)
    raise "#{command.join(" ")} failed (#{status.inspect}):\n#{child.tail}" unless status.success?

    child.output
  ensure
    child&.kill
  end

  # The path of +command+ in PATH, or nil.
  def self.which(command)
    ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).map { |dir| File.join(dir, command) }
       .find { |path| File.file?(path) && File.executable?(path) }
  end

  # bpftrace, when it can run here.
  module Bpftrace
    READY = "BENCH_BPFTRACE_READY"

    class << self
      # The same bpftrace, and the same checks of whether it can run here,
      # as the end-to-end specs.
      def path
        E2E.bpftrace
      end

      # Why attached measurements cannot be made here, or nil when they can.
      def unavailable_reason
        E2E.unavailable_reason
      end

      # `bpftrace -l PATTERN -p PID`, the probes it lists.
      def list(pattern, pid:)
        out, = Open3.capture2e(path, "-l", pattern, "-p", pid.to_s)
        out.lines.map(&:strip).grep(/\A(usdt|uprobe):/)
      end
    end

    # bpftrace running +program+, started with a BEGIN probe that prints a
    # marker, which it reaches only once every probe is attached: the
    # constructor returns when the tracer is in place.
    class Session < Child
      def initialize(program, log:, pid: nil, timeout: 30)
        target = pid ? ["-p", pid.to_s] : []
        super(Bpftrace.path, *target, "-e", %(BEGIN { printf("#{READY}\\n"); } #{program}), log:)
        begin
          wait_for(/^#{READY}$/, timeout:)
        rescue StandardError
          kill
          raise
        end
      end

      # Stops bpftrace with SIGINT, upon which it prints its maps; returns
      # the counts of the map printed, by key (the map's name when it has
      # no key), or nil when it did not exit in time (it is killed then:
      # what was measured while it was attached stands, only its counts
      # are lost).
      def finish(timeout: 20)
        signal_group("INT")
        deadline = Bench.now_ns + (timeout * 1e9)
        sleep POLL until exited? || Bench.now_ns > deadline
        unless exited?
          warn "bench: #{name} did not exit within #{timeout} s of SIGINT, killed:\n#{tail}#{where}"
          kill
          return nil
        end
        output.scan(/^@(\w*)(?:\[(.*)\])?: (\d+)$/).to_h { |map, key, count| [key || map, Integer(count)] }
      end

      def name
        "bpftrace (pid #{pid})"
      end

      private

      # Where each of its threads is waiting, for the warning about a
      # bpftrace that does not exit.
      def where
        Dir.glob("/proc/#{pid}/task/*").map do |task|
          state = File.read("#{task}/stat")[/\) (\S)/, 1]
          stack = File.exist?("#{task}/stack") ? File.read("#{task}/stack").lines.first(8).join : ""
          "\n  thread #{File.basename(task)} #{File.read("#{task}/comm").strip} state #{state} " \
            "wchan #{File.read("#{task}/wchan")}\n#{stack.gsub(/^/, "    ")}"
        rescue SystemCallError
          ""
        end.join
      end
    end

    # Runs the block with a Session of +program+ attached (to +pid+ when
    # given) and stops it after; yields nil when bpftrace cannot run here.
    def self.attached(program, log:, pid: nil, &)
      return yield(nil) if unavailable_reason

      session = Session.new(program, log:, pid:)
      yield session
    ensure
      session&.kill
    end
  end
end
