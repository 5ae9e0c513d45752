# frozen_string_literal: true

require "io/wait"

module StaticTracing
  module Recorder
    # The `static-tracing record -- COMMAND` that started this process, and
    # follows its recording from its first probe: it passes one end of a
    # socket (STATIC_TRACING_RECORD_LAUNCHER, its descriptor's number). The
    # process says there whether its recording started, and if it did
    # waits (a moment at most) for the command to have its ring open
    # before any of the application's code runs: a program that ends at
    # once is read all the same. Only the process the command started
    # does so: the variable is taken out of its environment, and the
    # socket closed, for its own children.
    class Launcher
      VARIABLE = "STATIC_TRACING_RECORD_LAUNCHER"
      # The longest the process waits for the command; a command gone
      # (its end closed) is not waited for at all.
      WAIT = 10.0

      # The launcher +env+ names, taken out of it; nil if none.
      def self.take(env)
        fd = env.delete(VARIABLE) or return
        new(IO.for_fd(Integer(fd, 10), autoclose: true))
      rescue ArgumentError, SystemCallError
        nil
      end

      def initialize(socket)
        @socket = socket
      end

      # The recording started: the command is told which process records,
      # and waited for.
      def recording
        said("recording #{Process.pid}") && @socket.wait_readable(WAIT)
      ensure
        close
      end

      def refused(reason)
        said("refused #{reason.to_s.lines.first.to_s.chomp}")
      ensure
        close
      end

      private

      def said(line)
        @socket.write("#{line}\n")
        true
      rescue SystemCallError, IOError
        false
      end

      def close
        @socket.close unless @socket.closed?
      rescue IOError, SystemCallError
        nil
      end
    end
  end
end
