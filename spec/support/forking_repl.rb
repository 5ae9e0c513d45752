# frozen_string_literal: true

module E2E
  # Ruby source for a REPL child (E2E::Repl) that forks children of its own
  # and has them evaluate what it sends them over a pipe: `$kid = Kid.new`
  # forks one, `$kid.eval("code")` returns what the child evaluated
  # (Marshal, or #inspect), `$kid.finish` lets it exit as a program does.
  FORKING_REPL = <<~'RUBY'
    class Kid
      attr_reader :pid

      def initialize
        down, @down = IO.pipe
        @up, up = IO.pipe
        @pid = fork do
          @down.close
          @up.close
          while (line = down.gets)
            result = begin
              [:ok, TOPLEVEL_BINDING.eval(line.chomp.unpack1("m0"))]
            rescue Exception => e
              [:error, "#{e.class}: #{e.message}"]
            end
            payload = begin
              Marshal.dump(result)
            rescue TypeError
              Marshal.dump([result.first, result.last.inspect])
            end
            up.puts([payload].pack("m0"))
          end
        end
        down.close
        up.close
      end

      def eval(code)
        send_code(code)
        raise "child #{@pid} did not answer" unless IO.select([@up], nil, nil, 20)

        status, value = Marshal.load((@up.gets or raise "child #{@pid} is gone").chomp.unpack1("m0"))
        raise value if status == :error

        value
      end

      def send_code(code)
        @down.puts([code].pack("m0"))
      end

      # How the child ended, once it has.
      def wait
        raise "child #{@pid} did not exit" unless IO.select([@up], nil, nil, 20)

        Process.wait2(@pid).last
      end

      # The child leaves its loop and exits as a program does, at_exit handlers run.
      def finish
        @down.close
        wait
      end
    end
  RUBY
end
