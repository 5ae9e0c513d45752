# frozen_string_literal: true

require_relative "../ring_locator"
require_relative "metrics_server"
require_relative "process_state"
require_relative "trace_file"

module StaticTracing
  module CLI
    # `static-tracing export --listen HOST:PORT [PID...]`: serves Prometheus
    # metrics of the recordings of processes, read from their rings at each
    # scrape (see docs/fleet.md). Nothing is asked of the processes: their
    # rings are read and never written (TraceReader::Tally), so that any
    # number of exports, `dump`s and a `record` can read one ring at once.
    class Export < Command
      command "export",
              arguments: "--listen HOST:PORT [PID...]",
              summary: "Serve Prometheus metrics of what processes record, read from their rings",
              description: <<~TEXT.chomp
                Serves http://HOST:PORT/metrics in the Prometheus text format: per probe a counter of
                its calls and, for a latency probe, a histogram of their durations in seconds (the
                power-of-two buckets of static-tracing report), and counters of the records lost, each
                series labelled with the process's pid. Each scrape reads the processes' rings from
                where the last one stopped; the processes are asked for nothing. Give the PIDs of
                processes that record (static-tracing record PID --flight, or STATIC_TRACING_RECORD);
                with none, every process of your user that records (of any user, as root), found
                again at each scrape. HOST may be empty (:9394) for every interface. Ends at Ctrl-C
                or SIGTERM.
              TEXT

      # How long the series of a process that exited stay, at their last counts.
      DEFAULT_KEEP_EXITED = 60.0
      ADDRESS = /\A(?:\[(?<host>[^\]]+)\]|(?<host>[^:\[\]]*)):(?<port>\d{1,5})\z/

      private

      def define_options(parser)
        @listen = nil
        parser.on("--listen HOST:PORT", "Where to serve /metrics (127.0.0.1:9394, [::1]:9394, :9394)") do |address|
          @listen = address
        end
        @keep_exited = DEFAULT_KEEP_EXITED
        parser.on("--keep-exited SECONDS", "How long a process that exited keeps its series, at its last counts " \
                                           "(default #{DEFAULT_KEEP_EXITED.to_i})") do |seconds|
          @keep_exited = Float(seconds, exception: false)
          raise UsageError, "--keep-exited takes seconds from 0, got #{seconds.inspect}" unless @keep_exited&.>=(0)
        end
      end

      def execute(args)
        host, port = listen_address
        pids = pids(args)
        processes = nil
        server = MetricsServer.new(host, port) { |accept| processes.metrics(accept) }
        processes = Processes.new(pids, err:, keep_exited: @keep_exited)
        server.run do
          err.puts("Serving metrics of #{processes.described} at http://#{server.address}/metrics (Ctrl-C to stop)")
          err.flush
        end
        0
      ensure
        server&.close
      end

      def listen_address
        raise UsageError, "missing --listen HOST:PORT: where to serve /metrics" unless @listen

        match = ADDRESS.match(@listen)
        port = match && Integer(match[:port], 10)
        raise UsageError, "--listen takes HOST:PORT (a port from 0 to 65535), got #{@listen.inspect}" unless
          port && port <= 65_535

        host = match[:host]
        [host.empty? ? nil : host, port]
      end

      def pids(args)
        args.map do |pid|
          raise UsageError, "PID must be a positive integer, got #{pid.inspect}" unless pid.match?(/\A[1-9]\d*\z/)

          pid.to_i
        end.uniq
      end

      # The processes whose rings are read: those named, or every one of
      # this user (any, as root) that records, found at each scrape. A
      # process that exits is dropped with its series; one that stops
      # recording keeps its counters as they were.
      class Processes
        PROC = "/proc"

        def initialize(pids, err:, keep_exited: DEFAULT_KEEP_EXITED)
          @err = err
          @keep_exited = keep_exited
          @named = !pids.empty?
          @watched = {}
          # A named process is checked now, in one line: it records, and its
          # ring can be read.
          pids.each { |pid| @watched[pid] = Watched.named(pid).tap { |process| process.scrape(strict: true) } }
          discover unless @named
        end

        def described
          return "#{@watched.size == 1 ? "process" : "processes"} #{@watched.keys.join(", ")}" if @named

          ::Process.euid.zero? ? "every process that records" : "every process of uid #{::Process.euid} that records"
        end

        # [content type, text] of a scrape: every ring read on from where it
        # was, in the format the +accept+ header (a String, or nil) asks for.
        def metrics(accept = nil)
          @named ? drop_exited : discover
          tallies = @watched.filter_map do |pid, process|
            problem = process.scrape
            warn_once(process, problem)
            [pid, process.tally] if process.tally
          end
          TraceFile.reader::Tally.exposition(tallies, accept)
        end

        private

        # A process that exited is read to its end, through the ring it
        # kept open (SIGKILLed or gone, unlinked or not), and its final
        # counts served by this scrape; its series go at the next one.
        def drop_exited
          @watched.select! { |_pid, process| process.alive? || last_read(process) }
        end

        # Every process this user may read (any, as root), kept from one
        # scrape to the next while it runs: whether it records is asked
        # again at each scrape, its environment (where its state file is)
        # is read once. One that exited is read to its end first.
        def discover
          running = candidates
          @watched.select! { |pid, process| running[pid] == process.start_time || last_read(process) }
          running.each { |pid, start_time| @watched[pid] ||= Watched.found(pid, start_time) }
        end

        # True while its series stay: read to its end the first time, then
        # served so for @keep_exited seconds, so that every Prometheus
        # scraping it (an HA pair) sees its last counts; false for a
        # process with no series.
        def last_read(process)
          unless process.tally && (!process.finished? || CLI.monotonic - process.finished_at < @keep_exited)
            process.close
            return false
          end
          return true if process.finished?

          problem = process.finish
          read = problem ? "its ring could not be read to its end: #{CLI.shown(problem)}" : "read its ring to its end"
          @err.puts("#{PROGRAM}: process #{process.pid} exited: #{read}; its series go #{going}")
          true
        end

        def going
          @keep_exited.positive? ? "in #{format("%g", @keep_exited)}s (--keep-exited)" : "at the next scrape"
        end

        # pid => start time of every process in /proc this user may read.
        def candidates
          me = ::Process.pid
          root = ::Process.euid.zero?
          Dir.children(PROC).each_with_object({}) do |name, found|
            next unless name.match?(/\A\d+\z/) && (pid = name.to_i) != me

            start_time = Watched.start_time(pid, root)
            found[pid] = start_time if start_time
          end
        end

        def warn_once(process, problem)
          return if problem.nil? || problem == process.last_problem

          process.last_problem = problem
          @err.puts("#{PROGRAM}: process #{process.pid}: #{problem}")
        end
      end

      # A process whose ring is read: its published state, and the tally of
      # what its rings held.
      class Watched
        attr_reader :pid, :start_time, :tally
        attr_accessor :last_problem

        # A process named on the command line: it must publish its state.
        def self.named(pid)
          new(pid, ProcessState.new(pid))
        end

        # A process found in /proc; found again at the next scrape.
        def self.found(pid, start_time)
          new(pid, ProcessState.new(pid), start_time:)
        rescue Error, SystemCallError
          new(pid, nil, start_time:)
        end

        # The start time of process +pid+ if this user may read it.
        def self.start_time(pid, root)
          dir = File.join(Processes::PROC, pid.to_s)
          ProcessStart.of(dir) if root || File.stat(dir).uid == ::Process.euid
        rescue SystemCallError
          nil
        end

        def initialize(pid, state, start_time: nil)
          @pid = pid
          @state = state
          @start_time = start_time || state&.start_time
          @tally = nil
        end

        def alive?
          @state&.alive? || false
        end

        def finished?
          !@finished_at.nil?
        end

        # When it was read to its end (CLI.monotonic).
        attr_reader :finished_at

        # The last read of the ring of a process that exited, through the
        # descriptor kept from the last scrape: to its end, records its
        # writer was killed in the middle of passed over (lost). Returns
        # why it could not, or nil.
        def finish
          @finished_at = CLI.monotonic
          return unless @ring_file && @tally

          @tally.finish(@ring_file.fileno)
          nil
        rescue Error, SystemCallError => e
          e.message
        end

        def close
          @ring_file&.close
          @ring_file = nil
        end

        # Reads its ring on; returns why it could not, or nil. +strict+
        # raises that instead, and also when it does not record. A process
        # whose state cannot be read now (it is exiting, say) is passed over.
        def scrape(strict: false)
          published, ring = published_ring(strict)
          unless ring
            raise Error, "process #{pid} is not recording (#{PROGRAM} record #{pid} --flight)" if strict

            return
          end
          read_ring(published, ring)
        rescue Error, InternalError, SystemCallError => e
          raise Error, e.message if strict

          e.is_a?(Error) ? e.message : CLI.reason(e)
        end

        private

        def published_ring(strict)
          published = @state&.read or return
          ring = RingLocator.ring(published) or return
          [published, ring]
        rescue Error, SystemCallError
          raise if strict

          nil
        end

        # Read only, as RingLocator opens a ring. Its descriptor is kept
        # (a duplicate) for the process's last read: a ring a process
        # removes as it exits stays readable through it.
        def read_ring(published, ring)
          RingLocator.open(@state, published) do |file|
            @tally ||= TraceFile.reader::Tally.new(ring)
            keep(file)
            @tally.scrape(file.fileno)
          end
          nil
        end

        def keep(file)
          same = @ring_file && File.identical?(@ring_file, file)
          return if same

          close
          @ring_file = file.dup
        end
      end
    end
  end
end
