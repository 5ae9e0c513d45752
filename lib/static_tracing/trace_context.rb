# frozen_string_literal: true

module StaticTracing
  # A W3C trace context (trace id and span id, lowercase hex) that the
  # current thread and fiber is in: the recorder ties every record the
  # fiber makes to it, and `static-tracing report --trace-id` finds them.
  #
  #   StaticTracing.with_trace_context(trace_id, span_id) { work }
  #
  #   context = StaticTracing.set_trace_context(trace_id, span_id)   # a middleware's before
  #   StaticTracing.clear_trace_context(context)                     # ... and after
  #
  # Contexts nest: clearing the inner one puts the outer one back. Each
  # fiber has its own (Thread#[] is fiber-local), so a fiber switch never
  # carries one fiber's context into another's records.
  class TraceContext
    attr_reader :trace_id, :span_id, :thread, :fiber

    def initialize(trace_id, span_id, thread, fiber)
      @trace_id = trace_id
      @span_id = span_id
      @thread = thread
      @fiber = fiber
      freeze
    end

    def to_s
      "trace #{trace_id} span #{span_id}"
    end

    def inspect
      "#<StaticTracing::TraceContext #{self}>"
    end

    # [trace_id, parent_id] of a W3C `traceparent` header (level 1), or nil
    # for a header the specification calls invalid, which is ignored.
    def self.parse_traceparent(header)
      return nil unless header.is_a?(String)

      Native.traceparent(header)
    end

    # The contexts set on the current fiber, innermost last.
    STACK = :__static_tracing_trace_contexts
    private_constant :STACK

    class << self
      def current
        stack.last
      end

      def set(trace_id, span_id)
        trace_id = id_string(trace_id, "trace id")
        span_id = id_string(span_id, "span id")
        Native.trace_context_set(trace_id, span_id)
        context = new(trace_id, span_id, Thread.current, Fiber.current)
        stack << context
        context
      end

      def clear(context)
        unless context.is_a?(TraceContext)
          raise TypeError, "clear_trace_context takes what set_trace_context returned, got #{context.inspect}"
        end

        check_owner(context)
        contexts = stack
        at = contexts.rindex { |each| each.equal?(context) }
        raise TraceContextError, "the #{context} was cleared already" unless at

        if at != contexts.size - 1
          raise TraceContextError, "the #{context} was cleared before the contexts set inside it, still set: " \
                                   "#{contexts[(at + 1)..].map(&:to_s).join(", ")}; clear those first"
        end

        contexts.pop
        restore(contexts.last)
        nil
      end

      # Runs the block in the context, then puts the one before back, also
      # when the block raises. Contexts set inside and left set are cleared
      # too, and that is an error of its own.
      def within(trace_id, span_id)
        context = set(trace_id, span_id)
        begin
          result = yield context
        ensure
          left = unwind(context)
        end
        raise TraceContextError, "contexts set inside the #{context} were left set: #{left.join(", ")}" if left.any?

        result
      end

      private

      def stack
        Thread.current[STACK] ||= []
      end

      def restore(previous)
        if previous
          Native.trace_context_set(previous.trace_id, previous.span_id)
        else
          Native.trace_context_clear
        end
      end

      # Pops +context+ and whatever was set inside it; returns those.
      def unwind(context)
        contexts = stack
        at = contexts.rindex { |each| each.equal?(context) } or return []
        left = contexts.slice!(at..)
        restore(contexts.last)
        left.drop(1).map(&:to_s)
      end

      def check_owner(context)
        return if context.fiber.equal?(Fiber.current)

        where = if context.thread.equal?(Thread.current)
                  "another fiber of this thread"
                else
                  "thread #{context.thread.inspect}"
                end
        raise TraceContextError, "the #{context} was set on #{where}: clear a context on the thread and fiber " \
                                 "that set it (#{Thread.current.inspect} is clearing it)"
      end

      def id_string(value, what)
        return value if value.is_a?(String)

        raise TypeError, "a #{what} is a String of lowercase hex digits, got #{value.inspect}"
      end
    end
  end

  class << self
    # Runs the block in the W3C trace context of +trace_id+ (32 lowercase
    # hex digits) and +span_id+ (16), returning its value: see TraceContext.
    # Bad ids raise ArgumentError, which says the form expected.
    def with_trace_context(trace_id, span_id, &block)
      raise ArgumentError, "with_trace_context needs a block (set_trace_context has none)" unless block

      TraceContext.within(trace_id, span_id, &block)
    end

    # Puts the current fiber in the context until clear_trace_context is
    # given what this returns.
    def set_trace_context(trace_id, span_id)
      TraceContext.set(trace_id, span_id)
    end

    def clear_trace_context(context)
      TraceContext.clear(context)
    end

    # The current fiber's innermost context, or nil.
    def current_trace_context
      TraceContext.current
    end
  end
end
