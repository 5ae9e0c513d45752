# frozen_string_literal: true

# `rake soak:fleet` (ruby soak/fleet.rb): a fleet under load, as an
# operator runs one (docs/operations.md, "A fleet under load"): puma in
# cluster mode recording from boot with a trigger, StaticTracing::Rack::Metrics
# at /metrics and `static-tracing export` beside it, a real Prometheus
# scraping both every second, wrk loading the app while a worker is
# SIGKILLed every SOAK_KILL_EVERY seconds. Prints a table of what was
# measured; exits 1 when a counter was reset on a live pid, a total is
# off the responses served, or the snapshots passed their budget; 2 when
# it cannot run here (wrk, puma or prometheus missing).
#
#   SOAK_SECONDS=60        how long the load runs
#   SOAK_KILL_EVERY=15     a worker SIGKILLed this often (seconds)
#   SOAK_CONNECTIONS=8     wrk's connections

$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "json"
require "static_tracing"
%w[e2e web_server puma prometheus].each { |name| require_relative "../spec/support/#{name}" }

module Soak
  # The soak's run: see the header.
  class Fleet
    SECONDS = Integer(ENV.fetch("SOAK_SECONDS", 60))
    KILL_EVERY = Float(ENV.fetch("SOAK_KILL_EVERY", 15))
    CONNECTIONS = Integer(ENV.fetch("SOAK_CONNECTIONS", 8))
    MAX_DUMPS = 20
    MAX_DUMP_BYTES = 64 << 20
    RACKUP = <<~RUBY.freeze
      require #{File.join(E2E::Puma::APP, "app").inspect}
      map("/metrics") { run StaticTracing::Rack::Metrics.new }
      run PagesApp.new
    RUBY

    def initialize(root)
      @root = root
      @dumps = File.join(root, "dumps")
      FileUtils.mkdir_p(@dumps)
      @rows = []
      @failures = []
    end

    def run
      puma = start_puma
      export = start_export
      prometheus = E2E::PrometheusServer.new(targets: ["127.0.0.1:#{puma.port}", export], dir: @root)
      started = Time.now.to_f
      prometheus.wait_for_scrape_after(started)
      rss_before = rss(puma.pid)
      responses, kills = load_and_kill(puma)
      prometheus.wait_for_scrape_after(Time.now.to_f + 1)
      measure(prometheus, "[#{(Time.now.to_f - started).ceil + 5}s]", responses, kills)
      @rows << ["master RSS", "#{rss_before / 1024} KiB then #{rss(puma.pid) / 1024} KiB", nil]
      self
    ensure
      [puma, @export, prometheus].compact.each(&:kill)
    end

    def ok? = @failures.empty?

    def to_s
      width = @rows.map { |name, _| name.size }.max
      lines = @rows.map { |name, value, verdict| "#{name.ljust(width)}  #{value}#{verdict && "  #{verdict}"}" }
      (lines + @failures.map { |failure| "FAILED: #{failure}" }).join("\n")
    end

    private

    def start_puma
      rackup = File.join(@root, "config.ru")
      File.write(rackup, RACKUP)
      record = "--flight --size 16M --dump-when 'pages_controller:slow > 4ms' --dump-interval 5 " \
               "--max-dumps #{MAX_DUMPS} --max-dump-bytes #{MAX_DUMP_BYTES} --dump-dir #{@dumps}"
      E2E::Puma.new(rackup:, env: { "STATIC_TRACING_RECORD" => record,
                                    "STATIC_TRACING_DIR" => File.join(@root, "stubs") })
    end

    def start_export
      @export = E2E::Child.new(RbConfig.ruby, File.join(E2E::ROOT, "exe", "static-tracing"), "export",
                               "--listen", "127.0.0.1:0")
      @export.wait_for(%r{ at http://(\S+)/metrics \(Ctrl-C to stop\)$})[1]
    end

    # wrk on / for SECONDS, one request to /slow (a trigger) every 100 ms,
    # a worker killed every KILL_EVERY s. Returns the responses to / and the kills.
    def load_and_kill(puma)
      wrk = E2E::Child.new("wrk", "-t2", "-c#{CONNECTIONS}", "-d#{SECONDS}s", "http://127.0.0.1:#{puma.port}/")
      kills = 0
      deadline = monotonic + SECONDS
      next_kill = monotonic + KILL_EVERY
      while monotonic < deadline - 1
        puma.get("/slow")
        if monotonic >= next_kill
          kill_a_worker(puma)
          kills += 1
          next_kill += KILL_EVERY
        end
        sleep 0.1
      end
      wrk.wait(timeout: SECONDS + 30)
      responses = Integer(wrk.output[/(\d+) requests in/, 1])
      non2xx = Integer(wrk.output[/Non-2xx or 3xx responses: (\d+)/, 1] || 0)
      @rows << ["wrk responses to /", "#{responses} (#{non2xx} not 200)", nil]
      [responses - non2xx, kills]
    end

    def kill_a_worker(puma)
      mark = puma.output.size
      Process.kill("KILL", Integer(puma.output.scan(/- Worker 0 \(PID: (\d+)\) booted/).last[0]))
      puma.wait_for(/- Worker 0 \(PID: \d+\) booted\b/, from: mark, timeout: 60)
    end

    def measure(prometheus, window, responses, kills)
      @rows << ["workers SIGKILLed", kills, nil]
      home = 'static_tracing_probe_calls_total{probe="home"}'
      %w[rack export].each do |job|
        instance = job == "rack" ? "instance!~\".*#{export_port}\"" : "instance=~\".*#{export_port}\""
        resets = sum(prometheus, "resets(#{home.sub("}", ",#{instance}}")}#{window})")
        calls = sum(prometheus, "max_over_time(#{home.sub("}", ",#{instance}}")}#{window})")
        lost = sum(prometheus, "max_over_time(static_tracing_lost_records_total{#{instance}}#{window})")
        # A call is recorded before its response is sent: a response wrk
        # did not count (cut at its end, or its worker killed) may have one.
        verdict = resets.zero? && calls + lost >= responses && calls <= responses + (CONNECTIONS * (kills + 1))
        @rows << ["#{job}: counter resets, calls of / (+ lost) vs responses",
                  "#{resets.to_i} resets; #{calls.to_i} calls + #{lost.to_i} lost against #{responses}",
                  verdict ? "ok" : "NOT OK"]
        @failures << "#{job}: #{resets.to_i} resets, #{calls.to_i} calls, #{lost.to_i} lost" unless verdict
      end
      snapshots
    end

    def snapshots
      files = Dir[File.join(@dumps, "*.trace")]
      bytes = files.sum { |path| File.size(path) }
      within = files.size <= MAX_DUMPS && bytes <= MAX_DUMP_BYTES
      @rows << ["trigger snapshots", "#{files.size} files, #{bytes / 1024} KiB (budget #{MAX_DUMPS}, " \
                                     "#{MAX_DUMP_BYTES >> 20} MiB)", within ? "within" : "NOT WITHIN"]
      @failures << "snapshots past their budget" unless within
    end

    def export_port = @export.output[%r{ at http://\S+:(\d+)/metrics}, 1]

    def sum(prometheus, promql)
      prometheus.values("sum(#{promql})", by: []).fetch([], 0.0)
    end

    def rss(pid) = Integer(File.read("/proc/#{pid}/status")[/^VmRSS:\s*(\d+) kB/, 1]) * 1024

    def monotonic = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end
end

missing = []
missing << "wrk" unless E2E.which("wrk")
missing << E2E::Puma.unavailable_reason if E2E::Puma.unavailable_reason
missing << "prometheus" unless E2E::PrometheusServer.executable
unless missing.empty?
  warn("soak:fleet: cannot run here: #{missing.join(", ")}")
  exit(2)
end
Dir.mktmpdir("static_tracing-fleet") do |root|
  warn("soak:fleet: #{Soak::Fleet::SECONDS}s, a worker killed every #{Soak::Fleet::KILL_EVERY}s")
  fleet = Soak::Fleet.new(root).run
  puts fleet
  exit(fleet.ok? ? 0 : 1)
end
