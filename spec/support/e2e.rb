# frozen_string_literal: true

require "fileutils"
require "open3"
require "timeout"
require "rbconfig"
require "socket"
require "tmpdir"

# Drives real processes for end-to-end examples: a Ruby child that uses the
# gem, and bpftrace attached to it. Every wait is bounded and synchronized
# on output, never on a bare sleep; every process started is killed after
# the example.
module E2E
  ROOT = File.expand_path("../..", __dir__)
  LIB = File.join(ROOT, "lib")
  DEFAULT_TIMEOUT = 20

  class << self
    # Why tracing cannot run here, or nil when it can.
    def unavailable_reason
      return @unavailable_reason if defined?(@unavailable_reason)

      @unavailable_reason =
        if !RUBY_PLATFORM.include?("linux") then "end-to-end tracing needs Linux"
        elsif !StaticTracing.supported? then "USDT probes are not supported on #{RUBY_PLATFORM}"
        elsif Process.euid != 0 then "bpftrace needs root (running as uid #{Process.euid})"
        elsif !bpftrace then "bpftrace is not installed"
        else
          probe_bpftrace
        end
    end

    # The executable +name+ on PATH, or nil.
    def which(name)
      ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).map { |dir| File.join(dir, name) }
         .find { |path| File.file?(path) && File.executable?(path) }
    end

    def bpftrace
      ENV.fetch("BPFTRACE") { %w[/usr/bin/bpftrace /usr/local/bin/bpftrace].find { |path| File.executable?(path) } }
    end

    def required?
      ENV["STATIC_TRACING_REQUIRE_E2E"] == "1"
    end

    # Why this run does without +component+ although end-to-end examples
    # are required, or nil: STATIC_TRACING_E2E_EXCUSED="unicorn: why; ..."
    # (set by bin/matrix for what a Ruby of the matrix lacks).
    def excuse(component)
      ENV.fetch("STATIC_TRACING_E2E_EXCUSED", "").split(";").filter_map do |entry|
        name, why = entry.split(":", 2).map(&:strip)
        why if name == component.to_s
      end.first
    end

    # A copy of the gem's lib/, exe/ and examples/ that any user can read,
    # outside /tmp: for children that run as another user, or with a /tmp
    # of their own, wherever the checkout is and whatever its mode (a fresh
    # clone in a 0700 directory under /tmp, say). Made once a run.
    def portable_root
      @portable_root ||= begin
        root = Dir.mktmpdir("static_tracing-spec", File.directory?("/var/tmp") ? "/var/tmp" : nil)
        FileUtils.cp_r(%w[lib exe examples].map { |dir| File.join(ROOT, dir) }, root)
        FileUtils.chmod_R("a+rX", root)
        creator = Process.pid
        at_exit { FileUtils.rm_rf(root) if Process.pid == creator }
        root
      end
    end

    # A TCP port on the loopback nobody listens on now.
    def free_port
      server = TCPServer.new("127.0.0.1", 0)
      server.addr[1]
    ensure
      server&.close
    end

    private

    def probe_bpftrace
      out, status = Open3.capture2e(bpftrace, "-e", 'BEGIN { printf("ok\n"); exit(); }')
      "bpftrace cannot run here: #{out.lines.last(3).join.strip}" unless status.success? && out.include?("ok")
    rescue SystemCallError => e
      "bpftrace cannot run here: #{e.message}"
    end
  end

  # A child process whose stdout and stderr are read line by line.
  class Child
    attr_reader :pid, :output

    # +chdir+: the directory it starts in (a child running as another user
    # may not be allowed into this one).
    def initialize(*command, env: {}, chdir: nil)
      @stdin, @stdout, @thread = Open3.popen2e(env, *command, pgroup: true, **{ chdir: }.compact)
      @pid = @thread.pid
      @output = +""
      @lock = Mutex.new
      @reader = Thread.new do
        @stdout.each_line { |line| @lock.synchronize { @output << line } }
      rescue IOError
        nil
      end
    end

    # Waits until the output matches +pattern+; returns the MatchData.
    def wait_for(pattern, timeout: DEFAULT_TIMEOUT, from: 0)
      deadline = monotonic + timeout
      loop do
        match = @lock.synchronize { @output[from..]&.match(pattern) }
        return match if match
        raise "#{name} exited (#{@thread.value.inspect}) before printing #{pattern.inspect}:\n#{output}" unless alive?
        if monotonic > deadline
          raise "timed out after #{timeout}s waiting for #{pattern.inspect} from #{name}:\n#{output}"
        end

        sleep 0.01
      end
    end

    def puts(line)
      @stdin.puts(line)
      @stdin.flush
    end

    def alive?
      @thread.alive?
    end

    # Sends +signal+ and waits for the process to exit; returns its status.
    def stop(signal = "TERM", timeout: 10)
      Process.kill(signal, -@pid) if alive?
      wait(timeout:)
    rescue Errno::ESRCH
      wait(timeout:)
    end

    def wait(timeout: DEFAULT_TIMEOUT)
      unless @thread.join(timeout)
        Process.kill("KILL", -@pid)
        @thread.join(5)
        raise "#{name} did not exit within #{timeout}s:\n#{output}"
      end
      @reader.join(5)
      @thread.value
    end

    def kill
      Process.kill("KILL", -@pid) if alive?
      @thread.join(5)
    rescue Errno::ESRCH
      nil
    end

    def name
      "process #{@pid}"
    end

    private

    def monotonic
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end

  # bpftrace attached to a process: started with a BEGIN probe that prints a
  # marker, which it only reaches once every probe is attached.
  class Bpftrace < Child
    READY = "STATIC_TRACING_E2E_READY"
    # What bpftrace prints as it attaches its probes: "Attaching 4
    # probes..." (0.17, before attaching), "Attached 4 probes" (0.27, after).
    ATTACHED = /^Attach(?:ing|ed) (\d+) probes?\b/
    # The longest string str() reads, NUL included: bpftrace 0.17 takes it
    # from BPFTRACE_STRLEN, later versions (0.21 on) from BPFTRACE_MAX_STRLEN.
    STRLEN = 200
    STRLEN_ENV = { "BPFTRACE_STRLEN" => STRLEN.to_s, "BPFTRACE_MAX_STRLEN" => STRLEN.to_s }.freeze

    # +bpftrace+: the command that runs it (another one, in a root).
    def initialize(pid, program, timeout: DEFAULT_TIMEOUT, bpftrace: [E2E.bpftrace])
      super(*bpftrace, "-p", pid.to_s, "-e", %(BEGIN { printf("#{READY}\\n"); } #{program}),
            env: STRLEN_ENV)
      wait_for(/^#{READY}$/, timeout:)
    end

    # Stops bpftrace with SIGINT, so it prints its maps, and returns all output.
    # bpftrace 0.17 drops the printf output still in its buffers once it is
    # interrupted (maps are safe: they are read at exit), so give +after+, a
    # pattern of the last output expected, when a spec reads printf lines.
    def finish(after: nil, timeout: 30)
      wait_for(after) if after
      Process.kill("INT", -pid) if alive?
      # Seen, rarely, on a loaded machine: a bpftrace that has not exited
      # long after SIGINT. A second one is harmless to one that is already
      # exiting; where it was, says the failure if it still does not exit.
      unless @thread.join(timeout / 2.0)
        where = kernel_state
        Process.kill("INT", -pid) if alive?
        raise "#{name} did not exit after SIGINT (#{where}), nor #{timeout / 2}s after a second one" unless
          @thread.join(timeout / 2.0)
      end
      wait
      output
    rescue Errno::ESRCH
      wait
      output
    end

    # What the kernel says bpftrace is doing: its state, wait channel and
    # kernel stack, as far as they can be read.
    def kernel_state
      %w[wchan stack].map { |file| "#{file}: #{File.read("/proc/#{pid}/#{file}").strip.tr("\n", " ")}" }
                     .unshift(File.read("/proc/#{pid}/status")[/^State:.*$/].to_s).join("; ")
    rescue SystemCallError => e
      "unknown: #{e.message}"
    end

    def name
      "bpftrace (pid #{pid})"
    end
  end

  # A Ruby child that evaluates the expressions it is sent, one at a time,
  # and answers with their values (Marshal, or #inspect when that fails).
  class Repl < Child
    SERVER = <<~'RUBY'
      $stdout.sync = true
      repl_binding = binding
      puts "REPL_READY #{Process.pid}"
      while (line = $stdin.gets)
        id, code = line.chomp.split(" ", 2)
        begin
          value = repl_binding.eval(code.unpack1("m0"))
          payload = begin
            ["value", Marshal.dump(value)]
          rescue TypeError
            ["inspect", value.inspect]
          end
        rescue Exception => e # rubocop:disable Lint/RescueException
          payload = ["error", Marshal.dump([e.class.name, e.message])]
        end
        puts "#{id} #{payload[0]} #{[payload[1]].pack("m0")}"
      end
    RUBY

    # +ruby+: the Ruby it runs, and how it finds the gem (this checkout's lib/);
    # +prefix+: a command it runs under (unshare, say), which execs it.
    def initialize(setup, env: {}, ruby: [RbConfig.ruby, "-I", LIB], prefix: [])
      super(*prefix, *ruby, "-r", "static_tracing", "-e", "#{setup}\n#{SERVER}", env:)
      wait_for(/^REPL_READY \d+$/)
      @next_id = 0
    end

    # Evaluates +code+ in the child; returns its value, or raises RemoteError.
    def evaluate(code, timeout: DEFAULT_TIMEOUT)
      id = "r#{@next_id += 1}"
      mark = output.size
      puts("#{id} #{[code].pack("m0")}")
      kind, payload = wait_for(/^#{id} (\w+) (\S*)$/, timeout:, from: mark).captures
      data = payload.unpack1("m0")
      case kind
      when "value" then Marshal.load(data) # rubocop:disable Security/MarshalLoad
      when "inspect" then data
      else raise RemoteError, Marshal.load(data).join(": ") # rubocop:disable Security/MarshalLoad
      end
    end

    def name
      "ruby child #{pid}"
    end
  end

  class RemoteError < StandardError; end

  # Helpers for examples tagged :e2e.
  module Helpers
    # Skips the example when tracing cannot run here, or fails it when
    # STATIC_TRACING_REQUIRE_E2E=1 says it must.
    def require_tracing!
      reason = E2E.unavailable_reason or return
      cannot_run!(reason)
    end

    # Skips the example for +reason+, or fails it when
    # STATIC_TRACING_REQUIRE_E2E=1 says it must run and the run does not
    # excuse the +component+ that is missing (E2E.excuse).
    def cannot_run!(reason, component: nil)
      excuse = component && E2E.excuse(component)
      if E2E.required? && !excuse
        raise "end-to-end examples are required (STATIC_TRACING_REQUIRE_E2E=1) but cannot run: #{reason}"
      end

      skip(excuse ? "#{reason} (excused in this run: #{excuse})" : reason)
    end

    def started_processes
      @started_processes ||= []
    end

    # A Ruby child running +script+ with the gem from this checkout.
    def ruby_process(script, env: {})
      Child.new(RbConfig.ruby, "-I", LIB, "-r", "static_tracing", "-e", script, env:)
           .tap { |child| started_processes << child }
    end

    # A Ruby child that ran +setup+ and now evaluates what it is sent.
    def ruby_repl(setup = "", env: {}, prefix: [])
      Repl.new(setup, env:, prefix:).tap { |child| started_processes << child }
    end

    # Waits until the block returns a truthy value, re-evaluating it; returns that value.
    def eventually(what, timeout: DEFAULT_TIMEOUT, interval: 0.02)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      loop do
        value = yield
        return value if value
        if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          raise "timed out after #{timeout}s waiting until #{what}"
        end

        sleep interval
      end
    end

    # Skips (or fails, when end-to-end runs are required) without +command+.
    def require_command!(command)
      return if E2E.which(command)
      raise "#{command} is required for end-to-end examples but is not installed" if E2E.required?

      skip("#{command} is not installed")
    end

    def attach_bpftrace(pid, program, **options)
      Bpftrace.new(pid, program, **options).tap { |child| started_processes << child }
    end

    # `bpftrace -l PATTERN -p PID`, as a list of lines.
    def bpftrace_list(pid, pattern = "usdt:*")
      out, = Open3.capture2e(E2E.bpftrace, "-l", pattern, "-p", pid.to_s)
      out.lines.map(&:strip).grep(/^usdt:/)
    end

    # Waits until `bpftrace -l PATTERN -p PID` lists +count+ probes: a probe
    # declared into a loaded provider is attachable within attach_delay,
    # not at once. Returns the lines.
    def wait_until_listed(pid, pattern, count: 1)
      eventually("#{count} probe(s) #{pattern} are listed in process #{pid}") do
        listed = bpftrace_list(pid, pattern)
        listed if listed.size == count
      end
    end

    def stop_started_processes
      started_processes.reverse_each(&:kill)
    end
  end
end
