# frozen_string_literal: true

module Bench
  class Recorder
    # W3C trace contexts (StaticTracing.with_trace_context): a recorded call
    # in a context next to the same call outside any, in the same rounds;
    # setting and clearing a context while nothing records (the block form,
    # and the set/clear pair a middleware uses, beside a plain method that
    # yields and two C methods that do nothing: the floors of either
    # form), then while a recording runs, alone and around a recorded call
    # (whose first record in a new context writes the thread's context
    # record).
    class Contexts
      PROVIDER = :bench_recorder_contexts
      PATTERNS = ["#{PROVIDER}:*".freeze].freeze
      TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
      SPAN_ID = "00f067aa0ba902b7"
      IN_CONTEXT = "fire(Integer) recorded, in a trace context"
      IDLE = "with_trace_context { } (nothing records)"
      PAIR = "set_trace_context + clear_trace_context (nothing records)"
      YIELDS = "a method that yields { } (for scale)"
      C_CALLS = "two C methods that do nothing (for scale)"

      def initialize(group)
        @group = group
        registered = StaticTracing::Provider.register(group.provider(PROVIDER))
        @tracepoint = registered.add_tracepoint(:int, Integer)
        registered.load
      end

      def run
        idle = @group.time_loops(
          [with_trace_context_loop(IDLE),
           Loop.new(PAIR, "StaticTracing.clear_trace_context(StaticTracing.set_trace_context(trace_id, span_id))",
                    trace_id: TRACE_ID, span_id: SPAN_ID),
           Loop.new(YIELDS, "receiver.with_yield { }", receiver: Recorder.target_class.new),
           Loop.new(C_CALLS, "receiver.frozen?; receiver.to_s", receiver: nil)]
        )
        StaticTracing::Recorder.start(probes: PATTERNS, flight: true)
        loops = [Loop.call("fire(Integer) recorded", @tracepoint, :fire, 42),
                 Loop.call(IN_CONTEXT, @tracepoint, :fire, 42),
                 with_trace_context_loop("with_trace_context { } (recording)"),
                 Loop.new("with_trace_context { fire(Integer) } (recording)",
                          "StaticTracing.with_trace_context(trace_id, span_id) { receiver.fire(42) }",
                          trace_id: TRACE_ID, span_id: SPAN_ID, receiver: @tracepoint)]
        recording = @group.time_loops(loops, around: in_context)
        table(idle, recording)
      ensure
        StaticTracing::Recorder.stop
      end

      private

      def with_trace_context_loop(label)
        Loop.new(label, "StaticTracing.with_trace_context(trace_id, span_id) { }", trace_id: TRACE_ID,
                                                                                   span_id: SPAN_ID)
      end

      # The IN_CONTEXT loop runs in one context, set before it is timed.
      def in_context
        lambda do |loop, &run|
          next run.call unless loop.label == IN_CONTEXT

          StaticTracing.with_trace_context(TRACE_ID, SPAN_ID, &run)
        end
      end

      def table(idle, recording)
        table = @group.add_table(:recorder_contexts, "Trace contexts (median of #{@group.rounds} interleaved rounds)",
                                 measurement: "measurement", ns_per_call: ["ns/call", :d1],
                                 spread_ns: ["min..max", :r1], compared_with: "compared with", ratio: ["ratio", :x])
        idle_rows(table, idle)
        plain, in_context, set_clear, around_fire = recording_rows(recording)
        table.row(plain)
        table.row(in_context.merge(compared_with: plain[:measurement],
                                   ratio: recording.ratio(in_context[:measurement], plain[:measurement])))
        table.row(set_clear.merge(compared_with: IDLE, ratio: set_clear[:ns_per_call] / idle.median(IDLE)))
        table.row(around_fire.merge(compared_with: "#{plain[:measurement]} + #{IDLE}",
                                    ratio: (around_fire[:ns_per_call] - plain[:ns_per_call]) / idle.median(IDLE)))
        notes(table)
      end

      def idle_rows(table, idle)
        { "contexts.set_clear_idle" => IDLE, "contexts.set_clear_pair_idle" => PAIR,
          "contexts.yielding_method" => YIELDS, "contexts.two_c_calls" => C_CALLS }.each do |id, label|
          table.row(id:, measurement: label, **idle.timing(label))
        end
      end

      def recording_rows(recording)
        [["contexts.fire_int", "fire(Integer) recorded"], ["contexts.fire_int_in_context", IN_CONTEXT],
         ["contexts.set_clear_recording", "with_trace_context { } (recording)"],
         ["contexts.set_clear_around_fire", "with_trace_context { fire(Integer) } (recording)"]]
          .map { |id, label| { id:, measurement: label, **recording.timing(label) } }
      end

      def notes(table)
        table.note("targets: a recorded call in a context at most 1.05x one outside any (same rounds); setting " \
                   "and clearing a context (either form) at most 100 ns while nothing records, at most 2x that " \
                   "while recording; a method that yields and two C methods that do nothing are no targets, but what " \
                   "the block form and the pair cost at least on the machine")
        table.note("the last row's ratio is what a context set and cleared around a recorded call adds to that " \
                   "call (its context record included), over set+clear while nothing records; the two phases " \
                   "(nothing recording, then one flight recording of #{PATTERNS.first}) are timed apart, as a " \
                   "recording cannot run for some rounds only")
        table.note("a record in a context tells its fiber by its #{fiber_key}")
      end

      # What the extension reads to tell fibers apart (see
      # ext/static_tracing/src/fibers.rs): the in-context row depends on it.
      def fiber_key
        StaticTracing::Native.fiber_key_kind || "nothing yet: no context was set"
      end
    end
  end
end
