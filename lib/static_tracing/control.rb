# frozen_string_literal: true

require "json"

module StaticTracing
  # The channel `static-tracing` sends this process its requests through
  # (record these probes, renew, stop, cancel): a FIFO next to its state file (see
  # ext/stapsdt/src/control.rs for why a FIFO), opened with the first state
  # published, read by the Watcher's thread. A request is one line of JSON,
  # written whole:
  #
  #   {"format":1,"id":"9f2c...","action":"record","settings":{...},"lease":10}
  #
  # and its answer goes into the state file (Control.reply), which the
  # command waits for. Only the process's user, or root, can write to the
  # FIFO; a request that cannot be read or carried out is answered as
  # refused, with the reason, and changes nothing. Whatever a request
  # holds, the thread that reads them goes on to the next: one bad request
  # must not leave the process deaf to every later one.
  module Control
    FORMAT = 1
    # A request is one write to a FIFO, so at most PIPE_BUF bytes; a line
    # longer than that is no request.
    MAX_REQUEST = 4096
    # A lease is how long a recording outlives a command that stopped
    # renewing it (the command renews every second): past an hour, a
    # command that died would leave its ring filling for longer than anyone
    # would wait for it.
    MAX_LEASE = 3600.0
    # A reason quotes what it refuses, which may be most of a request; the
    # state file it goes into is read with a bound of its own.
    MAX_REASON = 1024

    @io = nil
    @path = nil
    @buffer = +""
    @failed = false
    # The answer to the last request: [id, accepted, message, pending].
    @reply = nil

    class << self
      # The FIFO's path, or nil.
      attr_reader :path

      # The answer to the last request, for State: {"id", "ok", "message"},
      # and "pending" while a request that takes time is carried out.
      def reply
        id, accepted, message, pending = @reply
        id && { "id" => id, "ok" => accepted, "message" => message, "pending" => pending || nil }.compact
      end

      # Opens the channel if it is not open; true when it was opened now.
      # Called once the state is published: the FIFO goes next to it. A
      # channel that cannot be made is said once, and not tried again.
      def open_once
        return false if @io || @failed

        fd, @path = Native.open_control
        @io = IO.for_fd(fd, autoclose: true)
        Watcher.control = @io
        true
      rescue StaticTracing::Error, SystemCallError => e
        @failed = true
        StaticTracing.warn_once(:control, "static_tracing: static-tracing cannot send requests to this process " \
                                          "(record): #{e.message}")
        false
      end

      # Reads the requests waiting in the channel and carries them out.
      def receive
        chunk = @io&.read_nonblock(MAX_REQUEST * 4, exception: false)
        return unless chunk.is_a?(String)

        @buffer << chunk
        while (line = @buffer.slice!(/\A[^\n]*\n/))
          handle(line.chomp)
        end
        @buffer.clear if @buffer.bytesize > MAX_REQUEST
      rescue IOError, SystemCallError
        nil
      end

      # In a forked child: the FIFO is the parent's. The child lets go of
      # it; its own comes with its first state published.
      def restart_after_fork
        @io&.close
        @io = @path = @reply = nil
        @buffer = +""
        @failed = false
      rescue IOError
        @io = nil
      end

      private

      def handle(line)
        request = JSON.parse(line)
        raise ArgumentError, "a request is a JSON object" unless request.is_a?(Hash)

        unless request["format"] == FORMAT
          raise ArgumentError, "request format #{request["format"].inspect}: this static_tracing " \
                               "#{VERSION} reads format #{FORMAT}"
        end
        id = request_id(request["id"])
        check_deadline(request["deadline"])
        answer(id, true, carry_out(request["action"], id, request))
      rescue JSON::ParserError, ArgumentError, StaticTracing::Error => e
        refuse(request, e.message)
      rescue StandardError => e
        # Not a reason the request was checked against but a failure to
        # carry it out: its class says more than its message alone.
        refuse(request, "could not carry out the request: #{e.class}: #{e.message}")
      end

      # The answer names the request by its id as far as it has one: a
      # malformed id is still the best clue to whose request it was.
      def refuse(request, reason)
        id = request.is_a?(Hash) && request["id"].is_a?(String) ? text(request["id"])[0, 64] : nil
        answer(id, false, text(reason).lines.first.to_s.chomp)
      end

      # What goes into the state file must be valid UTF-8 (JSON refuses
      # anything else, and would refuse every later state with it) and
      # short, whatever bytes a request or an error message carried.
      def text(value)
        line = value.to_s.dup.force_encoding(Encoding::UTF_8).scrub
        line.size > MAX_REASON ? "#{line[0, MAX_REASON]}..." : line
      end

      # A command that waits for an answer gives up at its deadline (the
      # wall clock's, which every process of the host shares), and then
      # cancels: a request read after it is refused, never carried out late.
      def check_deadline(deadline)
        return if deadline.nil?
        raise ArgumentError, "invalid deadline #{deadline.inspect}" unless deadline.is_a?(Numeric)

        late = Time.now.to_f - deadline
        return unless late.positive?

        raise RecorderError, "static-tracing gave up waiting for this request #{format("%.1f", late)}s before " \
                             "the process read it (it was busy): nothing was done"
      end

      # What was done, in a word or two, for the reply.
      def carry_out(action, id, request)
        case action
        when "record" then record(id, request)
        when "cancel"
          Recorder.cancel(request_id(request["recording"])) ? "stopped" : "nothing to cancel"
        when "renew"
          Recorder.renew(id)
          "renewed"
        when "stop"
          Recorder.stop_recording(request_id(request["recording"])) ? "stopped" : "nothing was recording"
        else raise ArgumentError, "unknown action #{action.inspect}"
        end
      end

      def record(id, request)
        lease = lease(request["lease"])
        RecordingOptions.from_h(request["settings"])
        # Making a large ring takes seconds: the command, told so, waits.
        # (One that sends no deadline would take the word for the answer.)
        answer(id, true, "starting", pending: true) if request.key?("deadline")
        Recorder.start_for_command(id, request["settings"], lease, wait_for_probes: request["wait_for_probes"] == true,
                                                                   cancelled: -> { cancelled?(id) })
        "recording"
      end

      def answer(id, accepted, message, pending: false)
        @reply = [id, accepted, message, pending]
        State.publish
      end

      # Whether the command cancelled request +id+ while it was carried
      # out: a line waiting in the channel that says so (taken out of it).
      # Read without blocking, and the other lines kept for #receive.
      def cancelled?(id)
        chunk = @io&.read_nonblock(MAX_REQUEST * 4, exception: false)
        @buffer << chunk if chunk.is_a?(String)
        lines = @buffer.lines
        cancel = lines.index { |line| cancels?(line, id) } or return false

        lines.delete_at(cancel)
        @buffer = +lines.join
        true
      rescue IOError, SystemCallError
        false
      end

      def cancels?(line, id)
        request = JSON.parse(line)
        request.is_a?(Hash) && request["action"] == "cancel" && request["recording"] == id
      rescue JSON::ParserError
        false
      end

      # Seconds, or nil for a recording that needs no renewing.
      def lease(seconds)
        return if seconds.nil?
        return seconds.to_f if seconds.is_a?(Numeric) && seconds.positive? && seconds <= MAX_LEASE

        raise ArgumentError, "invalid lease #{seconds.inspect}: give seconds above 0 and at most #{MAX_LEASE.to_i}"
      end

      def request_id(id)
        return id if id.nil? || (id.is_a?(String) && id.match?(/\A[0-9a-f]{1,64}\z/))

        raise ArgumentError, "request id #{id.inspect} is not a hexadecimal string"
      end
    end
  end
end
