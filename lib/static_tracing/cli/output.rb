# frozen_string_literal: true

module StaticTracing
  module CLI
    # Where a command writes (stdout, stderr): a write that fails (a full
    # disk, /dev/full, an I/O error) is a Failed error that says so in one
    # line, as every other failure of the command is, where Ruby would end
    # with a backtrace. A reader that went away (EPIPE) is left as it is:
    # the command then ends quietly. Once a write failed nothing more is
    # written there: it is said once.
    class Output
      # Writing failed: the message says where and why.
      class Failed < Error; end

      WRITES = %i[write puts print printf << flush].freeze

      # +io+ is written to; +name+ names it in messages ("stdout").
      def initialize(io, name)
        @io = io
        @name = name
      end

      WRITES.each do |method|
        define_method(method) do |*args|
          guarded { @io.public_send(method, *args) }
        end
      end

      def respond_to_missing?(method, include_private = false)
        @io.respond_to?(method, include_private) || super
      end

      # Anything else (tty?, sync, fileno) is the stream's own.
      def method_missing(method, *args, &)
        return super unless @io.respond_to?(method)

        @io.public_send(method, *args, &)
      end

      private

      def guarded
        return if @failed

        begin
          yield
        rescue Errno::EPIPE
          raise
        rescue SystemCallError, IOError => e
          @failed = true
          raise Failed, "cannot write to #{@name}: #{CLI.reason(e)}"
        end
      end
    end
  end
end
