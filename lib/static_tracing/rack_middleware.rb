# frozen_string_literal: true

module StaticTracing
  # Rack middleware firing `usdt:*:rack:request` for each request, with
  # arg0 = method, arg1 = path (SCRIPT_NAME + PATH_INFO, no query string),
  # arg2 = status, arg3 = latency in nanoseconds:
  #
  #   use StaticTracing::RackMiddleware                    # provider rack
  #   use StaticTracing::RackMiddleware, provider: :web    # usdt:*:web:request
  #
  #   bpftrace -p PID -e 'usdt:*:rack:request { printf("%s %s %d %d\n", str(arg0), str(arg1), arg2, arg3); }'
  #
  # The probe is declared when the middleware is built, so its provider
  # loads as the configured mode says, like any tracepoint's. While no
  # tracer is attached a request costs one enabled? check: the clock is
  # not read. The latency is the time spent in the app's #call; a streamed
  # body is not waited for, since the response passes through untouched.
  # A request whose app raises fires with status 500, and the exception
  # propagates unchanged.
  #
  # Each request runs in its W3C trace context (see TraceContext), so that
  # the recorder ties its records to it: the ids of OpenTelemetry's current
  # span where OpenTelemetry's API is loaded and that span is recording,
  # else the trace id and parent id of the request's `traceparent` header
  # (an invalid header is ignored). The context ends when #call returns or
  # raises: a streamed body's records, made after that, have none.
  class RackMiddleware
    PROVIDER = :rack
    PROBE = :request
    TYPES = [String, String, Integer, Integer].freeze
    # The request's duration, in ns.
    LATENCY = 3
    ERROR_STATUS = 500

    attr_reader :tracepoint

    def initialize(app, provider: PROVIDER)
      @app = app
      @tracepoint = Tracepoint.new(provider, PROBE, *TYPES, latency: LATENCY)
    end

    def call(env)
      ids = TraceContext.of_request(env)
      return call_traced(env) unless ids

      StaticTracing.with_trace_context(*ids) { call_traced(env) }
    end

    private

    def call_traced(env)
      return @app.call(env) unless @tracepoint.enabled?

      started = StaticTracing.nsec
      status = ERROR_STATUS
      begin
        response = @app.call(env)
        status = status_of(response)
        response
      ensure
        @tracepoint.fire(env["REQUEST_METHOD"].to_s, "#{env["SCRIPT_NAME"]}#{env["PATH_INFO"]}", status,
                         StaticTracing.nsec - started)
      end
    end

    # Rack says an Integer; some apps give a String. Tracing must not fail
    # the request over it.
    def status_of(response)
      status = response[0] if response.respond_to?(:[])
      status.respond_to?(:to_i) ? status.to_i : 0
    rescue StandardError
      0
    end
  end

  # Runs each request in its W3C trace context (TraceContext.of_request),
  # and does nothing else: what the Rails integration puts first in an
  # app's middleware (RackMiddleware does the same, and fires its probe).
  #
  #   use StaticTracing::TraceContextMiddleware
  class TraceContextMiddleware
    def initialize(app)
      @app = app
    end

    def call(env)
      ids = TraceContext.of_request(env)
      return @app.call(env) unless ids

      StaticTracing.with_trace_context(*ids) { @app.call(env) }
    end
  end

  # Rack apps of the gem: Rack::Metrics, loaded when first named.
  module Rack
    autoload :Metrics, File.expand_path("rack/metrics", __dir__)
  end
end
