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
  # fiber has its own, kept by the extension (which checks the nesting), so
  # a fiber switch never carries one fiber's context into another's records.
  class TraceContext
    attr_reader :trace_id, :span_id, :token

    # +token+: what the extension gave for it (nil for a context read back).
    def initialize(trace_id, span_id, token = nil)
      @trace_id = trace_id
      @span_id = span_id
      @token = token
      freeze
    end

    def to_s
      "trace #{trace_id} span #{span_id}"
    end

    def inspect
      "#<StaticTracing::TraceContext #{self}>"
    end

    def ==(other)
      other.is_a?(TraceContext) && other.trace_id == trace_id && other.span_id == span_id
    end
    alias eql? ==

    def hash = [trace_id, span_id].hash

    # [trace_id, parent_id] of a W3C `traceparent` header (level 1), or nil
    # for a header the specification calls invalid, which is ignored.
    def self.parse_traceparent(header)
      return nil unless header.is_a?(String)

      Native.traceparent(header)
    end

    # [trace_id, span_id] a Rack request runs in, or nil: the ids of
    # OpenTelemetry's current span where its API is loaded and that span is
    # recording (through its public API), else the trace id and parent id
    # of the request's `traceparent` header.
    def self.of_request(env)
      open_telemetry_ids || parse_traceparent(env["HTTP_TRACEPARENT"])
    end

    def self.open_telemetry_ids
      return unless defined?(::OpenTelemetry::Trace) && ::OpenTelemetry::Trace.respond_to?(:current_span)

      span = ::OpenTelemetry::Trace.current_span
      context = span.context
      [context.hex_trace_id, context.hex_span_id] if span.recording? && context.valid?
    end
    private_class_method :open_telemetry_ids

    class << self
      # The current fiber's innermost context, or nil.
      def current
        ids = Native.trace_context_current
        new(*ids) if ids
      end

      def set(trace_id, span_id)
        new(trace_id, span_id, Native.trace_context_push(trace_id, span_id))
      end

      def clear(context)
        unless context.is_a?(TraceContext) && context.token
          raise TypeError, "clear_trace_context takes what set_trace_context returned, got #{context.inspect}"
        end

        problem, inner = Native.trace_context_pop(context.token, false)
        raise TraceContextError, message(context, problem, inner) if problem

        nil
      end

      private

      def message(context, problem, inner)
        case problem
        when :other_thread, :other_fiber
          where = problem == :other_thread ? "another thread" : "another fiber of this thread"
          "the #{context} was set on #{where}: clear a context on the thread and fiber that set it"
        when :popped then "the #{context} was cleared already"
        when :inner
          "the #{context} was cleared before the contexts set inside it, still set: #{inner.join(", ")}; " \
          "clear those first"
        end
      end
    end
  end

  class << self
    # StaticTracing.with_trace_context(trace_id, span_id) { ... } is the
    # extension's (one call, the block yielded from there): it runs the
    # block in the W3C trace context of +trace_id+ (32 lowercase hex
    # digits) and +span_id+ (16), returning its value, then puts the context
    # before back, also when the block raises. Bad ids raise ArgumentError,
    # which says the form expected; contexts set inside and left set are
    # cleared too, and raise TraceContextError.

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
