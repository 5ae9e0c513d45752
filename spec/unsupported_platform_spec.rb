# frozen_string_literal: true

require "open3"

# Where USDT probes cannot be loaded (not Linux x86-64 or aarch64) the gem
# still loads and every call works, as a no-op, after one warning. Run in a
# child that makes the platform look unsupported.
RSpec.describe "On an unsupported platform" do
  it "warns once, and every call is a no-op" do
    script = <<~RUBY
      module StaticTracing::Native
        def self.supported? = false
      end
      StaticTracing.warn_unsupported
      class Controller
        include StaticTracing::LatencyTracer
        def index = :index
      end
      provider = StaticTracing::Provider.register(:elsewhere)
      hello = provider.add_tracepoint(:hello, Integer)
      provider.load
      StaticTracing.enable!
      p [provider.loaded?, provider.path, hello.fire(1), hello.enabled?, Controller.new.index,
         StaticTracing.tracepoint(:elsewhere, :custom, Integer) { 1 },
         StaticTracing.latency(name: :block, provider: :elsewhere) { :ran }]
      StaticTracing::Provider.load(:elsewhere_too)
    RUBY
    stdout, stderr, status = Open3.capture3({ "STATIC_TRACING_MODE" => "off" }, RbConfig.ruby, "-I", E2E::LIB,
                                            "-r", "static_tracing", "-e", script)
    expect(status).to be_success, stderr
    expect(stdout.lines.map(&:chomp)).to eq(["[false, nil, false, false, :index, nil, :ran]"])
    expect(stderr.lines).to eq(["static_tracing: USDT probes are supported on Linux x86-64 and aarch64 only; " \
                                "on #{RUBY_PLATFORM} every tracepoint is a no-op\n"])
  end
end
