# frozen_string_literal: true

require "fileutils"
require "net/http"
require "rbconfig"
require "socket"
require "static_tracing/cli"
require "tmpdir"

# `static-tracing export`: Prometheus metrics of recording processes, read
# from their rings at each scrape, served over HTTP; the reader's tally
# (TraceReader::Tally) on rings laid out byte by byte; the command against
# real recording processes.
RSpec.describe "static-tracing export" do
  let(:trace_file) { StaticTracing::CLI::TraceFile }

  def parse(text)
    PrometheusText.parse(text)
  end

  def calls(families, **labels)
    PrometheusText.values(families, "static_tracing_probe_calls_total", by: %i[pid probe], **labels)
  end

  describe "TraceReader::Tally" do
    let(:tally_class) { trace_file.reader::Tally }

    def ring(**options)
      RingImage.new(slot_count: 16, **options).tap do |image|
        image.add_probe("app", "index", [:Integer], latency_arg: 0)
        image.add_probe("app", "hits", [:String])
      end
    end

    it "counts each call once across scrapes, in histograms of the report's buckets, and writes nothing" do
      image = ring
      tally = tally_class.new("ring")
      [500, 1500, 1_500_000].each { |ns| image.append(0, [ns]) }
      image.append(1, ["x"])
      expect(tally.scrape(image.io)).to eq(4)
      expect(tally.scrape(image.io)).to eq(0)
      image.append(0, [3000])
      before = image.bytes.dup
      expect(tally.scrape(image.io)).to eq(1)
      expect(image.bytes).to eq(before)

      families = parse(tally_class.exposition([[42, tally]], nil).last)
      expect(families.keys).to eq(%w[static_tracing_probe_calls_total static_tracing_probe_latency_seconds
                                     static_tracing_lost_records_total static_tracing_ring_refused])
      expect(calls(families)).to eq(%w[42 index] => 4, %w[42 hits] => 1)
      buckets = PrometheusText.values(families, "static_tracing_probe_latency_seconds_bucket", by: [:le])
      expect(buckets.values_at(%w[1e-06], %w[2e-06], %w[0.001024], %w[0.002048], %w[4e-06], %w[+Inf]))
        .to eq([1, 2, 3, 4, 3, 4])
      expect(PrometheusText.values(families, "static_tracing_probe_latency_seconds_sum", by: [:probe]))
        .to eq(%w[index] => 0.001505)
      expect(tally.probe_list.map { |probe| probe.first(3) }).to eq([["app", "index", 4], ["app", "hits", 1]])
    end

    it "counts what a flight ring overwrote between scrapes as lost, exactly" do
      image = ring(overwrite: true)
      tally = tally_class.new("ring")
      3.times { image.append(0, [1000]) }
      expect(tally.scrape(image.io)).to eq(3)
      40.times { image.append(0, [1000]) }
      expect(tally.scrape(image.io)).to eq(16)
      expect(tally.lost).to eq([0, 40 - 16])
      families = parse(tally_class.exposition([[7, tally]], nil).last)
      expect(PrometheusText.values(families, "static_tracing_lost_records_total", by: [:reason]))
        .to eq(%w[dropped] => 0, %w[overwritten] => 24)
      expect(calls(families)).to eq(%w[7 index] => 19, %w[7 hits] => 0)
    end

    it "names the ring in the error of a scrape that cannot read it" do
      image = ring
      image[:version] = 9
      expect { tally_class.new("my.ring").scrape(image.io) }
        .to raise_error(trace_file::FormatError, /\Amy\.ring: format version/)
    end
  end

  describe "the command line" do
    it "needs --listen HOST:PORT and PIDs that are numbers" do
      expect(cli("export").stderr).to include("missing --listen HOST:PORT")
      expect(cli("export", "--listen", "localhost").stderr).to include("--listen takes HOST:PORT")
      expect(cli("export", "--listen", "127.0.0.1:70000").exitstatus).to eq(2)
      expect(cli("export", "--listen", "127.0.0.1:0", "x1").stderr)
        .to include('PID must be a positive integer, got "x1"')
    end

    it "refuses an address in use in one line" do
      taken = TCPServer.new("127.0.0.1", 0)
      port = taken.addr[1]
      result = cli("export", "--listen", "127.0.0.1:#{port}")
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to eq("static-tracing: cannot listen on 127.0.0.1:#{port}: Address already in use\n")
    ensure
      taken&.close
    end

    # docs/fleet.md: ":PORT for every interface", IPv6 as IPv4.
    it "listens on every interface, IPv6 and IPv4, for :PORT" do
      skip "no IPv6 loopback here" unless Socket.ip_address_list.any?(&:ipv6_loopback?)

      server = StaticTracing::CLI::MetricsServer.new(nil, 0) { ["text/plain", ""] }
      port = Integer(server.address[/\d+\z/])
      expect(server.address).to eq("[::]:#{port}")
      %w[127.0.0.1 ::1].each do |host|
        expect { TCPSocket.new(host, port).close }.not_to raise_error
      end
    ensure
      server&.close
    end

    it "refuses a PID with no process in one line" do
      pid = dead_pid
      result = cli("export", "--listen", "127.0.0.1:0", pid)
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to start_with("static-tracing: no process with PID #{pid}")
    end
  end

  describe "serving processes that record", :subprocess do
    let(:root) { Dir.mktmpdir("export") }
    let(:stubs) { File.join(root, "stubs") }

    after { FileUtils.rm_rf(root) }

    worker = <<~'RUBY'
      class SpecExport
        include StaticTracing::LatencyTracer
        def work = :worked
      end
      $stdout.sync = true
      puts "ready"
      while (line = $stdin.gets)
        count, mark, trace_id, span_id = line.split
        work = proc { Integer(count).times { SpecExport.new.work } }
        trace_id ? StaticTracing.with_trace_context(trace_id, span_id, &work) : work.call
        puts "called #{mark}"
      end
    RUBY

    # A Ruby child that records from boot (STATIC_TRACING_RECORD=+record+)
    # and calls SpecExport#work when told to, in a trace context if given.
    define_method(:worker_script) { worker }

    def recording_process(record = "--flight --size 64K")
      ruby_process(worker_script, env: { "STATIC_TRACING_RECORD" => record, "STATIC_TRACING_DIR" => stubs })
        .tap { |child| child.wait_for(/^ready$/) }
    end

    def call_work(child, count, context = [])
      @marks = (@marks || 0) + 1
      child.puts([count, @marks, *context].join(" "))
      child.wait_for(/^called #{@marks}$/)
    end

    def start_export(*args)
      command = E2E::Child.new(RbConfig.ruby, CLIHelpers::EXE, "export", "--listen", "127.0.0.1:0", *args.map(&:to_s))
      started_processes << command
      @address = command.wait_for(%r{ at http://(\S+)/metrics \(Ctrl-C to stop\)$})[1]
      command
    end

    def get(path = "/metrics", headers = {})
      Net::HTTP.start(*@address.split(":"), open_timeout: 5, read_timeout: 10) { |http| http.get(path, headers) }
    end

    def scrape
      response = get
      expect(response.code).to eq("200")
      expect(response["Content-Type"]).to eq("text/plain; version=0.0.4; charset=utf-8")
      parse(response.body)
    end

    def ring_of(child)
      StaticTracing::CLI::ProcessState.new(child.pid).read.recorder.fetch("ring")
    end

    it "serves each process's calls and latencies, each call once, counting on across scrapes" do
      first, second = Array.new(2) { recording_process }
      call_work(first, 30)
      call_work(second, 10)
      export = start_export(first.pid, second.pid)
      expect(export.output).to include("Serving metrics of processes #{first.pid}, #{second.pid} at http://")

      families = scrape
      expect(calls(families)).to eq([first.pid.to_s, "work"] => 30, [second.pid.to_s, "work"] => 10)
      counts = PrometheusText.values(families, "static_tracing_probe_latency_seconds_count", by: [:pid])
      expect(counts).to eq([first.pid.to_s] => 30, [second.pid.to_s] => 10)

      call_work(first, 5)
      expect(calls(scrape)).to eq([first.pid.to_s, "work"] => 35, [second.pid.to_s, "work"] => 10)
      expect(calls(scrape)).to eq([first.pid.to_s, "work"] => 35, [second.pid.to_s, "work"] => 10)
    end

    # What Prometheus 2 sends (Prometheus 3 ranks the formats the same way).
    prometheus_accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;" \
                        "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"

    it "serves OpenMetrics to a scraper that asks for it, each latency bucket with its latest call's trace" do
      child = recording_process
      trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
      span_id = "00f067aa0ba902b7"
      started = Time.now.to_f
      call_work(child, 5, [trace_id, span_id])
      # Outside any context: counted, and never an exemplar.
      call_work(child, 3)
      start_export(child.pid)

      response = get("/metrics", "Accept" => prometheus_accept)
      expect(response["Content-Type"]).to eq("application/openmetrics-text; version=1.0.0; charset=utf-8")
      families = PrometheusText.parse(response.body, open_metrics: true)
      expect(calls(families)).to eq([child.pid.to_s, "work"] => 8)
      expect(families.fetch("static_tracing_probe_latency_seconds").unit).to eq("seconds")
      exemplars = PrometheusText.exemplars(families, "static_tracing_probe_latency_seconds_bucket", by: [:le])
      expect(exemplars).not_to be_empty
      bounds = PrometheusText.values(families, "static_tracing_probe_latency_seconds_bucket", by: [:le])
                             .keys.map { |(le)| PrometheusText.number(le) }
      exemplars.each do |(le), exemplar|
        expect(exemplar.labels).to eq("trace_id" => trace_id, "span_id" => span_id)
        upper = PrometheusText.number(le)
        lower = bounds.select { |bound| bound < upper }.max || 0
        # In the report's bucket: at least its lower bound, below its upper.
        expect(exemplar.value).to be >= lower
        expect(exemplar.value).to be < upper
        expect(exemplar.timestamp).to be_between(started, Time.now.to_f)
      end

      # Any other scraper gets the text format, without exemplars.
      [{}, { "Accept" => "text/plain;version=0.0.4" }].each do |headers|
        response = get("/metrics", headers)
        expect(response["Content-Type"]).to eq("text/plain; version=0.0.4; charset=utf-8")
        expect(calls(parse(response.body))).to eq([child.pid.to_s, "work"] => 8)
        expect(response.body).not_to include("trace_id")
      end
    end

    it "counts what a ring lost, dropped or overwritten, exactly, and never writes to a ring" do
      flight = recording_process("--flight --size 64K")
      filled = recording_process("--size 64K")
      call_work(flight, 100)
      export = start_export(flight.pid, filled.pid)
      expect(calls(scrape)).to eq([flight.pid.to_s, "work"] => 100, [filled.pid.to_s, "work"] => 0)

      # 2048 slots each: the flight ring keeps the newest 2048 of 5100
      # records; the other one drops what does not fit.
      call_work(flight, 5000)
      call_work(filled, 3000)
      families = scrape
      expect(calls(families)).to eq([flight.pid.to_s, "work"] => 2148, [filled.pid.to_s, "work"] => 2048)
      lost = PrometheusText.values(families, "static_tracing_lost_records_total", by: %i[pid reason])
      expect(lost).to eq([flight.pid.to_s, "dropped"] => 0, [flight.pid.to_s, "overwritten"] => 2952,
                         [filled.pid.to_s, "dropped"] => 952, [filled.pid.to_s, "overwritten"] => 0)
      expect(File.binread(ring_of(filled), 8, 320).unpack1("Q<")).to eq(0)
      expect(export.output.lines.grep(/static-tracing:/)).to eq([])
    end

    it "reads a process that exits to its last record, killed or not, serves that once, then drops its series" do
      staying, killed, ended = Array.new(3) { recording_process }
      export = start_export("--keep-exited", 0, staying.pid, killed.pid, ended.pid)
      [killed, ended].each { |child| call_work(child, 10) }
      expect(calls(scrape)).to include([killed.pid.to_s, "work"] => 10, [ended.pid.to_s, "work"] => 10)
      # Calls after the last scrape, then the process is gone: SIGKILLed
      # (its ring left behind), or exited (its ring removed as it exits).
      [killed, ended].each { |child| call_work(child, 500) }
      killed.kill
      ended.stop("TERM")
      families = scrape
      expect(calls(families)).to eq([staying.pid.to_s, "work"] => 0, [killed.pid.to_s, "work"] => 510,
                                    [ended.pid.to_s, "work"] => 510)
      lost = PrometheusText.values(families, "static_tracing_lost_records_total", by: %i[pid reason])
      expect(lost.values.sum).to eq(0)
      expect(calls(scrape).keys.map(&:first)).to eq([staying.pid.to_s])
      # Said on stderr as the scrape is answered: read once it arrives.
      [killed, ended].each do |child|
        said = "static-tracing: process #{child.pid} exited: read its ring to its end; its series go at the next scrape"
        expect(export.wait_for(/^#{Regexp.escape(said)}$/, timeout: 10)[0]).to eq(said)
      end
    end

    it "with no PID, finds each process of its user that records at each scrape, new ones from 0, keeps those gone" do
      before = recording_process
      call_work(before, 3)
      start_export
      expect(calls(scrape)).to include([before.pid.to_s, "work"] => 3)
      after = recording_process
      call_work(after, 4)
      expect(calls(scrape)).to include([before.pid.to_s, "work"] => 3, [after.pid.to_s, "work"] => 4)
      call_work(after, 5)
      after.kill
      # Read to its end, then kept at its last counts (--keep-exited, 60 s).
      expect(calls(scrape)).to include([after.pid.to_s, "work"] => 9)
      expect(calls(scrape)).to include([after.pid.to_s, "work"] => 9)
    end

    it "refuses a process that does not record in one line, before it serves" do
      idle = ruby_process(worker_script, env: { "STATIC_TRACING_DIR" => stubs })
      idle.wait_for(/^ready$/)
      result = run_cli("export", "--listen", "127.0.0.1:0", idle.pid)
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to eq("static-tracing: process #{idle.pid} is not recording " \
                                  "(static-tracing record #{idle.pid} --flight)\n")
    end

    it "answers only GET /metrics; a client that sends nothing, or too much, does not hold it up" do
      export = start_export(recording_process.pid)
      expect(get("/").code).to eq("404")
      expect(get("/metrics?x=1").code).to eq("200")
      Net::HTTP.start(*@address.split(":")) do |http|
        response = http.post("/metrics", "")
        expect(response.code).to eq("405")
        expect(response["Allow"]).to eq("GET, HEAD")
      end

      host, port = @address.split(":")
      silent = TCPSocket.new(host, Integer(port))
      silent.write("GET /met")
      garbage = TCPSocket.new(host, Integer(port))
      garbage.write("HELLO\r\n\r\n")
      huge = TCPSocket.new(host, Integer(port))
      huge.write("GET /metrics HTTP/1.1\r\nX: #{"y" * 10_000}\r\n\r\n")
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      expect(get.code).to eq("200")
      expect(Process.clock_gettime(Process::CLOCK_MONOTONIC) - started).to be < 2
      expect(garbage.read).to start_with("HTTP/1.1 400 Bad Request\r\n")
      expect(huge.read).to start_with("HTTP/1.1 431 ")
      # The silent one is answered once its time is up.
      expect(silent.read).to start_with("HTTP/1.1 408 Request Timeout\r\n")

      Process.kill("TERM", export.pid)
      expect(export.wait(timeout: 10).exitstatus).to eq(0)
    ensure
      [silent, garbage, huge].each { |socket| socket&.close }
    end

    # docs/fleet.md: "none can hold the others up". Connections that send
    # nothing, as many as the server serves at once and opened again as
    # they close, never keep a scraper (a keep-alive client, as
    # Prometheus's) out: each takes the place of the oldest idle one.
    it "serves every scrape while idle connections take every slot, again and again" do
      export = start_export(recording_process.pid)
      host, port = @address.split(":")
      idle = []
      limit = StaticTracing::CLI::MetricsServer::MAX_CONNECTIONS
      codes = Array.new(8) do
        idle.concat(Array.new(limit) { TCPSocket.new(host, Integer(port)) })
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        code = get.code
        expect(Process.clock_gettime(Process::CLOCK_MONOTONIC) - started).to be < 2
        code
      end
      expect(codes).to eq(["200"] * 8)
      expect(export.alive?).to be(true)
    ensure
      idle&.each(&:close)
    end

    it "ends at Ctrl-C with status 0" do
      export = start_export(recording_process.pid)
      Process.kill("INT", export.pid)
      expect(export.wait(timeout: 10).exitstatus).to eq(0)
    end
  end
end
