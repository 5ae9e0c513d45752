# frozen_string_literal: true

module Bench
  # The example unicorn app under wrk: without the gem at all, then with it
  # disarmed (SIGNAL mode, no signal sent), armed (the worker got SIGTRAP,
  # no tracer) and attached (bpftrace counting every my_controller probe
  # of the worker, with -p as one would, and on the stub file alone). Each
  # round goes through every configuration, so that each is compared with
  # the others moments apart; two servers run throughout, only one is
  # under load at a time.
  class Macro < Group
    # wrk and the server it loads run on CPUs of their own.
    ONE_CPU = false
    ROUNDS = 4
    SECONDS = Integer(ENV.fetch("BENCH_MACRO_SECONDS", 3))
    WARMUP_SECONDS = 1
    THREADS = 1
    CONNECTIONS = 4
    CONFIGURATIONS = {
      absent: "gem absent",
      disarmed: "disarmed (SIGNAL mode, no signal)",
      armed: "armed (SIGTRAP sent), unattached",
      attached: "attached (bpftrace -p WORKER, count() on usdt:*:my_controller:*)",
      attached_file: "attached (bpftrace, no -p, count() on usdt:STUB:my_controller:*)"
    }.freeze
    PROBES = "usdt:*:my_controller:*"
    WRK_UNITS = { "us" => 1e-3, "ms" => 1.0, "s" => 1e3 }.freeze
    COLUMNS = {
      configuration: "configuration", requests_per_s: ["req/s", :int], requests_per_s_spread: ["min..max", :r0],
      ratio_to_absent: ["req/s vs absent", :x], p50_ms: ["p50 ms", :d3], p99_ms: ["p99 ms", :d3],
      p99_ms_spread: ["p99 min..max", :r3], p99_ratio_to_absent: ["p99 vs absent", :x],
      cpu_us: ["worker CPU µs/req", :d1], cpu_us_spread: ["min..max", :r1], cpu_ratio_to_absent: ["CPU vs absent", :x],
      cpu_ratio_to_disarmed: ["CPU vs disarmed", :x]
    }.freeze

    def run
      missing = %w[wrk unicorn].reject { |command| Bench.which(command) }
      return skipped_table("#{missing.join(" and ")} not installed") if missing.any?

      absent = Unicorn.new(absent_config, log: work_file("unicorn-absent.log"))
      traced = Unicorn.new(File.join(Unicorn::APP, "config.ru"), log: work_file("unicorn-traced.log"))
      note = check_servers(absent, traced)
      @armed = false
      [absent, traced].each { |server| wrk(server, WARMUP_SECONDS, "warmup") }
      @results = Array.new(rounds) { |round| run_round(absent, traced, round) }
      macro_table(note)
    ensure
      [absent, traced].compact.each { |server| stop(server) }
    end

    private

    def stop(server)
      server.stop("QUIT")
    rescue StandardError
      server.kill
    end

    # examples/unicorn/app.rb with the gem taken out: the same controller
    # and routes, no require, no include.
    def absent_config
      stripped = [/^require "static_tracing"\n/, /^ *include StaticTracing::LatencyTracer\n/]
                 .reduce(File.read(File.join(Unicorn::APP, "app.rb"))) do |text, pattern|
        text.sub(pattern, "").tap do |result|
          raise "examples/unicorn/app.rb changed: #{pattern.inspect} not found" if result == text
        end
      end
      work_file("unicorn-absent/config.ru").tap do |path|
        FileUtils.mkdir_p(File.dirname(path))
        File.write(path, "#{stripped}\n# examples/unicorn/app.rb without static_tracing, for bench/macro.rb\n" \
                         "run App.new\n")
      end
    end

    def check_servers(absent, traced)
      raise "the gem-absent worker has static_tracing.so mapped" if absent.gem_loaded?
      raise "the traced worker has no static_tracing.so mapped" unless traced.gem_loaded?
      raise "the traced worker is not disarmed: #{traced.get("/tracing")}" unless
        traced.get("/tracing").include?("enabled=false")

      "gem absent: worker #{absent.worker} has no static_tracing.so mapped; " \
        "traced: worker #{traced.worker} has it, disarmed until SIGTRAP"
    end

    # One pass through the configurations, starting one further each
    # round, so that none is always the one after a toggle or a tracer's
    # start; the traced server is left disarmed.
    def run_round(absent, traced, round)
      results = CONFIGURATIONS.keys.rotate(round).to_h do |key|
        next [key, wrk(absent, SECONDS, "absent-#{round}")] if key == :absent

        arm(traced, key != :disarmed)
        next [key, attached(traced, round, key == :attached)] if key.start_with?("attached")

        [key, wrk(traced, SECONDS, "#{key}-#{round}")]
      end
      arm(traced, false)
      results
    end

    def arm(traced, armed)
      return if @armed == armed

      traced.toggle_tracing(armed)
      @armed = armed
    end

    # bpftrace on the worker's probes: with -p, as one traces a worker, or
    # on the stub file alone (no -p). With -p, bpftrace opens its uprobes
    # as perf events bound to the task, which the kernel switches in and
    # out with it at every context switch, hit or no hit: a cost of the
    # tracer's, which the file-wide attachment shows apart.
    def attached(traced, round, with_pid)
      Bpftrace.unavailable_reason&.then { |reason| return { skipped: reason } }

      name = "attached#{"-file" unless with_pid}-#{round}"
      Bpftrace.attached(program(traced, with_pid), pid: (traced.worker if with_pid),
                                                   log: work_file("macro-bpftrace-#{name}.log")) do |tracer|
        wrk(traced, SECONDS, name).merge(probe_hits: tracer.finish&.find { |key, _| key.end_with?(":index") }&.last)
      end
    end

    def program(traced, with_pid)
      Bench.wait_until("bpftrace lists the worker's probes", timeout: 10) do
        Bpftrace.list(PROBES, pid: traced.worker).any?
      end
      probes = with_pid ? PROBES : "usdt:#{traced.stub_path("my_controller")}:my_controller:*"
      "#{probes} { @[probe] = count(); }"
    end

    # What wrk measured, as numbers, and the worker's CPU time per request.
    def wrk(server, seconds, name)
      cpu_before = server.worker_cpu_ns
      output = Bench.run_command("wrk", "-t", THREADS.to_s, "-c", CONNECTIONS.to_s, "-d", "#{seconds}s", "--latency",
                                 server.url("/"), log: work_file("wrk-#{name}.log"), timeout: seconds + 30)
      requests = Integer(output[/(\d+) requests in/, 1])
      rate = output[%r{^Requests/sec:\s+([\d.]+)}, 1] or raise "no Requests/sec in wrk output:\n#{output}"
      percentile = lambda do |percent|
        value, unit = output.match(/^\s+#{percent}%\s+([\d.]+)(us|ms|s)$/)&.captures
        value && (Float(value) * WRK_UNITS.fetch(unit))
      end
      { requests_per_s: Float(rate), requests:, p50_ms: percentile.call(50), p99_ms: percentile.call(99),
        non_2xx: output[/Non-2xx or 3xx responses: (\d+)/, 1].to_i,
        worker_cpu_us_per_request: (server.worker_cpu_ns - cpu_before) / 1e3 / requests }
    end

    def skipped_table(reason)
      table = table(:macro, "Macro: examples/unicorn under wrk", **COLUMNS)
      CONFIGURATIONS.each do |key, label|
        table.row(id: "macro.#{key}", configuration: "#{label}: skipped: #{reason}", skipped: reason)
      end
    end

    def macro_table(note)
      table = table(:macro, "Macro: examples/unicorn, 1 worker, under wrk (median of #{rounds} rounds of #{SECONDS} " \
                            "s each)", **COLUMNS, params: { rounds:, seconds: SECONDS, threads: THREADS,
                                                            connections: CONNECTIONS, path: "/", workers: 1 })
      CONFIGURATIONS.each { |key, label| table.row(row(key, label)) }
      [note, *notes].each { |text| table.note(text) }
    end

    def series(key, field) = @results.map { |round| round.fetch(key)[field] }
    def skipped(key) = @results.filter_map { |round| round.fetch(key)[:skipped] }.first
    def ratio(key, field, reference) = Bench.median_ratio(series(key, field), series(reference, field))

    def row(key, label)
      reason = skipped(key) and return { id: "macro.#{key}", configuration: "#{label}: skipped: #{reason}",
                                         skipped: reason }

      rates = series(key, :requests_per_s)
      p99 = series(key, :p99_ms)
      cpu = series(key, :worker_cpu_us_per_request)
      { id: "macro.#{key}", configuration: label, requests_per_s: Bench.median(rates),
        requests_per_s_spread: rates.minmax, ratio_to_absent: ratio(key, :requests_per_s, :absent),
        p50_ms: Bench.median(series(key, :p50_ms)), p99_ms: Bench.median(p99), p99_ms_spread: p99.minmax,
        p99_ratio_to_absent: ratio(key, :p99_ms, :absent), cpu_us: Bench.median(cpu), cpu_us_spread: cpu.minmax,
        cpu_ratio_to_absent: ratio(key, :worker_cpu_us_per_request, :absent),
        cpu_ratio_to_disarmed: key == :absent ? nil : ratio(key, :worker_cpu_us_per_request, :disarmed),
        requests: series(key, :requests), requests_per_s_samples: rates, p99_ms_samples: p99, cpu_us_samples: cpu,
        probe_hits: key.start_with?("attached") ? series(key, :probe_hits) : nil }.compact
    end

    def notes
      non_2xx = CONFIGURATIONS.keys.reject { |key| skipped(key) }.sum { |key| series(key, :non_2xx).sum }
      ["wrk -t#{THREADS} -c#{CONNECTIONS} -d#{SECONDS}s --latency http://127.0.0.1:PORT/ (one traced action a " \
       "request); each round runs every configuration, starting one further than the round before; ratios are " \
       "medians of per-round ratios",
       "non-2xx responses: #{non_2xx}; wrk counts a read error for each connection unicorn closes after its " \
       "response, which is how unicorn answers",
       "worker CPU: CPU time of the worker's threads (/proc/PID/task/*/schedstat) over the requests wrk completed: " \
       "what a request costs the server whatever else runs on the host; vs disarmed compares the same worker " \
       "process in its other states",
       *%i[attached attached_file].reject { |key| skipped(key) }.map do |key|
         hits = series(key, :probe_hits).zip(series(key, :requests))
                                        .map { |count, requests| "#{count || "?"} index hits for #{requests} requests" }
         "#{key}: bpftrace counted #{hits.join(", ")} (wrk does not count the requests still in flight when it stops)"
       end]
    end
  end
end
