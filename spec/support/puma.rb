# frozen_string_literal: true

require "fileutils"
require "open3"
require "tmpdir"
require "rbconfig"
require_relative "web_server"

module E2E
  # The example app (examples/puma) under a real puma master in cluster
  # mode (examples/puma/puma.rb: preload_app!, 4 threads a worker), on a
  # free loopback port. Workers are found by the lines the master logs as
  # each one boots; a restart waits for the next generation's lines.
  class Puma < Child
    include WebServer

    APP = File.join(ROOT, "examples", "puma")
    THREAD_DUMP = File.expand_path("preload/thread_dump.rb", __dir__)
    # What THREAD_DUMP traps: one puma does not (puma 6+ prints its own
    # thread dump on SIGPWR, replacing a trap set before it), ignored by
    # default should the trap be missing.
    DUMP_SIGNAL = "URG"
    # puma's default, which examples/puma/puma.rb keeps: how long the master
    # lets a worker shut down before it kills it.
    WORKER_SHUTDOWN_TIMEOUT = 30
    CONFIG = File.join(APP, "puma.rb")

    class << self
      # puma's script on PATH, or nil.
      def executable
        E2E.which("puma")
      end

      # Why puma cannot serve the app under this Ruby, or nil. Debian builds
      # puma's C extension for its default Ruby only.
      def unavailable_reason
        return @unavailable_reason if defined?(@unavailable_reason)

        @unavailable_reason =
          if executable.nil? then "puma is not installed"
          else
            out, status = Open3.capture2e(RbConfig.ruby, "-e", 'require "puma"; require "puma/puma_http11"')
            "puma cannot be loaded by Ruby #{RUBY_VERSION}: #{out.lines.first&.strip}" unless status.success?
          end
      end
    end

    # PIDs of the workers now serving, by worker index.
    attr_reader :worker_pids

    # puma's script is run by this Ruby, whatever Ruby its #! line names,
    # since the extension in LIB is built for this one; a hot restart
    # re-executes the same command line, in the same process. +rackup+:
    # another app to serve with the example's puma configuration.
    def initialize(workers: 2, env: {}, rackup: File.join(APP, "config.ru"))
      @port = E2E.free_port
      @workers = workers
      @dumps = Dir.mktmpdir("static_tracing-puma-dumps")
      @ruby_dumps = {}
      puma_env = {
        "PUMA_LISTEN" => "127.0.0.1:#{@port}", "PUMA_WORKERS" => workers.to_s,
        "STATIC_TRACING_SPEC_DUMPS" => @dumps, "STATIC_TRACING_SPEC_DUMP_SIGNAL" => DUMP_SIGNAL,
        "RUBYOPT" => "-r#{THREAD_DUMP} #{ENV.fetch("RUBYOPT", "")}".strip
      }
      super(RbConfig.ruby, Puma.executable, "-I", LIB, "-C", CONFIG, rackup, env: env.merge(puma_env))
      @worker_pids = booted_workers(from: 0)
    end

    # Sends +signal+ (USR1, USR2) to the master and waits until a whole new
    # generation of workers has booted. Returns what the master logged since.
    # An old worker still there after +stuck_after+ seconds is looked into
    # then, while it lives; the diagnosis is shown if the restart fails. The
    # restart must be done +timeout+ seconds after the signal, or, if every
    # stuck worker is in Ruby's IO#close bug (#stuck_in_ruby_close_bug?),
    # once puma has killed them too: that is said on stderr.
    def restart(signal, timeout: 30, stuck_after: 10)
      mark = output.size
      old_workers = @worker_pids
      Process.kill(signal, pid)
      deadline = monotonic + timeout
      stuck = still_running(old_workers, after: stuck_after)
      diagnosis = "#{stuck_after} s after SIG#{signal}:\n#{threads_of(stuck)}" unless stuck.empty?
      if !stuck.empty? && stuck.all? { |worker| stuck_in_ruby_close_bug?(@ruby_dumps[worker]) }
        warn "puma workers #{stuck.join(", ")}: stuck in IO#close by a Ruby bug (ruby/ruby#13684); " \
             "waiting for puma to kill them (worker_shutdown_timeout)"
        deadline += WORKER_SHUTDOWN_TIMEOUT
      end
      begin
        @worker_pids = booted_workers(from: mark, timeout: [deadline - monotonic, 1].max)
      rescue RuntimeError => e
        raise e, "#{e.message}\n#{diagnosis || threads_of(old_workers)}"
      end
      output[mark..]
    end

    def name
      "puma master #{pid}"
    end

    def kill
      super
      FileUtils.rm_rf(@dumps)
    end

    private

    # Those of +pids+ still running +after+ seconds, or as soon as none is.
    def still_running(pids, after:)
      deadline = monotonic + after
      running = -> { pids.select { |pid| File.exist?("/proc/#{pid}") } }
      sleep 0.05 until running.call.empty? || monotonic > deadline
      running.call
    end

    # What each of +pids+ is doing: thread by thread, its name, state and
    # kernel wait channel, and for a futex wait the mapping the futex lies
    # in (a lock in a library's data, or on the heap); each thread's native
    # backtrace where gdb is installed; then the Ruby backtraces the process
    # writes on DUMP_SIGNAL (spec/support/preload), or that it wrote none.
    # A restart waits for the old workers to exit.
    def threads_of(pids)
      pids.map do |worker|
        next "old worker #{worker}: gone" unless File.exist?("/proc/#{worker}")

        tasks = Dir.glob("/proc/#{worker}/task/*").filter_map { |task| describe_task(worker, task) }
        "old worker #{worker}:\n  #{tasks.join("\n  ")}\n#{native_backtraces_of(worker)}\n  #{ruby_threads_of(worker)}"
      end.join("\n")
    end

    def describe_task(pid, task)
      stat = File.read("#{task}/stat").match(/\((?<name>.*)\) (?<state>\S)/m)
      syscall = File.read("#{task}/syscall").split
      futex = syscall.first == "202" ? " on #{mapping_of(pid, Integer(syscall[1]))}" : ""
      "#{File.basename(task)} #{stat[:name].inspect} #{stat[:state]} #{File.read("#{task}/wchan")}#{futex}"
    rescue SystemCallError
      nil
    end

    # The mapping of +pid+ that holds +address+, as /proc/PID/maps says it.
    def mapping_of(pid, address)
      line = File.foreach("/proc/#{pid}/maps").find do |mapping|
        first, last = mapping.split.first.split("-").map { |bound| Integer(bound, 16) }
        (first...last).cover?(address)
      end
      mapping = line ? line.split(" ", 6).values_at(1, 5).join(" ").strip : "no mapping"
      format("futex 0x%<address>x in %<mapping>s", address:, mapping:)
    end

    # Every thread's native stack, from gdb (attached for a moment, in
    # batch mode), frames only.
    def native_backtraces_of(pid)
      gdb = E2E.which("gdb")
      return "  (no native backtraces: gdb is not installed)" unless gdb

      out, = Open3.capture2e("timeout", "--signal=KILL", "60", gdb, "--nx", "--batch", "-p", pid.to_s,
                             "-ex", "set pagination off", "-ex", "thread apply all bt 40")
      frames = out.lines.grep(/^(Thread |#\d)/).map { |line| "    #{line.strip}" }
      frames.empty? ? "  (gdb gave no backtraces: #{out.lines.last(3).join.strip})" : "  native:\n#{frames.join("\n")}"
    end

    def ruby_threads_of(pid)
      dump = File.join(@dumps, "#{pid}.threads")
      Process.kill(DUMP_SIGNAL, pid)
      deadline = monotonic + 5
      sleep 0.05 until File.exist?(dump) || monotonic > deadline
      if File.exist?(dump)
        @ruby_dumps[pid] = File.read(dump)
        return "Ruby threads (on SIG#{DUMP_SIGNAL}):\n  #{@ruby_dumps[pid]}"
      end

      "no Ruby backtraces 5 s after SIG#{DUMP_SIGNAL}: the main thread did not run the trap " \
        "(blocked holding the GVL, or not given it)"
    rescue Errno::ESRCH
      "gone before SIG#{DUMP_SIGNAL}"
    end

    # Ruby 3.3 and 3.4 (fixed upstream by ruby/ruby#13684): an IO#close
    # waits forever when a trap handler was writing to that IO as the close
    # began. puma's SIGTERM trap writes to its server's wake-up pipe, which
    # the server thread closes as it stops, and the master sends SIGTERM
    # again every 0.2 s to a worker still stopping: now and then the server
    # thread stays in that close until the master kills the worker. +dump+
    # (the worker's Ruby threads) says whether that is where it is.
    def stuck_in_ruby_close_bug?(dump)
      server = dump.to_s.split(/^(?=\S)/).find { |thread| thread.start_with?("puma srv ") }
      server.to_s.lines.fetch(1, "").match?(%r{/puma/server\.rb:\d+:in .(IO#)?close'})
    end

    # The PIDs, by index, of the workers whose boot the master logged after
    # offset +from+ of the output.
    def booted_workers(from:, timeout: DEFAULT_TIMEOUT)
      @workers.times.map do |index|
        Integer(wait_for(/- Worker #{index} \(PID: (\d+)\) booted\b/, from:, timeout:)[1])
      end
    end
  end

  module Helpers
    def start_puma(**options)
      reason = Puma.unavailable_reason
      cannot_run!(reason, component: :puma) if reason
      Puma.new(**options).tap { |puma| started_processes << puma }
    end
  end
end
