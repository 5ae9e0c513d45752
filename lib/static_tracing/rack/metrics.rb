# frozen_string_literal: true

require "json"
require_relative "../process_start"
require_relative "../ring_directories"

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
    # user; a process whose parent runs another program (a server without
    # workers) serves its own ring only. Each worker's ring is found by
    # the worker's own state file, next to this process's, which must be
    # that process's (its pid and start time), in a directory this
    # process's rings may be in too (RingDirectories). Rings are
    # read only: nothing is asked of a worker, nothing starts recording,
    # and the rings' reader (a native library of its own) is loaded at the
    # first scrape, not before. A scrape reads with the GVL released.
    class Metrics
      CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
      # Far more than the gem writes (a few hundred bytes).
      MAX_STATE = 64 * 1024
      OPEN_FLAGS = File::RDONLY | File::NOFOLLOW | File::NONBLOCK

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
        dir, namespace = published_dir
        running = dir ? worker_pids.to_h { |pid| [pid, start_time(pid)] }.compact : {}
        @workers.select! { |pid, worker| running[pid] == worker.start_time }
        running.each do |pid, start_time|
          scrape(pid, start_time, dir, namespace)
        end
        tallies = @workers.sort.filter_map { |pid, worker| [pid, worker.ring_tally] if worker.ring_tally }
        reader::Tally.exposition(tallies)
      end

      # This process's pid and those of the other workers of its master.
      def worker_pids
        own = ::Process.pid
        parent = ::Process.ppid
        return [own] unless same_program?(parent)

        ([own] + children(parent)).uniq.select { |pid| pid == own || same_program?(pid) }
      end

      private

      # The native reader of rings, loaded at the first scrape.
      def reader
        @reader ||= begin
          require_relative "../cli/trace_reader"
          StaticTracing::TraceReader
        end
      end

      # The directory this process publishes its state in, and its pid
      # namespace as the state file's name says: its siblings publish
      # theirs there too, named alike.
      def published_dir
        path = State.path or return
        match = /\A\d+-(\d+)\.state\z/.match(File.basename(path)) or return
        [File.dirname(path), match[1]]
      end

      def scrape(pid, start_time, dir, namespace)
        ring = ring_of(pid, start_time, dir, namespace) or return
        worker = (@workers[pid] ||= Worker.new(start_time, nil))
        File.open(ring, OPEN_FLAGS) do |file|
          check_owned(file)
          worker.ring_tally ||= reader::Tally.new(ring)
          worker.ring_tally.scrape(file.fileno)
        end
      rescue StandardError => e
        StaticTracing.warn_once([:rack_metrics, pid, e.message],
                                "static_tracing: metrics: cannot read the ring of process #{pid}: #{e.message}")
      end

      # The ring process +pid+ records into, if its state file (that
      # process's own) says it records.
      def ring_of(pid, start_time, dir, namespace)
        name = "#{pid}-#{namespace}"
        state = read_state(File.join(dir, "#{name}.state")) or return
        return unless state["pid"] == pid && state["start_time"] == start_time

        ring = state.dig("recorder", "ring")
        ring if RingDirectories.holds?(ring_dirs(dir), ring, "#{name}.ring")
      end

      # Where the workers keep their rings: where this process would (they
      # share its environment), as RingDirectories says.
      def ring_dirs(dir)
        named = ENV.fetch(RingDirectories::SETTING, "")
        named = File.join(Dir.pwd, named) unless named.empty? || named.start_with?("/")
        RingDirectories.of(named:, state_dir: dir, uid: ::Process.euid)
      end

      def read_state(path)
        text = File.open(path, OPEN_FLAGS) do |file|
          check_owned(file)
          file.read(MAX_STATE + 1)
        end
        return if text.nil? || text.bytesize > MAX_STATE

        state = JSON.parse(text)
        state if state.is_a?(Hash)
      rescue SystemCallError, IOError, JSON::ParserError
        nil
      end

      # Only a regular file of this process's user, private to it: what the
      # gem writes.
      def check_owned(file)
        stat = file.stat
        return if stat.file? && stat.uid == ::Process.euid && (stat.mode & 0o077).zero?

        raise IOError, "it is not a private regular file of uid #{::Process.euid}"
      end

      def start_time(pid)
        ProcessStart.parse(File.read(File.join(@proc, pid.to_s, "stat")))
      rescue SystemCallError
        nil
      end

      # Whether +pid+ runs as this process's user, the program this process runs.
      def same_program?(pid)
        dir = File.join(@proc, pid.to_s)
        File.stat(dir).uid == ::Process.euid &&
          File.readlink(File.join(dir, "exe")) == File.readlink(File.join(@proc, "self", "exe"))
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
