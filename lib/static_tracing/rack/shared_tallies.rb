# frozen_string_literal: true

require "digest"
require "json"

module StaticTracing
  module Rack
    # The tallies of the rings of a server's workers, kept where every
    # worker sees them: a file beside the workers' state files, named after
    # their master, read and written under `flock` by whichever worker
    # answers a scrape. So each scrape goes on from the last one, whichever
    # worker answered it: the counters are the same whichever answers, and
    # never lower within a worker's life; a worker that replaces a killed
    # one starts nothing again.
    #
    # The file holds each worker's pid, start time and tally
    # (TraceReader::Tally#state); one that cannot be read (a master that
    # restarted under the same pid, bytes that are not one) is started
    # afresh, and said once. It is 0600 in the workers' private stub
    # directory, written whole to a file of its own and renamed over it.
    class SharedTallies
      # How long a scrape waits for another worker's scrape to finish.
      LOCK_WAIT = 5.0
      FORMAT = 3

      # A worker's ring (its path) as tallied. +gone_since+: when it was
      # first found gone; +finished_at+: when its ring was read to its end
      # (monotonic seconds, the same in every process).
      Worker = Struct.new(:start_time, :ring, :ring_tally, :gone_since, :finished_at)

      # Timed out waiting for another worker.
      class Busy < StandardError; end

      attr_reader :path

      # +master_pid+ as this process sees it, in its pid namespace
      # +namespace+ (the inode of /proc/PID/ns/pid, as state files name it:
      # containers that share a stub directory may each have a pid 1).
      # +image+: the auxiliary vector the workers' exec left them (which
      # fork copies): programs a supervisor started each with an exec of
      # their own are not workers of one master, and share no file.
      def initialize(dir, master_pid, master_start, namespace, image:)
        @path = File.join(dir, "metrics-#{master_pid}-#{namespace}-#{Digest::SHA256.hexdigest(image)[0, 16]}.tally")
        @master_start = master_start
      end

      # Yields the workers' tallies (pid => Worker) as the last scrape left
      # them, and stores them as the block leaves them; returns what it
      # returns. Raises Busy past LOCK_WAIT.
      def update
        File.open("#{@path}.lock", File::RDWR | File::CREAT | File::NOFOLLOW, 0o600) do |lock|
          take(lock)
          workers = load
          result = yield workers
          store(workers)
          result
        end
      end

      private

      def take(lock)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + LOCK_WAIT
        until lock.flock(File::LOCK_EX | File::LOCK_NB)
          if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
            raise Busy, "another worker held #{lock.path} for over #{LOCK_WAIT}s"
          end

          sleep 0.005
        end
      end

      def load
        text = File.open(@path, File::RDONLY | File::NOFOLLOW, &:read)
        parse(JSON.parse(text))
      rescue Errno::ENOENT
        {}
      rescue JSON::ParserError, KeyError, TypeError, ArgumentError, StaticTracing::Error => e
        StaticTracing.warn_once([:shared_tallies, @path],
                                "static_tracing: metrics: #{@path} holds no tallies this version reads " \
                                "(#{e.message}): counting starts again")
        {}
      end

      def parse(saved)
        return {} unless saved.fetch("format") == FORMAT && saved.fetch("master_start") == @master_start

        saved.fetch("workers").to_h do |entry|
          state = entry.fetch("tally")
          tally = state && StaticTracing.trace_reader::Tally.from_state(state.unpack1("m0"))
          [Integer(entry.fetch("pid")),
           Worker.new(entry.fetch("start_time"), entry["ring"], tally, entry["gone_since"], entry["finished_at"])]
        end
      end

      def entry(pid, worker)
        { "pid" => pid, "start_time" => worker.start_time, "ring" => worker.ring, "gone_since" => worker.gone_since,
          "finished_at" => worker.finished_at, "tally" => worker.ring_tally && [worker.ring_tally.state].pack("m0") }
      end

      def store(workers)
        saved = { "format" => FORMAT, "master_start" => @master_start,
                  "workers" => workers.map { |pid, worker| entry(pid, worker) } }
        temporary = "#{@path}.#{Process.pid}"
        File.open(temporary, File::WRONLY | File::CREAT | File::TRUNC | File::NOFOLLOW, 0o600) do |file|
          file.write(JSON.generate(saved))
        end
        File.rename(temporary, @path)
      end
    end
  end
end
