# frozen_string_literal: true

require "json"

module StaticTracing
  # The channel `static-tracing` sends this process its requests through
  # (record these probes, renew, stop): a FIFO next to its state file (see
  # ext/stapsdt/src/control.rs for why a FIFO), opened with the first state
  # published, read by the Watcher's thread. A request is one line of JSON,
  # written whole:
  #
  #   {"format":1,"id":"9f2c...","action":"record","settings":{...},"lease":10}
  #
  # and its answer goes into the state file (Control.reply), which the
  # command waits for. Only the process's user, or root, can write to the
  # FIFO; a request that cannot be read is answered as refused, and changes
  # nothing.
  module Control
    FORMAT = 1
    # A request is one write to a FIFO, so at most PIPE_BUF bytes; a line
    # longer than that is no request.
    MAX_REQUEST = 4096

    @io = nil
    @path = nil
    @buffer = +""
    @failed = false
    # The answer to the last request: [id, accepted, message].
    @reply = nil

    class << self
      # The FIFO's path, or nil.
      attr_reader :path

      # The answer to the last request, for State: {"id", "ok", "message"}.
      def reply
        id, accepted, message = @reply
        id && { "id" => id, "ok" => accepted, "message" => message }
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
        answer(id, true, carry_out(request["action"], id, request))
      rescue JSON::ParserError, ArgumentError, StaticTracing::Error => e
        id = request.is_a?(Hash) && request["id"].is_a?(String) ? request["id"][0, 64] : nil
        answer(id, false, e.message.lines.first.chomp)
      end

      # What was done, in a word or two, for the reply.
      def carry_out(action, id, request)
        case action
        when "record"
          Recorder.start_for_command(id, request["settings"], request["lease"])
          "recording"
        when "renew"
          Recorder.renew(id)
          "renewed"
        when "stop"
          Recorder.stop_recording(request_id(request["recording"])) ? "stopped" : "nothing was recording"
        else raise ArgumentError, "unknown action #{action.inspect}"
        end
      end

      def answer(id, accepted, message)
        @reply = [id, accepted, message]
        State.publish
      end

      def request_id(id)
        return id if id.nil? || (id.is_a?(String) && id.match?(/\A[0-9a-f]{1,64}\z/))

        raise ArgumentError, "request id #{id.inspect} is not a hexadecimal string"
      end
    end
  end
end
