# frozen_string_literal: true

require "io/wait"
require "socket"
require "time"
require_relative "control_channel"
require_relative "private_file"
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

      ADDRESS = /\A(?:\[(?<host>[^\]]+)\]|(?<host>[^:\[\]]*)):(?<port>\d{1,5})\z/

      private

      def define_options(parser)
        @listen = nil
        parser.on("--listen HOST:PORT", "Where to serve /metrics (127.0.0.1:9394, [::1]:9394, :9394)") do |address|
          @listen = address
        end
      end

      def execute(args)
        host, port = listen_address
        pids = pids(args)
        processes = nil
        server = MetricsServer.new(host, port) { processes.metrics }
        processes = Processes.new(pids, err:)
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
        [host.empty? ? "0.0.0.0" : host, port]
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

        def initialize(pids, err:)
          @err = err
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

        # The text of a scrape: every ring read on from where it was.
        def metrics
          @named ? drop_exited : discover
          tallies = @watched.filter_map do |pid, process|
            problem = process.scrape
            warn_once(process, problem)
            [pid, process.tally] if process.tally
          end
          TraceFile.reader::Tally.exposition(tallies)
        end

        private

        def drop_exited
          @watched.select! do |pid, process|
            next true if process.alive?

            @err.puts("#{PROGRAM}: process #{pid} exited: its series are gone")
            false
          end
        end

        # Every process this user may read (any, as root), kept from one
        # scrape to the next while it runs: whether it records is asked
        # again at each scrape, its environment (where its state file is)
        # is read once.
        def discover
          running = candidates
          @watched.select! { |pid, process| running[pid] == process.start_time }
          running.each { |pid, start_time| @watched[pid] ||= Watched.found(pid, start_time) }
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
          return unless root || File.stat(dir).uid == ::Process.euid

          ProcessStart.parse(File.read(File.join(dir, "stat")))
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
        rescue Error, SystemCallError => e
          raise Error, e.message if strict

          e.is_a?(Error) ? e.message : CLI.reason(e)
        end

        private

        def published_ring(strict)
          published = @state&.read or return
          ring = published.recorder&.fetch("ring", nil) or return
          [published, ring]
        rescue Error, SystemCallError
          raise if strict

          nil
        end

        def read_ring(published, ring)
          open_ring(published, ring) do |file|
            @tally ||= TraceFile.reader::Tally.new(ring)
            @tally.scrape(file.fileno)
          end
          nil
        end

        # As ControlChannel#open_ring: only where its state file says (which
        # ProcessState checked), only a file its user could have written,
        # read only.
        def open_ring(_published, ring, &)
          process = @state.process
          opened = process.guard(ring) do
            PrivateFile.open_checked(process.reach(File.dirname(ring)), File.basename(ring),
                                     owner: @state.uid, described: "the uid process #{pid} runs as",
                                     limit: ControlChannel::MAX_RING_FILE, &)
          end
          opened.nil? ? raise(Error, "the ring #{ring} of process #{pid} is gone") : opened
        rescue PrivateFile::Untrusted => e
          raise Error, "refusing the ring #{ring} of process #{pid}: #{e.message}"
        end
      end
    end

    # A minimal HTTP/1.1 server of one page, /metrics, whose body the block
    # makes at each request, one request at a time. A connection is served
    # on a thread of its own and closed after one answer; a request must
    # arrive whole within READ_TIMEOUT and in MAX_REQUEST bytes, and its
    # answer be taken within WRITE_TIMEOUT, so that no client can hold the
    # server; at most MAX_CONNECTIONS are served at once. Ctrl-C or SIGTERM
    # ends #run.
    class MetricsServer
      PATH = "/metrics"
      CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
      MAX_REQUEST = 8192
      READ_TIMEOUT = 5.0
      WRITE_TIMEOUT = 10.0
      MAX_CONNECTIONS = 16
      LINGER = 1.0
      REQUEST_LINE = %r{\A(?<method>[A-Z]+) (?<target>\S+) HTTP/1\.[01]\r?\n}
      REASONS = { 200 => "OK", 400 => "Bad Request", 404 => "Not Found", 405 => "Method Not Allowed",
                  408 => "Request Timeout", 431 => "Request Header Fields Too Large",
                  500 => "Internal Server Error", 503 => "Service Unavailable" }.freeze

      # Listens on +host+:+port+ at once; raises Error when it cannot.
      def initialize(host, port, &metrics)
        @metrics = metrics
        @server = TCPServer.new(host, port)
        @scrape = Mutex.new
        @connections = []
      rescue SocketError, SystemCallError => e
        raise Error, "cannot listen on #{host}:#{port}: #{CLI.reason(e)}"
      end

      # Where it listens, as HOST:PORT (the port it was given, or the one
      # the system chose for port 0).
      def address
        _, port, host = @server.addr
        host.include?(":") ? "[#{host}]:#{port}" : "#{host}:#{port}"
      end

      # Serves until Ctrl-C or SIGTERM; yields once they are caught.
      def run
        stop, @stopper = IO.pipe
        with_signals do
          yield
          loop do
            ready, = IO.select([@server, stop])
            break if ready.include?(stop)

            accept
          end
        end
      ensure
        [stop, @stopper].each { |io| io&.close }
        finish_connections
      end

      def close
        @server.close unless @server.closed?
      end

      private

      def with_signals
        previous = %w[INT TERM].to_h do |signal|
          [signal, Signal.trap(signal) { @stopper.write_nonblock(".", exception: false) }]
        end
        yield
      ensure
        previous&.each { |signal, handler| Signal.trap(signal, handler || "DEFAULT") }
      end

      def accept
        socket = @server.accept_nonblock(exception: false)
        return if socket == :wait_readable

        @connections.select!(&:alive?)
        if @connections.size >= MAX_CONNECTIONS
          respond(socket, 503, "too many connections at once\n")
          return socket.close
        end
        @connections << Thread.new(socket) { |client| serve(client) }
      end

      # Connections under way end by their own deadlines.
      def finish_connections
        deadline = CLI.monotonic + READ_TIMEOUT + WRITE_TIMEOUT + LINGER
        @connections.each { |thread| thread.join([deadline - CLI.monotonic, 0].max) || thread.kill }
      end

      def serve(socket)
        status, body = answer(read_request(socket))
        respond(socket, status, body)
      rescue StandardError => e
        respond(socket, 500, "#{e.message}\n")
      ensure
        linger(socket)
      end

      # Closes the connection once the client has had the answer: what it
      # sent that was not read (a request refused unread) is read and
      # dropped first, for a while, since closing a socket with unread
      # bytes resets the connection, and the client could lose the answer.
      def linger(socket)
        socket.close_write
        deadline = CLI.monotonic + LINGER
        while (left = deadline - CLI.monotonic).positive?
          chunk = socket.read_nonblock(MAX_REQUEST, exception: false)
          break if chunk.nil? || (chunk == :wait_readable && !socket.wait_readable(left))
        end
      rescue SystemCallError, IOError
        nil
      ensure
        socket.close
      end

      # [status, body] for the request +head+ (its request line and
      # headers), or for the status read_request returned.
      def answer(head)
        return [head, "#{REASONS.fetch(head)}\n"] if head.is_a?(Integer)

        request = REQUEST_LINE.match(head) or return [400, "not an HTTP/1.x request line\n"]
        path = request[:target].split("?", 2).first
        return [404, "not found: the metrics are at #{PATH}\n"] unless path == PATH
        return [405, "only GET and HEAD\n"] unless %w[GET HEAD].include?(request[:method])

        body = @scrape.synchronize { @metrics.call }
        [200, request[:method] == "HEAD" ? [body.bytesize] : body]
      end

      # The request line and headers, or the status to answer with when
      # they do not come whole in time, or are too long.
      def read_request(socket)
        head = +""
        deadline = CLI.monotonic + READ_TIMEOUT
        loop do
          whole = complete(head) and return whole

          chunk = socket.read_nonblock(MAX_REQUEST, exception: false)
          case chunk
          when :wait_readable then return 408 unless socket.wait_readable([deadline - CLI.monotonic, 0].max)
          when nil then return 400
          else head << chunk
          end
        end
      end

      # +head+ if it holds a whole request head, 431 if it is too long to,
      # nil while more is to come.
      def complete(head)
        ends = head.index("\r\n\r\n") || head.index("\n\n")
        return ends < MAX_REQUEST ? head : 431 if ends

        431 if head.bytesize >= MAX_REQUEST
      end

      def respond(socket, status, body)
        length, body = body.is_a?(Array) ? [body.first, ""] : [body.bytesize, body]
        headers = ["HTTP/1.1 #{status} #{REASONS.fetch(status)}", "Date: #{Time.now.httpdate}",
                   "Content-Type: #{status == 200 ? CONTENT_TYPE : "text/plain; charset=utf-8"}",
                   "Content-Length: #{length}", "Connection: close"]
        headers << "Allow: GET, HEAD" if status == 405
        write(socket, "#{headers.join("\r\n")}\r\n\r\n#{body}")
      end

      def write(socket, data)
        deadline = CLI.monotonic + WRITE_TIMEOUT
        until data.empty?
          written = socket.write_nonblock(data, exception: false)
          if written == :wait_writable
            return unless socket.wait_writable([deadline - CLI.monotonic, 0].max)
          else
            data = data.byteslice(written..)
          end
        end
      rescue SystemCallError, IOError
        nil
      end
    end
  end
end
