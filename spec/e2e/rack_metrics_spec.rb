# frozen_string_literal: true

require "fileutils"
require "net/http"
require "rbconfig"
require "tmpdir"

# StaticTracing::Rack::Metrics in the workers of a real puma in cluster
# mode, each worker recording from boot: whichever worker answers
# /metrics, it serves every worker's counts; and in processes that are no
# server's workers, each its own.
RSpec.describe "StaticTracing::Rack::Metrics", :subprocess do
  let(:root) { Dir.mktmpdir("rack_metrics") }
  let(:stubs) { File.join(root, "stubs") }

  after { FileUtils.rm_rf(root) }

  def mapped?(pid, library)
    File.read("/proc/#{pid}/maps").include?(library)
  end

  it "answers GET and HEAD, in the text format or OpenMetrics as asked, and nothing else" do
    app = StaticTracing::Rack::Metrics.new
    status, headers, body = app.call("REQUEST_METHOD" => "GET")
    expect(status).to eq(200)
    text = body.join
    expect(headers).to eq("content-type" => "text/plain; version=0.0.4; charset=utf-8",
                          "content-length" => text.bytesize.to_s)
    expect(PrometheusText.parse(text).keys).to eq(%w[static_tracing_probe_calls_total
                                                     static_tracing_probe_latency_seconds
                                                     static_tracing_lost_records_total
                                                     static_tracing_ring_refused])
    status, headers, body = app.call("REQUEST_METHOD" => "GET",
                                     "HTTP_ACCEPT" => "application/openmetrics-text;version=1.0.0,*/*;q=0.1")
    expect([status, headers["content-type"]]).to eq([200, "application/openmetrics-text; version=1.0.0; charset=utf-8"])
    expect(PrometheusText.parse(body.join, open_metrics: true).keys).to eq(%w[static_tracing_probe_calls
                                                                              static_tracing_probe_latency_seconds
                                                                              static_tracing_lost_records
                                                                              static_tracing_ring_refused])
    expect(app.call("REQUEST_METHOD" => "HEAD")[2]).to eq([])
    refused = [405, { "content-type" => "text/plain", "allow" => "GET, HEAD" }, ["only GET and HEAD\n"]]
    expect(app.call("REQUEST_METHOD" => "POST")).to eq(refused)
  end

  # The example app, with the metrics at /metrics, saying which worker answered.
  let(:rackup) do
    File.join(root, "config.ru").tap do |path|
      File.write(path, <<~RUBY)
        require #{File.join(E2E::Puma::APP, "app").inspect}
        # When each scrape took its counts, inside the workers' lock: the
        # order in which they happened, whoever answered.
        class StampedMetrics < StaticTracing::Rack::Metrics
          Stamped = Struct.new(:inner) do
            def update
              inner.update do |workers|
                yield(workers).tap { Thread.current[:scraped_at] = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) }
              end
            end
          end

          private

          def tallies = Stamped.new(super)
        end
        # Enough records to lap a 64K ring.
        map "/burst" do
          run(lambda do |_env|
            3000.times { PagesController.new.home }
            [200, { "content-type" => "text/plain" }, ["burst, served by \#{Process.pid}\n"]]
          end)
        end
        metrics = StampedMetrics.new
        map "/metrics" do
          run(lambda do |env|
            status, headers, body = metrics.call(env)
            [status, headers.merge("x-served-by" => Process.pid.to_s,
                                   "x-scraped-at" => Thread.current[:scraped_at].to_s), body]
          end)
        end
        run PagesApp.new
      RUBY
    end
  end

  def recording_puma(size = "1M")
    start_puma(rackup:, env: { "STATIC_TRACING_RECORD" => "--flight --size #{size}", "STATIC_TRACING_DIR" => stubs })
  end

  def get_metrics(puma)
    Net::HTTP.start("127.0.0.1", puma.port, read_timeout: 10) { |http| http.get("/metrics") }
  end

  # +count+ scrapes, 4 at a time, in the order they took their counts:
  # [worker that answered, {pid => slow calls}] each.
  def scrapes(puma, count)
    responses = Array.new(count / 4) { Array.new(4) { Thread.new { get_metrics(puma) } }.map(&:value) }.flatten
    responses.sort_by { |response| Integer(response["x-scraped-at"]) }.map do |response|
      expect(response.code).to eq("200"), response.body
      calls = PrometheusText.values(PrometheusText.parse(response.body), "static_tracing_probe_calls_total",
                                    by: %i[pid probe], provider: "pages_controller")
      slow = calls.select { |(_, probe), _| probe == "slow" }
      [Integer(response["x-served-by"]), slow.to_h { |(pid, _), value| [Integer(pid), value] }]
    end
  end

  it "serves every worker's calls from whichever worker answers, loading its reader only then" do
    puma = recording_puma
    workers = puma.worker_pids
    served = puma.serve_until("/slow") { |pids| (workers - pids).empty? }
    expect(workers.map { |pid| mapped?(pid, "trace_reader.so") }).to eq([false, false])

    expected = workers.to_h { |pid| [[pid.to_s, "slow"], served.count(pid)] }
    answered = []
    until (workers - answered).empty? || answered.size >= 200
      scrapes = Array.new(4) do
        Thread.new { Net::HTTP.start("127.0.0.1", puma.port, read_timeout: 10) { |http| http.get("/metrics") } }
      end
      scrapes.map(&:value).each do |response|
        expect(response.code).to eq("200")
        expect(response["content-type"]).to eq("text/plain; version=0.0.4; charset=utf-8")
        families = PrometheusText.parse(response.body)
        calls = PrometheusText.values(families, "static_tracing_probe_calls_total",
                                      by: %i[pid probe], provider: "pages_controller")
        expect(calls.select { |(_, probe), _| probe == "slow" }).to eq(expected)
        answered << Integer(response["x-served-by"])
      end
    end
    expect(answered.uniq).to match_array(workers)
    expect(workers.map { |pid| mapped?(pid, "trace_reader.so") }).to eq([true, true])
    expect(mapped?(puma.pid, "trace_reader.so")).to be(false)
  end

  # Workers of +puma+ serve calls and are scraped; the first is killed
  # after calls no scrape has seen, +rounds+ times. Each scrape's counters,
  # in the order they were taken, are never lower than the last; each
  # equals the calls served before it; a killed worker's reach its calls.
  # Returns the calls each worker served.
  def kill_workers(puma, rounds)
    @served = Hash.new(0)
    @highest = Hash.new(0)
    @answered = []
    workers = puma.worker_pids
    rounds.times { workers = kill_round(puma, workers) }
    expect(@answered.uniq.size).to be >= 2
    @served
  end

  # One round of #kill_workers; returns the workers after it.
  def kill_round(puma, workers)
    serve_and_scrape(puma, workers)
    # Calls no scrape has seen yet, then the worker is killed.
    killed = workers.first
    mark = puma.output.size
    puma.serve("/slow", requests: 40).each { |pid| @served[pid] += 1 }
    Process.kill("KILL", killed)
    replacement = Integer(puma.wait_for(/- Worker \d \(PID: (\d+)\) booted\b/, from: mark, timeout: 60)[1])
    read_to_its_end(puma, killed)
    [replacement, *workers.drop(1)]
  end

  # A killed worker is read to its end by a worker that held its ring
  # open, and then kept at those counts.
  def read_to_its_end(puma, killed)
    50.times do
      observe(scrapes(puma, 4))
      break if @highest[killed] == @served[killed]
    end
    expect(@highest[killed]).to eq(@served[killed])
    expect(scrapes(puma, 4).map { |_, calls| calls[killed] }).to all(eq(@served[killed]))
  end

  # Every call made before a scrape is in it, whichever worker answered,
  # bursts of other calls lapping the rings between scrapes.
  def serve_and_scrape(puma, workers)
    puma.serve("/slow", requests: 40).each { |pid| @served[pid] += 1 }
    observe(scrapes(puma, 16))
    workers.each { |pid| expect(@highest[pid]).to eq(@served[pid]) }
    bursts = puma.serve_until("/burst", batch: 8, most: 80) { |pids| (workers - pids).empty? }
    expect(bursts.uniq).to match_array(workers)
    observe(scrapes(puma, 8))
    workers.each { |pid| expect(@highest[pid]).to eq(@served[pid]) }
  end

  def observe(results)
    results.each do |by, calls|
      @answered << by
      calls.each do |pid, value|
        expect(value).to be >= @highest[pid], "#{by} answered #{value} calls of #{pid}, after #{@highest[pid]}"
        @highest[pid] = value
      end
    end
  end

  it "keeps each worker's counters the same whichever worker answers and never lower, as workers are killed" do
    # Rings of 2048 records, lapped between scrapes by bursts of calls: a
    # worker that read a ring afresh would find fewer calls than were counted.
    kill_workers(recording_puma("64K"), 3)
  end

  it "shows a real Prometheus no counter reset, and every call served, as workers are killed" do
    puma = recording_puma("64K")
    prometheus = start_prometheus(targets: ["127.0.0.1:#{puma.port}"], dir: root)
    started = Time.now.to_f
    prometheus.wait_for_scrape_after(started)
    served = kill_workers(puma, 3)
    prometheus.wait_for_scrape_after(Time.now.to_f)
    window = "[#{(Time.now.to_f - started).ceil + 5}s]"
    slow = 'static_tracing_probe_calls_total{probe="slow"}'
    expect(prometheus.values("sum(resets(#{slow}#{window}))", by: [])).to eq([] => 0)
    most = prometheus.values("max_over_time(#{slow}#{window})", by: ["pid"]).reject { |_, calls| calls.zero? }
    expect(most).to eq(served.to_h { |pid, calls| [[pid.to_s], calls.to_f] })
    lost = prometheus.values("max_over_time(static_tracing_lost_records_total#{window})", by: %w[pid reason])
    expect(lost.select { |(_, reason), _| reason == "dropped" }.values).to all(eq(0))
  end

  it "serves only its own ring in a process whose parent runs another program" do
    File.write(File.join(root, "work.rb"), sibling_script)
    ruby = "#{RbConfig.ruby} -I #{E2E::LIB} -r static_tracing #{File.join(root, "work.rb")}"
    expect_own_ring_only("bash", "-c", "#{ruby} 3 & #{ruby} 5 & wait")
  end

  # A foreman-like supervisor, itself a Ruby (the same program as the same
  # user), that starts two programs: neither is a worker of the other's
  # server, for all that they are children of one Ruby parent.
  it "serves only its own ring in a program that a Ruby supervisor started beside another" do
    File.write(File.join(root, "work.rb"), sibling_script)
    program = [RbConfig.ruby, "-I", E2E::LIB, "-r", "static_tracing", File.join(root, "work.rb")]
    supervisor = "pids = [3, 5].map { |calls| spawn(*#{program.inspect}, calls.to_s) }; " \
                 "exit(pids.all? { |pid| Process.wait2(pid)[1].success? })"
    expect_own_ring_only(RbConfig.ruby, "-e", supervisor)
  end

  def sibling_script
    <<~'RUBY'
      class SpecRackMetrics
        include StaticTracing::LatencyTracer
        def work = :worked
      end
      Integer(ARGV.first).times { SpecRackMetrics.new.work }
      # Both have recorded before either reads: each says so, then waits for the other.
      File.write(File.join(__dir__, "recorded.#{Process.pid}"), "")
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 20
      sleep 0.01 until Dir.glob(File.join(__dir__, "recorded.*")).size == 2 ||
                       Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      body = StaticTracing::Rack::Metrics.new.call("REQUEST_METHOD" => "GET")[2].join
      puts body.lines.grep(/\Astatic_tracing_probe_calls_total/).map { |line| "#{Process.pid} #{line}" }
    RUBY
  end

  # Runs +command+, whose two programs each print the call series their
  # Rack::Metrics serves: each serves its own, and only its own.
  def expect_own_ring_only(*command)
    parent = E2E::Child.new(*command, env: { "STATIC_TRACING_RECORD" => "--flight --size 64K",
                                             "STATIC_TRACING_DIR" => stubs })
    started_processes << parent
    expect(parent.wait.success?).to be(true), parent.output
    lines = parent.output.lines.grep(/static_tracing_probe_calls_total/)
    expect(lines.size).to eq(2), parent.output
    lines.each do |line|
      pid, series = line.split(" ", 2)
      expect(series).to match(/\{pid="#{pid}",provider="spec_rack_metrics",probe="work"\} [35]\n\z/)
    end
  end
end
