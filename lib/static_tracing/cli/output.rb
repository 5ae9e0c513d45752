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

      # What text written to a stream of +text+ passes through.
      TEXT = %i[write puts print <<].freeze

      # +io+ is written to; +name+ names it in messages ("stdout"). A +text+
      # stream (stderr: the command's messages, which may quote another
      # process's words) is sent no control character but newlines and
      # tabs: whatever a message quotes, no escape sequence reaches the
      # terminal (CLI.shown).
      def initialize(io, name, text: false)
        @io = io
        @name = name
        @text = text
      end

      WRITES.each do |method|
        define_method(method) do |*args|
          args = args.map { |arg| arg.is_a?(String) ? CLI.shown(arg, lines: true) : arg } if text?(method)
          guarded { @io.public_send(method, *args) }
        end
      end

      # The command's own terminal control (its progress line cleared and
      # written again), sent as it is: unlike text, it quotes no other
      # process.
      def control(sequence)
        guarded { @io.print(sequence) }
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

      def text?(method)
        @text && TEXT.include?(method)
      end

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
