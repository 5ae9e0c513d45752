# frozen_string_literal: true

require "fileutils"
require "rbconfig"
require "socket"
require "static_tracing/cli"
require "tmpdir"

# `static-tracing export` scraped by a real Prometheus server while a real
# unicorn's two workers, recording from boot, serve requests; what
# Prometheus then answers agrees with `static-tracing report` of the same
# rings dumped: the counts exactly, each p99 within one bucket.
RSpec.describe "Prometheus scraping static-tracing export", :subprocess do
  include CLIHelpers
  include E2E::Recording

  let(:dir) { Dir.mktmpdir("prometheus") }

  after { FileUtils.rm_rf(dir) }

  def start_export(*pids)
    @export = E2E::Child.new(RbConfig.ruby, E2E::Recording::EXE, "export", "--listen", "127.0.0.1:0",
                             *pids.map(&:to_s))
    started_processes << @export
    @export.wait_for(%r{ at http://(\S+)/metrics \(Ctrl-C to stop\)$})[1]
  end

  # Nanoseconds of a duration as the report shows it: "999ns", "1.5us", "12.3ms".
  def nanoseconds(text)
    number, unit = text.match(/\A([\d.]+)(ns|us|ms|s)\z/).captures
    Float(number) * { "ns" => 1, "us" => 1e3, "ms" => 1e6, "s" => 1e9 }.fetch(unit)
  end

  # The report's power-of-two bucket of a duration, as its histogram
  # counts it: the bit length of its whole microseconds.
  def report_bucket(nanoseconds)
    micros = (nanoseconds / 1000).floor
    micros.positive? ? micros.bit_length : 0
  end

  # The bucket whose upper bound histogram_quantile's answer (in seconds)
  # lies under: it interpolates within (lower, upper].
  def quantile_bucket(seconds)
    micros = seconds * 1e6
    micros <= 1 ? 0 : Math.log2(micros).ceil
  end

  # Prometheus's own client (keep-alive, a 1 s scrape timeout) against a
  # peer that holds every slot of export's server with connections that
  # send nothing, opening a new one as soon as one is closed.
  it "scrapes every time while idle connections hold every slot of export's server" do
    address = start_export
    host, port = address.split(":")
    slots = StaticTracing::CLI::MetricsServer::MAX_CONNECTIONS
    stop = false
    hog = Thread.new do
      sockets = Array.new(slots) { TCPSocket.new(host, Integer(port)) }
      until stop
        sockets.map! do |socket|
          next socket unless socket.wait_readable(0) # closed (or answered) by export

          socket.close
          TCPSocket.new(host, Integer(port))
        end
        sleep 0.02
      end
    ensure
      sockets&.each(&:close)
    end
    prometheus = start_prometheus(targets: [address], dir:)
    scraped = prometheus.wait_for_scrape_after(Time.now.to_f)
    first = scraped
    8.times { scraped = prometheus.wait_for_scrape_after(scraped) }

    window = "#{(scraped - first).ceil + 1}s"
    up = prometheus.values(%(min_over_time(up{job="static_tracing"}[#{window}])), by: [], time: scraped)
    expect(up).to eq([] => 1.0)
    expect(hog).to be_alive
  ensure
    stop = true
    hog&.join(5)
  end

  it "answers PromQL with the counts the report gives, and each p99 within one bucket" do
    unicorn = start_unicorn(workers: 2, env: { "STATIC_TRACING_RECORD" => "--flight --size 1M" })
    workers = unicorn.worker_pids
    workers.each { |pid| eventually("worker #{pid} records") { published_state(pid).recorder } }
    address = start_export(*workers)
    prometheus = start_prometheus(targets: [address], dir:)
    prometheus.wait_for_scrape_after(Time.now.to_f)

    # Requests in rounds, scraped in between and while they run.
    index = unicorn.serve_until("/") { |pids| (workers - pids).empty? }
    slow = []
    4.times do
      index += unicorn.serve("/", requests: 100)
      slow += unicorn.serve("/slow", requests: 20)
      10.times { unicorn.get("/items/7") }
      sleep 0.3
    end
    scraped = prometheus.wait_for_scrape_after(Time.now.to_f)
    # One scrape more: a record still being written at the one before
    # would be read by this one.
    scraped = prometheus.wait_for_scrape_after(scraped)

    selector = %(job="static_tracing",provider="my_controller")
    by_pid = prometheus.values("static_tracing_probe_calls_total{#{selector}}", by: %w[pid probe], time: scraped)
    totals = prometheus.values("sum by (probe) (static_tracing_probe_calls_total{#{selector}})",
                               by: %w[probe], time: scraped)
    lost = prometheus.values(%(sum(static_tracing_lost_records_total{job="static_tracing"})), by: [], time: scraped)
    p99 = %w[index slow show].to_h do |probe|
      query = "histogram_quantile(0.99, sum by (le) " \
              "(static_tracing_probe_latency_seconds_bucket{#{selector},probe=\"#{probe}\"}))"
      [probe, prometheus.values(query, by: [], time: scraped).fetch([])]
    end

    traces = workers.map do |pid|
      path = File.join(dir, "#{pid}.trace")
      result = run_cli("dump", pid, "-o", path)
      expect(result.exitstatus).to eq(0), result.stderr
      path
    end
    report = run_cli("report", *traces)
    expect(report.exitstatus).to eq(0), report.stderr

    workers.zip(traces).each do |pid, trace|
      recorded = recorded_calls(read_trace(trace)).transform_keys do |label|
        [pid.to_s, label.delete_prefix("my_controller:")]
      end
      exported = by_pid.select { |(each, _), calls| each == pid.to_s && calls.positive? }
      expect(exported).to eq(recorded), @export.output
      expect(by_pid.values_at([pid.to_s, "index"], [pid.to_s, "slow"])).to eq([index.count(pid), slow.count(pid)])
    end
    reported = reported_calls(report.stdout).transform_keys { |label| [label.delete_prefix("my_controller:")] }
    expect(totals).to eq(reported.transform_values(&:to_f))
    expect(totals).to include(%w[index] => index.size, %w[slow] => 80, %w[show] => 40)
    expect(lost).to eq([] => 0)

    percentiles = report.stdout.scan(/^my_controller:(\w+)  \d+ calls?, p50 \S+, p90 \S+, p99 (\S+),/)
    expect(percentiles.map(&:first)).to match_array(%w[index show slow])
    percentiles.each do |probe, shown|
      distance = quantile_bucket(p99.fetch(probe)) - report_bucket(nanoseconds(shown))
      expect(distance.abs).to be <= 1, "#{probe}: PromQL p99 #{p99[probe]}s, the report's #{shown}"
    end
  end
end
