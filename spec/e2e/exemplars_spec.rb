# frozen_string_literal: true

require "fileutils"
require "json"
require "net/http"
require "tmpdir"

# From a slow call on a dashboard to its request (docs/fleet.md): a real
# unicorn's two workers, recording from boot, serve requests that carry
# W3C traceparent headers through StaticTracing::RackMiddleware, and serve
# their metrics with StaticTracing::Rack::Metrics to a real Prometheus that
# keeps exemplars. Prometheus then gives the slow request's trace id as the
# exemplar of its probe's latency bucket, with the call's duration, in the
# bucket the report puts that call in; and it scraped without an error.
RSpec.describe "Exemplars in a real Prometheus", :subprocess do
  include CLIHelpers
  include E2E::Recording

  let(:dir) { Dir.mktmpdir("exemplars") }

  after { FileUtils.rm_rf(dir) }

  def traceparent(trace_id, parent_id) = "00-#{trace_id}-#{parent_id}-01"

  # The example app, each request in its trace context, and the metrics.
  def config_ru
    File.join(dir, "config.ru").tap do |path|
      File.write(path, <<~RUBY)
        require #{File.join(E2E::UnicornApp::APP, "app").inspect}
        use StaticTracing::RackMiddleware
        map("/metrics") { run StaticTracing::Rack::Metrics.new }
        map("/") { run App.new }
      RUBY
    end
  end

  # GET +path+ of +unicorn+ with a traceparent; the pid of the worker
  # that served it.
  def get_traced(unicorn, path, trace_id, parent_id)
    Net::HTTP.start("127.0.0.1", unicorn.port, open_timeout: 5, read_timeout: 10) do |http|
      response = http.get(path, "traceparent" => traceparent(trace_id, parent_id))
      expect(response.code).to eq("200")
      Integer(response.body[/served by (\d+)$/, 1])
    end
  end

  def slow_exemplars(prometheus, from)
    prometheus.exemplars('static_tracing_probe_latency_seconds_bucket{probe="slow"}', from:, to: Time.now.to_f + 1)
  end

  it "gives the slow request's trace id as the exemplar of its latency bucket, in the bucket report puts it in" do
    unicorn = start_unicorn(workers: 2, config_ru:, env: { "STATIC_TRACING_RECORD" => "--flight --size 1M" })
    workers = unicorn.worker_pids
    workers.each { |pid| eventually("worker #{pid} records") { published_state(pid).recorder } }
    prometheus = start_prometheus(targets: ["127.0.0.1:#{unicorn.port}"], dir:, features: ["exemplar-storage"])
    started = Time.now.to_f
    prometheus.wait_for_scrape_after(started)

    # Fast requests in traces of their own, on both workers; then one slow one.
    served = []
    until (workers - served).empty? || served.size >= 400
      traces = Array.new(8) { |index| format("%032x", served.size + index + 1) }
      served += traces.map { |trace_id| Thread.new { get_traced(unicorn, "/", trace_id, "0000000000000001") } }
                      .map(&:value)
    end
    expect(served.uniq).to match_array(workers)
    slow_trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    slow_parent = "00f067aa0ba902b7"
    slow_worker = get_traced(unicorn, "/slow", slow_trace, slow_parent)

    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
    until (found = slow_exemplars(prometheus, started)).any?
      raise "no exemplar of a slow call in 30 s" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      prometheus.wait_for_scrape_after(Time.now.to_f)
    end
    expect(found.size).to eq(1)
    series = found.first
    expect(series["seriesLabels"]).to include("pid" => slow_worker.to_s, "provider" => "my_controller",
                                              "probe" => "slow")
    exemplars = series["exemplars"].uniq { |exemplar| [exemplar["labels"], exemplar["value"], exemplar["timestamp"]] }
    expect(exemplars.size).to eq(1)
    exemplar = exemplars.first
    expect(exemplar["labels"]).to eq("trace_id" => slow_trace, "span_id" => slow_parent)

    # The report of the worker's ring finds the same call by its trace id.
    trace = File.join(dir, "slow.trace")
    expect(run_cli("dump", slow_worker, "-o", trace).exitstatus).to eq(0)
    report = run_cli("report", trace, "--trace-id", slow_trace, "--format", "json")
    expect(report.exitstatus).to eq(0), report.stderr
    probe = JSON.parse(report.stdout)["probes"].find { |each| each["probe"] == "my_controller:slow" }
    expect(probe["calls"]).to eq(1)
    call = probe.dig("latency", "slowest").first
    expect(call).to include("trace_id" => slow_trace, "span_id" => slow_parent)
    expect(Float(exemplar["value"])).to be_within(1e-9).of(call["duration_ns"] / 1e9)
    # Its series' bucket is the report's; Prometheus keeps milliseconds of
    # when the call ended.
    expect(Float(series["seriesLabels"]["le"])).to eq(report_bucket_bound(call["duration_ns"]))
    expect(exemplar["timestamp"]).to be_within(0.002).of(call["ended_ns"] / 1e9)

    expect(prometheus.targets.map { |target| target.values_at("health", "lastError") }).to eq([["up", ""]])
  end

  # The upper bound, in seconds, of the report's bucket of +nanoseconds+:
  # 2^k us for the bit length k of its whole microseconds.
  def report_bucket_bound(nanoseconds)
    (2**(nanoseconds / 1000).bit_length) / 1e6
  end
end
