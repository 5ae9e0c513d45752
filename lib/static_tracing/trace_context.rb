# frozen_string_literal: true

module StaticTracing
  # A W3C trace context (trace id and span id, lowercase hex) that the
  # current thread and fiber is in: the recorder ties every record the
  # fiber makes to it, and `static-tracing report --trace-id` finds them.
  #
  #   StaticTracing.with_trace_context(trace_id, span_id) { work }
  #
  #   token = StaticTracing.set_trace_context(trace_id, span_id)   # a middleware's before
  #   StaticTracing.clear_trace_context(token)                     # ... and after
  #
  # Contexts nest: clearing the inner one puts the outer one back. Each
  # fiber has its own, kept by the extension (which checks the nesting), so
  # a fiber switch never carries one fiber's context into another's records.
  # StaticTracing.current_trace_context is one of these, frozen; only the
  # gem makes them.
  TraceContext = Struct.new(:trace_id, :span_id) do
    private_class_method :new, :[]
    undef_method :trace_id=, :span_id=, :[]=

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

    # The current fiber's innermost context, or nil.
    def self.current
      ids = Native.trace_context_current
      ids && new(*ids).freeze
    end
  end

  class << self
    # The extension's, each one native call, so that setting and clearing
    # a context around a request costs no Ruby method between:
    #
    # StaticTracing.with_trace_context(trace_id, span_id) { ... } runs the
    # block in the W3C trace context of +trace_id+ (32 lowercase hex
    # digits) and +span_id+ (16), returning its value, then puts the context
    # before back, also when the block raises, breaks or throws. Bad ids
    # raise ArgumentError, which says the form expected; contexts set inside
    # and left set are cleared too and, when the block returned, raise
    # TraceContextError.
    #
    # StaticTracing.set_trace_context(trace_id, span_id) puts the current
    # fiber in the context until StaticTracing.clear_trace_context is given
    # the token (an Integer) it returned, as OpenTelemetry's Context.attach
    # and detach do: nothing is allocated per request. A context cleared on
    # another thread or fiber, twice, or before contexts set inside it
    # raises TraceContextError and changes nothing.

    # The current fiber's innermost context, a TraceContext, or nil.
    def current_trace_context
      TraceContext.current
    end
  end
end
