# frozen_string_literal: true

require "rack"

RSpec.describe StaticTracing::RackMiddleware do
  let(:response) { [200, { "content-type" => "text/plain" }, ["ok"]] }
  let(:app) { ->(_env) { response } }
  let(:env) { Rack::MockRequest.env_for("/items/7?full=1", method: "PATCH", "SCRIPT_NAME" => "/shop") }
  let(:middleware) { described_class.new(app) }

  # As if a tracer were attached to the probe.
  def attach(middleware)
    allow(middleware.tracepoint).to receive(:enabled?).and_return(true)
    allow(middleware.tracepoint).to receive(:fire)
  end

  it "declares rack:request(method, path, status, latency_ns)" do
    tracepoint = middleware.tracepoint
    expect([tracepoint.provider.name, tracepoint.name, tracepoint.types])
      .to eq([:rack, :request, [String, String, Integer, Integer]])
    expect(StaticTracing.providers[:rack].tracepoints[:request]).to equal(tracepoint)
  end

  it "takes another provider: use StaticTracing::RackMiddleware, provider: :web" do
    built = Rack::Builder.new do
      use StaticTracing::RackMiddleware, provider: :rack_spec_web
      run ->(_env) { [204, {}, []] }
    end.to_app
    expect(built.tracepoint.provider.name).to eq(:rack_spec_web)
    expect(Rack::MockRequest.new(built).get("/").status).to eq(204)
  end

  context "when no tracer is attached" do
    it "passes the env and the response through untouched, without reading the clock" do
      seen = nil
      middleware = described_class.new(->(env) { seen = env and response })
      expect(StaticTracing).not_to receive(:nsec)
      expect(middleware.tracepoint).not_to receive(:fire)
      expect(middleware.call(env)).to equal(response)
      expect(seen).to equal(env)
    end

    it "lets the app's exception through unchanged" do
      error = RuntimeError.new("boom")
      middleware = described_class.new(->(_env) { raise error })
      expect(StaticTracing).not_to receive(:nsec)
      expect { middleware.call(env) }.to(raise_error { |raised| expect(raised).to equal(error) })
    end
  end

  context "when a tracer is attached" do
    it "fires method, full path without the query, status and latency, and returns the same response" do
      attach(middleware)
      allow(StaticTracing).to receive(:nsec).and_return(1_000, 251_000)
      expect(middleware.call(env)).to equal(response)
      expect(middleware.tracepoint).to have_received(:fire).with("PATCH", "/shop/items/7", 200, 250_000).once
      expect(StaticTracing).to have_received(:nsec).twice
    end

    it "fires status 500 when the app raises, and lets the exception through unchanged" do
      error = ArgumentError.new("bad")
      middleware = described_class.new(->(_env) { raise error })
      attach(middleware)
      expect { middleware.call(env) }.to(raise_error { |raised| expect(raised).to equal(error) })
      expect(middleware.tracepoint).to have_received(:fire)
        .with("PATCH", "/shop/items/7", 500, be_an(Integer).and(be >= 0)).once
    end

    it "reads the status of a sloppy response without failing the request" do
      sloppy = [["404", {}, []], Object.new, nil]
      middleware = described_class.new(->(_env) { sloppy.first })
      attach(middleware)
      statuses = []
      allow(middleware.tracepoint).to receive(:fire) { |*args| statuses << args[2] }
      until sloppy.empty?
        expect(middleware.call(env)).to equal(sloppy.first)
        sloppy.shift
      end
      expect(statuses).to eq([404, 0, 0])
    end

    it "fires for real through a loaded provider" do
      skip "USDT probes are not supported on #{RUBY_PLATFORM}" unless StaticTracing.supported?

      tracepoint = middleware.tracepoint
      tracepoint.provider.load
      allow(tracepoint).to receive(:enabled?).and_return(true)
      expect(tracepoint).to receive(:fire).and_call_original
      expect(middleware.call(env)).to equal(response)
    end
  end

  describe "the request's trace context" do
    let(:trace_id) { "4bf92f3577b34da6a3ce929d0e0e4736" }
    let(:parent_id) { "00f067aa0ba902b7" }
    let(:seen) { [] }
    let(:app) { ->(_env) { seen << StaticTracing.current_trace_context&.to_s and response } }
    let(:middleware) { described_class.new(app) }

    def with_header(value)
      env.merge("HTTP_TRACEPARENT" => value)
    end

    it "runs the app in the traceparent's trace id and parent id, and ends it with the request" do
      expect(middleware.call(with_header("00-#{trace_id}-#{parent_id}-01"))).to equal(response)
      expect(seen).to eq(["trace #{trace_id} span #{parent_id}"])
      expect(StaticTracing.current_trace_context).to be_nil
    end

    it "ignores a missing or invalid traceparent, and serves the request" do
      [nil, "00-#{trace_id.upcase}-#{parent_id}-01", "00-#{trace_id}-#{parent_id}-01-extra", "garbage"].each do |value|
        expect(middleware.call(value ? with_header(value) : env)).to equal(response)
      end
      expect(seen).to eq([nil] * 4)
    end

    it "ends the context when the app raises, and lets the exception through" do
      failing = described_class.new(->(_env) { raise IOError, "down" })
      expect { failing.call(with_header("00-#{trace_id}-#{parent_id}-01")) }.to raise_error(IOError, "down")
      expect(StaticTracing.current_trace_context).to be_nil
    end

    it "has ended the context by the time a streamed body is read" do
      streamed = Object.new
      streamed.define_singleton_method(:each) { |&block| block.call(StaticTracing.current_trace_context.inspect) }
      middleware = described_class.new(->(_env) { [200, {}, streamed] })
      body = middleware.call(with_header("00-#{trace_id}-#{parent_id}-01"))[2]
      chunks = []
      body.each { |chunk| chunks << chunk }
      expect(chunks).to eq(["nil"])
    end

    # OpenTelemetry's API is not installed here: a stand-in with the shape
    # of its public API (Trace.current_span, Span#recording?, #context,
    # SpanContext#valid?, #hex_trace_id, #hex_span_id).
    context "when OpenTelemetry's API is loaded" do
      let(:otel_trace) { "0af7651916cd43dd8448eb211c80319c" }
      let(:otel_span) { "b7ad6b7169203331" }

      def stand_in(recording:)
        span_context = Struct.new(:hex_trace_id, :hex_span_id) { def valid? = true }.new(otel_trace, otel_span)
        span = Struct.new(:context, :recording) { def recording? = recording }.new(span_context, recording)
        trace = Module.new
        trace.define_singleton_method(:current_span) { span }
        stub_const("OpenTelemetry::Trace", trace)
      end

      it "prefers the current span's ids while it records" do
        stand_in(recording: true)
        middleware.call(with_header("00-#{trace_id}-#{parent_id}-01"))
        expect(seen).to eq(["trace #{otel_trace} span #{otel_span}"])
      end

      it "takes the traceparent when the current span does not record" do
        stand_in(recording: false)
        middleware.call(with_header("00-#{trace_id}-#{parent_id}-01"))
        expect(seen).to eq(["trace #{trace_id} span #{parent_id}"])
      end
    end
  end
end
