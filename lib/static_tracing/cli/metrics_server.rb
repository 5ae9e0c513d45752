# frozen_string_literal: true

require "io/wait"
require "socket"
require "time"

module StaticTracing
  module CLI
    # A minimal HTTP/1.1 server of one page, /metrics, whose content type
    # and body the block makes at each request, one request at a time, from
    # the request's Accept header (nil without one). A connection is served
    # on a thread of its own and closed after one answer; a request must
    # arrive whole within READ_TIMEOUT and in MAX_REQUEST bytes, and its
    # answer be taken within WRITE_TIMEOUT, so that no client can hold the
    # server; at most MAX_CONNECTIONS are served at once. When all are
    # taken, a new connection takes the place of the oldest one whose
    # request has not come whole (answered 408 at once): connections that
    # send nothing never keep a scraper out. Ctrl-C or SIGTERM ends #run.
    class MetricsServer
      # A connection served: since when, and whether its request is still
      # to come whole (only then may a newer connection take its place:
      # +lock+ makes that and the end of the wait one or the other).
      Connection = Struct.new(:socket, :thread, :since, :reading, :lock) do
        # Ends the wait for the request, unless it has come; whether it did.
        def evict
          lock.synchronize do
            next false unless reading

            self.reading = false
            socket.close
            true
          end
        end

        # The request has come: the connection is answered. False if it
        # was evicted first.
        def answering
          lock.synchronize { reading.tap { self.reading = false } }
        end
      end

      PATH = "/metrics"
      MAX_REQUEST = 8192
      READ_TIMEOUT = 5.0
      WRITE_TIMEOUT = 10.0
      MAX_CONNECTIONS = 16
      LINGER = 1.0
      REQUEST_LINE = %r{\A(?<method>[A-Z]+) (?<target>\S+) HTTP/1\.[01]\r?\n}
      ACCEPT = /^accept:[ \t]*(?<value>[^\r\n]*)/i
      REASONS = { 200 => "OK", 400 => "Bad Request", 404 => "Not Found", 405 => "Method Not Allowed",
                  408 => "Request Timeout", 431 => "Request Header Fields Too Large",
                  500 => "Internal Server Error", 503 => "Service Unavailable" }.freeze

      # Listens on +host+:+port+ at once (every interface, IPv6 and IPv4,
      # for a nil +host+); raises Error when it cannot.
      def initialize(host, port, &metrics)
        @metrics = metrics
        @server = host ? TCPServer.new(host, port) : every_interface(port)
        @scrape = Mutex.new
        @connections = []
      rescue SocketError, SystemCallError => e
        raise Error, "cannot listen on #{host}:#{port}: #{CLI.reason(e)}"
      end

      # One socket for both families (IPv4 as mapped addresses), or IPv4
      # alone where the system has no IPv6.
      def every_interface(port)
        server = Socket.new(:INET6, :STREAM)
        server.setsockopt(:SOCKET, :REUSEADDR, true)
        server.setsockopt(:IPV6, :V6ONLY, false)
        server.bind(Addrinfo.tcp("::", port))
        server.listen(Socket::SOMAXCONN)
        TCPServer.for_fd(server.fileno).tap { server.autoclose = false }
      rescue Errno::EAFNOSUPPORT, Errno::EADDRNOTAVAIL
        server&.close
        TCPServer.new("0.0.0.0", port)
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

        @connections.select! { |connection| connection.thread.alive? }
        return refuse(socket) if @connections.size >= MAX_CONNECTIONS && !evict_idle

        connection = Connection.new(socket, nil, CLI.monotonic, true, Mutex.new)
        connection.thread = Thread.new { serve(connection) }
        @connections << connection
      end

      def refuse(socket)
        respond(socket, 503, "too many connections at once\n")
        socket.close
      end

      # Makes room: the oldest connection whose request has not come whole
      # is closed. False if every one is being answered.
      def evict_idle
        @connections.select(&:reading).sort_by(&:since).each do |idle|
          next unless idle.evict

          @connections.delete(idle)
          return true
        end
        false
      end

      # Connections under way end by their own deadlines.
      def finish_connections
        deadline = CLI.monotonic + READ_TIMEOUT + WRITE_TIMEOUT + LINGER
        @connections.each do |connection|
          connection.thread.join([deadline - CLI.monotonic, 0].max) || connection.thread.kill
        end
      end

      def serve(connection)
        socket = connection.socket
        head = read_request(socket)
        return unless connection.answering

        status, body, type = answer(head)
        respond(socket, status, body, type)
      rescue IOError
        nil # evicted: its socket was closed under the wait
      rescue StandardError => e
        respond(socket, 500, "#{e.message}\n")
      ensure
        linger(socket) unless socket.closed?
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

      # [status, body, content type] for the request +head+ (its request
      # line and headers), or for the status read_request returned.
      def answer(head)
        return [head, "#{REASONS.fetch(head)}\n"] if head.is_a?(Integer)

        request = REQUEST_LINE.match(head) or return [400, "not an HTTP/1.x request line\n"]
        path = request[:target].split("?", 2).first
        return [404, "not found: the metrics are at #{PATH}\n"] unless path == PATH
        return [405, "only GET and HEAD\n"] unless %w[GET HEAD].include?(request[:method])

        type, body = @scrape.synchronize { @metrics.call(accept_header(head)) }
        [200, request[:method] == "HEAD" ? [body.bytesize] : body, type]
      end

      # The Accept header of the request +head+ (its values joined, as a
      # header given twice means), or nil.
      def accept_header(head)
        headers = head.split(/\r?\n\r?\n/, 2).first.split(/\r?\n/).drop(1)
        values = headers.filter_map { |line| ACCEPT.match(line)&.[](:value) }
        values.join(",") unless values.empty?
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

      def respond(socket, status, body, type = nil)
        length, body = body.is_a?(Array) ? [body.first, ""] : [body.bytesize, body]
        headers = ["HTTP/1.1 #{status} #{REASONS.fetch(status)}", "Date: #{Time.now.httpdate}",
                   "Content-Type: #{type || "text/plain; charset=utf-8"}",
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
