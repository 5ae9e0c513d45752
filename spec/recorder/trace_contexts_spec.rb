# frozen_string_literal: true

require "json"
require "tmpdir"
require "static_tracing/cli"

# A Rack app's requests with W3C traceparent headers, recorded by a live
# process from outside by static-tracing, as an operator runs it: a
# trigger's snapshot of the slow request names its trace, and the reports
# of that snapshot find the request by its trace id. No tracer involved.
RSpec.describe "Trace contexts in a live process's recording", :subprocess do
  include CLIHelpers
  include E2E::Recording

  let(:slow_trace) { "4bf92f3577b34da6a3ce929d0e0e4736" }
  let(:fast_trace) { "0af7651916cd43dd8448eb211c80319c" }
  let(:setup) do
    <<~'RUBY'
      require "rack"
      class ShopController
        include StaticTracing::LatencyTracer
        def index(seconds) = sleep(seconds)
      end
      SHOP = ShopController.new
      APP = Rack::Builder.new do
        use StaticTracing::RackMiddleware
        run ->(env) { SHOP.index(Float(env["QUERY_STRING"])); [200, {}, ["ok"]] }
      end.to_app
      def get(seconds, traceparent = nil)
        env = Rack::MockRequest.env_for("/shop?#{seconds}")
        env["HTTP_TRACEPARENT"] = traceparent if traceparent
        APP.call(env)[0]
      end
    RUBY
  end
  let(:app) { ruby_repl(setup) }
  let(:dir) { Dir.mktmpdir("static_tracing-contexts") }

  after { FileUtils.rm_rf(dir) }

  def traceparent(trace_id, parent = "00f067aa0ba902b7") = "00-#{trace_id}-#{parent}-01"

  it "names the slow request's trace in the trigger's line, and report finds that request by its trace id" do
    result = run_cli("record", app.pid, "shop_controller:*", "--dump-when", "shop_controller:index > 100ms",
                     "--dump-dir", dir, "--size", "1M")
    expect(result.exitstatus).to eq(0), result.stderr
    statuses = app.evaluate(<<~RUBY)
      [get(0.001), get(0.001, "00-#{slow_trace.upcase}-00f067aa0ba902b7-01"), get(0.001, "#{traceparent(fast_trace)}"),
       get(0.15, "#{traceparent(slow_trace)}")]
    RUBY
    expect(statuses).to eq([200] * 4)

    said = app.wait_for(/static_tracing: shop_controller:index took 1\d\dms \(trace (\h+)\) \(.*\): wrote (\S+)$/)
    expect(said[1]).to eq(slow_trace)
    snapshot = said[2]

    only = run_cli("report", snapshot, "--trace-id", slow_trace, "--format", "json")
    expect(only.exitstatus).to eq(0), only.stderr
    index = JSON.parse(only.stdout)["probes"].find { |probe| probe["probe"] == "shop_controller:index" }
    expect(index["calls"]).to eq(1)
    expect(index["latency"]["slowest"].first)
      .to include("trace_id" => slow_trace, "span_id" => "00f067aa0ba902b7", "pid" => app.pid)
    expect(index["latency"]["slowest"].first["duration_ns"]).to be >= 150_000_000

    all = run_cli("report", snapshot)
    expect(all.stdout).to include("shop_controller:index  4 calls")
    slowest = all.stdout.split("\n\n").find { |block| block.start_with?("  slowest:") }.lines.drop(1)
    expect(slowest.first).to match(/\A\s+1\d\dms  process #{app.pid} thread \d+  trace #{slow_trace} span /o)
    # The invalid header (upper case) and no header: no context; never the slow request's.
    expect(slowest.count { |line| line.include?("no trace context") }).to eq(2)
    expect(slowest.count { |line| line.include?(fast_trace) }).to eq(1)
  end

  it "names the slow request's trace in a snapshot whose window starts after the request entered its trace" do
    # One record: the slow call, made when it ended, long after its
    # request's context record; a fast request of another trace just before.
    result = run_cli("record", app.pid, "shop_controller:*", "--dump-when", "shop_controller:index > 100ms",
                     "--dump-dir", dir, "--dump-records", "1", "--size", "1M")
    expect(result.exitstatus).to eq(0), result.stderr
    expect(app.evaluate("[get(0.001, #{traceparent(fast_trace).inspect}), " \
                        "get(0.15, #{traceparent(slow_trace).inspect})]")).to eq([200, 200])

    said = app.wait_for(/static_tracing: shop_controller:index took 1\d\dms \(trace (\h+)\) \(.*\): wrote (\S+)$/)
    expect(said[1]).to eq(slow_trace)
    report = run_cli("report", said[2], "--format", "json")
    expect(report.exitstatus).to eq(0), report.stderr
    index = JSON.parse(report.stdout)["probes"].find { |probe| probe["probe"] == "shop_controller:index" }
    expect(index["calls"]).to eq(1)
    expect(index["latency"]["slowest"].first).to include("trace_id" => slow_trace, "span_id" => "00f067aa0ba902b7")
  end
end
