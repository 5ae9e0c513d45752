# frozen_string_literal: true

require_relative "../process_start"
require_relative "../ring_locator"
require_relative "../trace_reader_library"

module StaticTracing
  module Rack
    # A Rack app that serves Prometheus metrics of what the workers of this
    # process's server record, as `static-tracing export` does
    # (docs/fleet.md): whichever worker answers a scrape reads every
    # worker's ring, so that the counts are the whole server's, each
    # worker's series labelled with its pid.
    #
    #   # config.ru
    #   map("/metrics") { run StaticTracing::Rack::Metrics.new }
    #   run MyApp
    #
    # The workers are this process and the other children of its parent
    # (a unicorn or puma master) that run the same program as the same
    # user and were forked from the same exec of it (the same auxiliary
    # vector, which fork copies and exec makes anew): a program its parent
    # started beside it (a foreman-like supervisor's other processes) is
    # not one of them; a process whose parent runs another program (a
    # server without workers) serves its own ring only. Each worker's ring is the one its
    # own state file names, which must be that process's (its pid and
    # start time), opened as the command opens one (StaticTracing::RingLocator).
    # Rings are read only: nothing is asked of a worker, nothing starts
    # recording, and the rings' reader (a native library of its own,
    # StaticTracing.trace_reader) is loaded at the first scrape, not
    # before. A scrape reads with the GVL released.
    class Metrics
      CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

      # A worker's ring as tallied: the tally lives as long as the worker.
      Worker = Struct.new(:start_time, :ring_tally)

      def initialize(proc_dir: "/proc")
        @proc = proc_dir
        @lock = Mutex.new
        @workers = {}
      end

      def call(env)
        method = env["REQUEST_METHOD"]
        unless %w[GET HEAD].include?(method)
          return [405, { "content-type" => "text/plain", "allow" => "GET, HEAD" }, ["only GET and HEAD\n"]]
        end

        body = @lock.synchronize { metrics }
        [200, { "content-type" => CONTENT_TYPE, "content-length" => body.bytesize.to_s },
         method == "HEAD" ? [] : [body]]
      end

      # The metrics text of every worker's ring, read on from the last scrape.
      def metrics
        running = State.path ? worker_pids.to_h { |pid| [pid, start_time(pid)] }.compact : {}
        @workers.select! { |pid, worker| running[pid] == worker.start_time }
        running.each do |pid, start_time|
          scrape(pid, start_time)
        end
        tallies = @workers.sort.filter_map { |pid, worker| [pid, worker.ring_tally] if worker.ring_tally }
        reader::Tally.exposition(tallies)
      end

      # This process's pid and those of the other workers of its master.
      def worker_pids
        own = ::Process.pid
        parent = ::Process.ppid
        return [own] unless same_program?(parent)

        ([own] + children(parent)).uniq.select { |pid| pid == own || (same_program?(pid) && same_image?(pid)) }
      end

      private

      # The native reader of rings, loaded at the first scrape.
      def reader
        StaticTracing.trace_reader
      end

      # Reads the ring of worker +pid+ on, if it records; a worker that
      # cannot be read now is said once and passed over.
      def scrape(pid, start_time)
        state, published = published_state(pid)
        ring = RingLocator.ring(published) or return
        return unless state.start_time == start_time

        worker = (@workers[pid] ||= Worker.new(start_time, nil))
        RingLocator.open(state, published) do |file|
          worker.ring_tally ||= reader::Tally.new(ring)
          worker.ring_tally.scrape(file.fileno)
        end
      rescue StandardError => e
        StaticTracing.warn_once([:rack_metrics, pid, e.message],
                                "static_tracing: metrics: cannot read the ring of process #{pid}: #{e.message}")
      end

      # The state worker +pid+ publishes, if it publishes one this process
      # can trust (a worker exiting as it is read publishes none).
      def published_state(pid)
        state = CLI::ProcessState.new(pid, proc_dir: @proc)
        [state, state.read]
      rescue CLI::Error, SystemCallError
        nil
      end

      def start_time(pid)
        ProcessStart.of(File.join(@proc, pid.to_s))
      end

      # Whether +pid+ runs as this process's user, the program this process runs.
      def same_program?(pid)
        dir = File.join(@proc, pid.to_s)
        File.stat(dir).uid == ::Process.euid &&
          File.readlink(File.join(dir, "exe")) == File.readlink(File.join(@proc, "self", "exe"))
      rescue SystemCallError
        false
      end

      # Whether +pid+ was forked from the process this one was forked from,
      # and never exec'd since: the auxiliary vector the kernel gave the
      # program at exec (where its stack, its random bytes and its file name
      # were put, different at each exec) is copied at fork, so a master's
      # workers all have the master's, and a program a supervisor started
      # beside this one (another exec) has its own.
      def same_image?(pid)
        @own_image ||= File.binread(File.join(@proc, "self", "auxv"))
        File.binread(File.join(@proc, pid.to_s, "auxv")) == @own_image
      rescue SystemCallError
        false
      end

      # The children of +parent+: those /proc lists for its threads, else
      # (a kernel without that list) those whose stat names it.
      def children(parent)
        lists = Dir.glob(File.join(@proc, parent.to_s, "task", "*", "children"))
        return lists.flat_map { |list| File.read(list).split.map(&:to_i) } unless lists.empty?

        Dir.children(@proc).grep(/\A\d+\z/).select { |pid| parent_of(pid) == parent }.map(&:to_i)
      rescue SystemCallError
        []
      end

      def parent_of(pid)
        File.read(File.join(@proc, pid, "stat")).rpartition(")").last.split[1].to_i
      rescue SystemCallError
        nil
      end
    end
  end
end
