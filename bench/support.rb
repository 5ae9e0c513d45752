# frozen_string_literal: true

require "fileutils"
require "net/http"
require "open3"
require "rbconfig"
require "socket"

# The processes the benchmark starts: bpftrace, the example unicorn app,
# commands run to their end. The benchmark loads nothing from spec/: the
# few rules it shares with spec/support (which bpftrace, whether it can
# run here, how unicorn serves the example app) are copied here, small, and
# spec/bench_support_spec.rb holds each copy equal to the specs' own.
module Bench
  ROOT = File.expand_path("..", __dir__)
  # Generated sources, binaries, configurations and process logs.
  WORK_DIR = File.join(ROOT, "tmp", "bench")

  def self.now_ns = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)

  # Polls every +interval+ seconds until the block returns a truthy value,
  # which it returns; raises naming +what+ after +timeout+ seconds.
  def self.wait_until(what, timeout:, interval: 0.01)
    deadline = now_ns + (timeout * 1e9)
    loop do
      result = yield and return result
      raise "timed out after #{timeout} s waiting until #{what}" if now_ns > deadline

      sleep interval
    end
  end

  # Runs +command+ to its end within +timeout+; returns its output, raising
  # with it when the command fails.
  def self.run_command(*command, log:, timeout:, env: {})
    child = Child.new(*command, log:, env:)
    status = child.wait(timeout:)
    raise "#{command.join(" ")} failed (#{status.inspect}):\n#{child.tail}" unless status.success?

    child.output
  ensure
    child&.kill
  end

  def self.which(command)
    ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).map { |dir| File.join(dir, command) }
       .find { |path| File.file?(path) && File.executable?(path) }
  end

  # A process in a process group of its own (its children go with it),
  # stdout and stderr to a log file read as it grows: no thread of the
  # benchmark's has to read a pipe while it times calls.
  class Child
    attr_reader :pid

    def initialize(*command, log:, env: {})
      FileUtils.mkdir_p(File.dirname(log))
      @log = log
      @command = command
      @pid = Process.spawn(env, *command, in: File::NULL, out: [log, "w"], err: %i[child out], pgroup: true,
                                          chdir: ROOT)
    end

    def output = File.exist?(@log) ? File.read(@log) : ""
    def tail = output.lines.last(20).join
    def name = "#{File.basename(@command.first)} (pid #{@pid})"

    # The MatchData once the output matches +pattern+.
    def wait_for(pattern, timeout:)
      Bench.wait_until("#{name} prints #{pattern.inspect}", timeout:) do
        raise "#{name} exited (#{@status.inspect}) before printing #{pattern.inspect}:\n#{tail}" if exited?

        output.match(pattern)
      end
    end

    def exited?
      @status ||= Process.waitpid2(@pid, Process::WNOHANG)&.last
      !@status.nil?
    end

    # Waits for the exit; kills the group when it takes longer than +timeout+.
    def wait(timeout:)
      Bench.wait_until("#{name} exits", timeout:) { exited? }
      @status
    ensure
      kill
    end

    def stop(signal = "TERM", timeout: 10)
      signal(signal)
      wait(timeout:)
    end

    # Whatever state the process is in, it is gone after.
    def kill
      return if exited?

      signal("KILL")
      @status = Process.waitpid2(@pid).last
    rescue Errno::ECHILD
      nil
    end

    def signal(name)
      Process.kill(name, -@pid)
    rescue Errno::ESRCH
      nil
    end
  end

  # bpftrace, when it can run here: the same one, and the same checks, as
  # E2E.bpftrace and E2E.unavailable_reason in spec/support/e2e.rb.
  module Bpftrace
    READY = "BENCH_BPFTRACE_READY"

    def self.path
      ENV.fetch("BPFTRACE") { %w[/usr/bin/bpftrace /usr/local/bin/bpftrace].find { |path| File.executable?(path) } }
    end

    # Why attached measurements cannot be made here, or nil when they can.
    def self.unavailable_reason
      return @unavailable_reason if defined?(@unavailable_reason)

      @unavailable_reason =
        if !RUBY_PLATFORM.include?("linux") then "end-to-end tracing needs Linux"
        elsif !StaticTracing.supported? then "USDT probes are not supported on #{RUBY_PLATFORM}"
        elsif Process.euid != 0 then "bpftrace needs root (running as uid #{Process.euid})"
        elsif !path then "bpftrace is not installed"
        else
          run_reason
        end
    end

    def self.run_reason
      out, status = Open3.capture2e(path, "-e", 'BEGIN { printf("ok\n"); exit(); }')
      "bpftrace cannot run here: #{out.lines.last(3).join.strip}" unless status.success? && out.include?("ok")
    rescue SystemCallError => e
      "bpftrace cannot run here: #{e.message}"
    end

    def self.list(pattern, pid:)
      Open3.capture2e(path, "-l", pattern, "-p", pid.to_s).first.lines.map(&:strip).grep(/\A(usdt|uprobe):/)
    end

    # Runs the block with a Session of +program+ attached (to +pid+ when
    # given), killed after; yields nil when bpftrace cannot run here.
    def self.attached(program, log:, pid: nil)
      return yield(nil) if unavailable_reason

      session = Session.new(program, log:, pid:)
      yield session
    ensure
      session&.kill
    end

    # One map per probe, without a key, as the C floor counts its uprobe's:
    # a map keyed by probe would cost each hit a hash of the probe's name,
    # about 120 ns on the reference host, billed to the probe.
    def self.count_program(provider, probes)
      probes.map { |probe| "usdt:*:#{provider}:#{probe} { @#{probe} = count(); }" }.join(" ")
    end

    # The hits bpftrace counted (map => hits) against the calls made
    # (probe => calls, calibration and warm-up included).
    def self.count_note(counts, expected)
      return "WARNING: bpftrace did not exit on SIGINT: its counts are lost" unless counts

      wrong = expected.filter_map do |probe, calls|
        "#{probe}: #{counts.fetch(probe.to_s, 0)} counted for #{calls} calls" unless counts[probe.to_s] == calls
      end
      return "bpftrace counted every attached call exactly (#{expected.values.sum} calls)" if wrong.empty?

      "WARNING: bpftrace counts differ from calls made: #{wrong.join(", ")}"
    end

    # The attached numbers mean nothing unless every probe is enabled.
    def self.attached_note(tracepoints)
      detached = tracepoints.reject(&:enabled?)
      providers = tracepoints.map(&:provider).uniq.map(&:name).join(", ")
      return "bpftrace attached to every probe of #{providers} (enabled? true)" if detached.empty?

      "WARNING: bpftrace started but #{detached.map(&:inspect).join(", ")} not enabled: attached rows are wrong"
    end

    def self.skipped_note = "attached rows skipped: #{unavailable_reason}"

    # bpftrace running +program+ after a BEGIN probe that prints a marker,
    # reached once every probe is attached: #new returns with it in place.
    class Session < Child
      def initialize(program, log:, pid: nil)
        super(Bpftrace.path, *(pid ? ["-p", pid.to_s] : []), "-e", %(BEGIN { printf("#{READY}\\n"); } #{program}),
              log:)
        wait_for(/^#{READY}$/, timeout: 30)
      rescue StandardError
        kill
        raise
      end

      # Stops bpftrace with SIGINT, upon which it prints its maps: returns
      # the counts by key (the map's name when it has none), or nil when it
      # does not exit in time (what was measured stands, its counts are lost).
      def finish(timeout: 20)
        signal("INT")
        Bench.wait_until("#{name} exits on SIGINT", timeout:) { exited? }
        output.scan(/^@(\w*)(?:\[(.*)\])?: (\d+)$/).to_h { |map, key, count| [key || map, Integer(count)] }
      rescue RuntimeError => e
        warn "bench: #{e.message}, killed:\n#{tail}"
        kill
        nil
      end

      def name = "bpftrace (pid #{pid})"
    end
  end

  # The example app under a unicorn master with one worker, on a free
  # loopback port, started as E2E::UnicornApp.command starts it.
  class Unicorn < Child
    APP = File.join(ROOT, "examples", "unicorn")

    attr_reader :worker

    # unicorn's script run by this Ruby, whatever Ruby its #! line names,
    # since the extension in lib/ is built for this one.
    def self.command(config_ru, port:)
      [{ "UNICORN_LISTEN" => "127.0.0.1:#{port}", "UNICORN_WORKERS" => "1" },
       RbConfig.ruby, Bench.which("unicorn") || "unicorn", "-I", File.join(ROOT, "lib"), "-E", "none",
       "-c", File.join(APP, "unicorn.conf.rb"), config_ru]
    end

    def self.free_port = TCPServer.open("127.0.0.1", 0) { |server| server.addr[1] }

    def initialize(config_ru, log:)
      @port = Unicorn.free_port
      env, *command = Unicorn.command(config_ru, port: @port)
      super(*command, log:, env: env.merge("STATIC_TRACING_MODE" => "signal"))
      wait_for(/worker=0 ready/, timeout: 30)
      @worker = Integer(output[/worker=0 spawned pid=(\d+)/, 1])
    rescue StandardError
      kill
      raise
    end

    def name = "unicorn master (pid #{pid})"
    def url(path) = "http://127.0.0.1:#{@port}#{path}"

    # The body of GET +path+; raises unless the answer is a 200.
    def get(path)
      response = Net::HTTP.start("127.0.0.1", @port, open_timeout: 5, read_timeout: 10) { |http| http.get(path) }
      raise "GET #{path}: #{response.code} #{response.body}" unless response.code == "200"

      response.body
    end

    # Whether the worker has the extension mapped: not when the gem was never required.
    def gem_loaded? = File.foreach("/proc/#{@worker}/maps").any? { |line| line.include?("static_tracing.so") }

    # The stub file of +provider+ the worker has mapped, found as the
    # static-tracing command finds it.
    def stub_path(provider)
      require "static_tracing/cli"
      stub = StaticTracing::CLI::Target.new(@worker).stubs.find { |candidate| candidate.provider == provider }
      stub&.path or raise "worker #{@worker} has no stub of #{provider} mapped"
    end

    # CPU time the worker's threads have run, in ns: what a request costs
    # it, whatever else the host is running.
    def worker_cpu_ns
      Dir.glob("/proc/#{@worker}/task/*/schedstat").sum do |path|
        Integer(File.read(path).split.first)
      rescue Errno::ENOENT
        0
      end
    end

    # Sends the toggle signal to the worker and waits until it reports
    # tracing in the state wanted (GET /tracing, answered by that worker).
    def toggle_tracing(enabled)
      Process.kill("TRAP", @worker)
      Bench.wait_until("worker #{@worker} reports enabled=#{enabled}", timeout: 10) do
        get("/tracing").then { |state| state.include?("enabled=#{enabled}") && state.include?("wrapped=#{enabled}") }
      end
    end
  end
end
