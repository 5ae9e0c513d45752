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
end
