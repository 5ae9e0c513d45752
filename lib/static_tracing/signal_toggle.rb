# frozen_string_literal: true

require "io/wait"

module StaticTracing
  # Toggles tracing when the configured signal arrives.
  #
  # The signal handler (native, a sigaction handler of its own,
  # chained with the handler that was there) only counts the signal and
  # writes a byte to a pipe. A thread of this process waits on the pipe and
  # applies the toggles, with the GVL held, as soon as the scheduler lets it:
  # also while the main thread is busy or blocked. An odd number of signals
  # received together toggles once, an even number not at all. In a forked
  # (or daemonized) child the thread is started again.
  module SignalToggle
    # The toggle signals (see SignalRules) for which Ruby installs a
    # handler of its own that raises SignalException: taking one of them
    # must not chain to that handler. (Ruby handles HUP, INT, QUIT, TERM and
    # ALRM too, but none of them can be taken.)
    RUBY_HANDLED = %w[USR1 USR2].freeze

    @lock = Mutex.new
    @signal = nil
    @received = 0

    class << self
      # The signal toggling tracing now, or nil.
      attr_reader :signal

      # Signals applied since the process started (or forked).
      attr_reader :received

      # Makes +signal+ the toggle signal. Taking the signal already taken
      # puts the handler back if the application installed another one
      # since (which is chained).
      def take(signal)
        @lock.synchronize do
          return Native.arm_signal(Signal.list.fetch(signal), @pipe[1].fileno) if @signal == signal && @watcher&.alive?

          release_locked
          ruby_previous = quiet_ruby_default(signal)
          reader, writer = IO.pipe
          begin
            Native.arm_signal(Signal.list.fetch(signal), writer.fileno)
          rescue StandardError
            [reader, writer].each(&:close)
            Signal.trap(signal, ruby_previous) if ruby_previous
            raise
          end
          @signal = signal
          @ruby_previous = ruby_previous
          @pipe = [reader, writer]
          @watcher = start_watcher(reader)
        end
      end

      # Gives the signal back: the handler that was there before handles it again.
      def release
        @lock.synchronize { release_locked }
      end

      # In a forked child: the watcher thread did not survive the fork, and
      # the pipe is shared with the parent. Gives the child its own.
      def restart_after_fork
        @lock = Mutex.new
        return unless @signal

        @pipe.each { |io| io.close unless io.closed? }
        @pipe = IO.pipe
        @received = 0
        Native.arm_signal(Signal.list.fetch(@signal), @pipe[1].fileno)
        @watcher = start_watcher(@pipe[0])
      rescue StandardError => e
        # Raising here would raise from the application's fork, in the child.
        warn("static_tracing: SIG#{@signal} does not toggle tracing in process #{Process.pid}: " \
             "#{e.class}: #{e.message}")
        release_locked
      end

      private

      def release_locked
        return unless @signal

        Native.disarm_signal
        Signal.trap(@signal, @ruby_previous) if @ruby_previous
        stop_watcher
        @pipe&.each { |io| io.close unless io.closed? }
        @signal = @ruby_previous = @watcher = @pipe = nil
      end

      # The watcher finishes a toggle it has begun, so that the mode set
      # next starts from a whole state; it can be waiting for STATE_LOCK,
      # so it is only waited for by a thread that does not hold it.
      def stop_watcher
        return unless @watcher

        @watcher.kill
        @watcher.join unless @watcher.equal?(Thread.current) || StaticTracing::STATE_LOCK.mon_owned?
      end

      # Ruby's own handler for these signals raises SignalException; that is
      # the default the application did not choose, so it is set aside (and
      # given back on release). It is left ignored until the native handler
      # is in place: the system default would end the process. A trap the
      # application installed stays, and is chained.
      def quiet_ruby_default(signal)
        return unless RUBY_HANDLED.include?(signal)

        previous = Signal.trap(signal, "IGNORE")
        if [nil, "DEFAULT", "SYSTEM_DEFAULT"].include?(previous)
          previous || "DEFAULT"
        else
          Signal.trap(signal, previous)
          nil
        end
      end

      def start_watcher(reader)
        thread = Thread.new do
          Thread.current.report_on_exception = false
          # Killed (on release) only while waiting, never halfway through a toggle.
          Thread.handle_interrupt(Object => :never) do
            loop do
              apply(Native.take_signals)
              Thread.handle_interrupt(Object => :immediate) { reader.wait_readable }
              reader.read_nonblock(4096, exception: false)
            end
          end
        rescue IOError
          nil # released: the pipe was closed
        end
        # Named here, not in the thread: a server that lists threads right
        # after boot (puma warns about them) must see whose it is.
        thread.name = "static_tracing signal"
        thread
      end

      # The count and the state change together: whoever reads both under
      # STATE_LOCK sees them agree.
      def apply(count)
        return if count.zero?

        StaticTracing::STATE_LOCK.synchronize do
          @received += count
          StaticTracing.toggle! if count.odd?
        end
      rescue StandardError => e
        warn("static_tracing: toggling tracing on SIG#{@signal} failed: #{e.class}: #{e.message}")
      end
    end
  end
end
