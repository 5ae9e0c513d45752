# frozen_string_literal: true

require_relative "../process_start"
require_relative "../ring_locator"
require_relative "../trace_reader_library"
require_relative "shared_tallies"

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
    #
    # A scraper that asks for OpenMetrics (Prometheus does) gets it, with
    # an exemplar on each latency bucket: the trace id of the latest call
    # in it made in a trace context (StaticTracing.with_trace_context, or a
    # request's `traceparent` through StaticTracing::RackMiddleware).
    #
    # The workers share their tallies (SharedTallies): each scrape goes on
    # from the last, whichever worker answered it. A worker that exits is
    # read to its end by a worker that holds its ring open (each keeps
    # open the rings it read), and its series stay at those counts for
    # +keep_exited+ seconds, so that every Prometheus scraping the server
    # (an HA pair) sees them, then go.
    class Metrics
      # How long a worker that exited keeps its series, waiting for a
      # worker that holds its ring open to answer a scrape and read it to
      # its end, before it goes as it was.
      GONE_WAIT = 30.0

      # The tallies of a process without a master: its own, in memory.
      class LocalTallies
        def initialize
          @workers = {}
        end

        def update
          yield @workers
        end
      end

      def initialize(proc_dir: "/proc", keep_exited: 60.0)
        @proc = proc_dir
        @keep_exited = keep_exited
        @lock = Mutex.new
        @ring_files = {}
        @tallies = nil
      end

      def call(env)
        method = env["REQUEST_METHOD"]
        unless %w[GET HEAD].include?(method)
          return [405, { "content-type" => "text/plain", "allow" => "GET, HEAD" }, ["only GET and HEAD\n"]]
        end

        type, body = @lock.synchronize { metrics(env["HTTP_ACCEPT"]) }
        [200, { "content-type" => type, "content-length" => body.bytesize.to_s },
         method == "HEAD" ? [] : [body]]
      rescue SharedTallies::Busy => e
        [503, { "content-type" => "text/plain", "retry-after" => "1" }, ["#{e.message}\n"]]
      end

      # [content type, text]: the metrics of every worker's ring, read on
      # from the last scrape, in the format the +accept+ header (a String,
      # or nil) asks for.
      def metrics(accept = nil)
        running = running_workers
        tallies.update do |workers|
          workers.select! { |pid, worker| running[pid] == worker.start_time || last_read(pid, worker) }
          running.each { |pid, start_time| scrape(workers, pid, start_time) }
          close_gone(workers)
          tallies = workers.sort.filter_map { |pid, worker| [pid, worker.ring_tally] if worker.ring_tally }
          reader::Tally.exposition(tallies, accept)
        end
      end

      # pid => start time of each worker running now.
      def running_workers
        return {} unless State.path

        worker_pids.to_h { |pid| [pid, start_time(pid)] }.compact
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

      # The tallies this process goes on from: its master's workers'
      # shared ones (those forked from the same exec: see same_image?, so
      # that a program a supervisor started beside it shares none with
      # it), or its own.
      def tallies
        @tallies ||= if State.path && same_program?(::Process.ppid)
                       SharedTallies.new(File.dirname(State.path), ::Process.ppid, start_time(::Process.ppid),
                                         File.stat(File.join(@proc, "self", "ns", "pid")).ino, image: own_image)
                     else
                       LocalTallies.new
                     end
      end

      # Reads the ring of worker +pid+ on, if it records; a worker that
      # cannot be read now is said once and passed over. Its ring is kept
      # open for its last read.
      def scrape(workers, pid, start_time)
        state, published = published_state(pid)
        ring = RingLocator.ring(published) or return
        return unless state.start_time == start_time

        worker = worker_of(workers, pid, start_time, ring)
        RingLocator.open(state, published) do |file|
          keep(pid, start_time, file)
          worker.ring_tally ||= reader::Tally.new(ring)
          worker.ring_tally.scrape(file.fileno)
        end
      rescue StandardError => e
        StaticTracing.warn_once([:rack_metrics, pid, e.message],
                                "static_tracing: metrics: cannot read the ring of process #{pid}: #{e.message}")
      end

      # The tally of worker +pid+, whose ring is +ring+ now (a tally goes
      # on across the rings a process replaces its own with).
      def worker_of(workers, pid, start_time, ring)
        worker = workers[pid]
        return worker.tap { worker.ring = ring } if worker&.start_time == start_time

        workers[pid] = SharedTallies::Worker.new(start_time, ring, nil, nil, nil)
      end

      # A worker that is gone: true while its series stay. Read to its end
      # through its ring kept open here, or its ring file if it is still
      # there (a worker SIGKILLed leaves it), then kept so for keep_exited;
      # until then kept as it was for GONE_WAIT, for a worker that holds
      # it open.
      def last_read(pid, worker)
        now = ::Process.clock_gettime(::Process::CLOCK_MONOTONIC)
        return now - worker.finished_at < @keep_exited if worker.finished_at
        return false if worker.ring_tally.nil?

        kept = @ring_files[pid]
        return finish(pid, worker, kept[1]) if kept && kept[0] == worker.start_time
        return true if left_behind(worker) { |file| finish(pid, worker, file) }

        worker.gone_since ||= now
        now - worker.gone_since < GONE_WAIT
      end

      # Yields the ring file a worker left behind, opened as rings are
      # (this user's, private, in a private directory); nil if it is gone.
      def left_behind(worker, &)
        path = worker.ring or return
        CLI::PrivateFile.open_checked(File.dirname(path), File.basename(path),
                                      owner: ::Process.euid, described: "this worker's uid",
                                      limit: RingLocator::MAX_RING_FILE, &)
      rescue CLI::PrivateFile::Untrusted, SystemCallError
        nil
      end

      # True: its series stay (at the counts it could read).
      def finish(pid, worker, file)
        worker.ring_tally.finish(file.fileno)
        true
      rescue StandardError => e
        StaticTracing.warn_once([:rack_metrics_end, pid],
                                "static_tracing: metrics: cannot read the ring of process #{pid} to its end: " \
                                "#{e.message}")
        true
      ensure
        worker.finished_at = ::Process.clock_gettime(::Process::CLOCK_MONOTONIC)
      end

      # A duplicate of the descriptor of worker +pid+'s ring, kept.
      def keep(pid, start_time, file)
        kept = @ring_files[pid]
        return if kept && kept[0] == start_time && File.identical?(kept[1], file)

        kept&.last&.close
        @ring_files[pid] = [start_time, file.dup]
      end

      # Rings of workers no longer tallied are let go of.
      def close_gone(workers)
        @ring_files.delete_if do |pid, (start_time, file)|
          next false if workers[pid]&.start_time == start_time && !workers[pid].finished_at

          file.close
          true
        end
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
        File.binread(File.join(@proc, pid.to_s, "auxv")) == own_image
      rescue SystemCallError
        false
      end

      def own_image
        @own_image ||= File.binread(File.join(@proc, "self", "auxv"))
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
