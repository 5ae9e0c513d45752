# frozen_string_literal: true

require "securerandom"
require_relative "trace_file"

module StaticTracing
  module CLI
    # A recording followed from outside as the process writes it: its ring
    # read every POLL_INTERVAL, its lease renewed, and the process's state
    # read again every CHECK_INTERVAL, so that a recording that ends under
    # the command (the process stopped it, its lease lapsed while the
    # command was suspended, another command stopped it) is noticed, and
    # said, instead of being taken for a quiet one. Whatever ends it, what
    # was read is kept: the ring stays open all along, a ring whose
    # process died is read to its last record, and a ring its process
    # rewrote under the reader (TraceReader::Follower refuses it) is read
    # no more, and what was read before is written.
    class LiveRecording
      POLL_INTERVAL = 0.1
      INTERRUPTS = %w[INT TERM].freeze
      CHECK_INTERVAL = 1.0
      # How often the progress line is written again.
      PROGRESS_INTERVAL = 0.5

      # Why following ended: :time (--seconds), :interrupt (Ctrl-C), :exited
      # (the process is gone), :cut_short (the recording ended under the
      # command; +reason+ says how) or :refused (its ring could not be read
      # on: +reason+ says why).
      Ending = Struct.new(:kind, :reason)

      attr_reader :recorder, :id, :reader, :ending, :status, :stop_failure

      # +recorder+: the process's ControlChannel; +id+: the recording to
      # follow, which the command renews if +leased+. +borrowed+: another's
      # (a flight recording), read from its head on without writing to it,
      # and left running at the end.
      def initialize(recorder, id, leased:, borrowed: false)
        @recorder = recorder
        @id = id
        @leased = leased
        @borrowed = borrowed
        @status = recorder.recording
        @started = CLI.monotonic
        @renew_failure = nil
      end

      # Follows the ring until +seconds+ pass (nil: no limit), the process
      # exits, the recording ends under the command or, unless +interrupt+
      # is given, Ctrl-C (SIGINT) or SIGTERM: +interrupt+ is then called
      # instead, and following goes on (for every one of +signals+, which
      # it traps meanwhile). Then stops the recording (unless it ended
      # already) and reads what is left. +opened+ is called once the ring
      # is open. +progress+, a terminal, is shown the time recorded and the
      # records read and lost so far on one line, as rbspy shows its own,
      # cleared at the end. Returns self.
      def follow(seconds: nil, interrupt: nil, opened: nil, progress: nil, signals: INTERRUPTS)
        recorder.open_ring(write: !@borrowed) do |ring|
          @reader = TraceFile::RingReader.new(ring, from_now: @borrowed)
          @progress = progress
          # The signals are trapped before the program is let go (+opened+):
          # one it gets as it starts (a terminal's Ctrl-C) is passed on.
          @ending = with_signals(interrupt, signals) { opened_then_poll(opened, seconds) }
          clear_progress
          stop if %i[time interrupt refused].include?(ending.kind) && !@borrowed
          @finished = CLI.monotonic
          @status = final_status
          take_rest
          # What the block returns is how RingLocator tells an open ring
          # from one that was gone: never nil.
          ending
        end
        self
      end

      # How long it recorded, from its start to its end, as the command saw them.
      def seconds
        (@finished || CLI.monotonic) - @started
      end

      # Whether it ended before it was asked to: the process ended the
      # recording, or its ring could not be read on.
      def cut_short?
        %i[cut_short refused].include?(ending&.kind)
      end

      # The probes the recording named that its ring's probe table could
      # not hold, as far as the process listed them, and how many in all
      # (once it ended: as the process counted them as it ended it).
      def unrecorded
        [Array(status&.fetch("unrecorded_probes", nil)).grep(String).map { |name| CLI.shown(name) },
         status&.fetch("unrecorded", 0).to_i]
      end

      private

      # What the process said of the recording as it ended it, if it did.
      def final_status
        ended = recorder.state.recorder_ended
        ended && ended["id"] == id ? (status || {}).merge(ended.slice("unrecorded", "unrecorded_probes")) : status
      end

      # SIGTERM is taken as Ctrl-C is (see Record#term_as_interrupt).
      def with_signals(interrupt, signals, &)
        return with_trap(->(_) { raise Interrupt }, INTERRUPTS, &) unless interrupt

        with_trap(interrupt, signals, &)
      end

      def with_trap(handler, signals)
        previous = signals.to_h { |signal| [signal, Signal.trap(signal) { handler.call(signal) }] }
        yield
      ensure
        previous&.each { |signal, old| Signal.trap(signal, old || "DEFAULT") }
      end

      # An interrupt, while +opened+ runs or while polling, ends the
      # recording: what was recorded is still written.
      def opened_then_poll(opened, seconds)
        opened&.call
        poll(seconds && (CLI.monotonic + seconds))
      rescue Interrupt
        Ending.new(:interrupt)
      end

      def poll(deadline)
        @checked = CLI.monotonic
        loop do
          reader.take
          show_progress
          return Ending.new(:time) if deadline && CLI.monotonic >= deadline
          return Ending.new(:exited) unless recorder.alive?

          ended = check
          return ended if ended

          sleep(POLL_INTERVAL)
        end
      rescue TraceFile::FormatError => e
        refused(e)
      end

      # The last read, unless the ring was refused (it then stays so).
      def take_rest
        reader.take_rest unless ending.kind == :refused
      rescue TraceFile::FormatError => e
        @ending = refused(e)
      end

      def refused(error)
        Ending.new(:refused, "its ring could not be read on: #{error.message}")
      end

      def show_progress
        return unless @progress && (@shown.nil? || CLI.monotonic - @shown >= PROGRESS_INTERVAL)

        @shown = CLI.monotonic
        lost = reader.lost
        @progress.control("\r\e[K")
        @progress.print("#{format("%.1f", seconds)}s: #{reader.records_read} records read, " \
                        "#{lost.zero? ? "none" : lost} lost")
        @progress.flush
      end

      def clear_progress
        return unless @progress && @shown

        @progress.control("\r\e[K")
        @progress.flush
      end

      # Every CHECK_INTERVAL: whether the recording ended under the
      # command; if not, the lease renewed.
      def check
        return if CLI.monotonic - @checked < CHECK_INTERVAL

        @checked = CLI.monotonic
        ended = ended_under_the_command
        renew if @leased && !ended
        ended
      end

      # The recording's end, if it ended under the command: the process's
      # state no longer shows it, or its answer to a renewal refused it.
      def ended_under_the_command
        state = recorder.current_state or return
        recording = state.recorder
        return refused_renewal(state.recorder_reply, recording) if recording && recording["id"] == id
        # A process on its way out: its exit is what ends the recording.
        return unless recorder.alive?

        Ending.new(:cut_short, "process #{recorder.pid} stopped it: #{why_it_ended(state)}")
      end

      def refused_renewal(reply, recording)
        @status = recording
        return unless reply && reply["id"] == id && !reply["ok"]

        Ending.new(:cut_short, "process #{recorder.pid} refused to renew it: #{reply["message"]}")
      end

      def why_it_ended(state)
        ended = state.recorder_ended
        reason = ended && ended["id"] == id ? ended["reason"] : "it no longer records it"
        reason += " (the last renewal could not be sent: #{@renew_failure})" if @renew_failure
        reason
      end

      # A renewal that cannot be sent is not the end: the process's state
      # says whether the recording goes on.
      def renew
        recorder.notify("renew", id:)
        @renew_failure = nil
      rescue Error => e
        @renew_failure = e.message
      end

      # The process may have exited meanwhile: then there is nothing to
      # stop. A process that could not be asked is said (#stop_failure),
      # and what was read is written all the same.
      def stop
        recorder.request("stop", recording: id)
      rescue Error => e
        @stop_failure = e.message if recorder.alive?
      end
    end
  end
end
