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

  it "answers GET and HEAD, in the text format, and nothing else" do
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
    expect(app.call("REQUEST_METHOD" => "HEAD")[2]).to eq([])
    refused = [405, { "content-type" => "text/plain", "allow" => "GET, HEAD" }, ["only GET and HEAD\n"]]
    expect(app.call("REQUEST_METHOD" => "POST")).to eq(refused)
  end

  it "serves every worker's calls from whichever worker answers, loading its reader only then" do
    rackup = File.join(root, "config.ru")
    File.write(rackup, <<~RUBY)
      require #{File.join(E2E::Puma::APP, "app").inspect}
      metrics = StaticTracing::Rack::Metrics.new
      map "/metrics" do
        run(lambda do |env|
          status, headers, body = metrics.call(env)
          [status, headers.merge("x-served-by" => Process.pid.to_s), body]
        end)
      end
      run PagesApp.new
    RUBY
    puma = start_puma(rackup:, env: { "STATIC_TRACING_RECORD" => "--flight --size 1M", "STATIC_TRACING_DIR" => stubs })
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
