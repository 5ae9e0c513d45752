# frozen_string_literal: true

module Bench
  # The example unicorn app under wrk: without the gem at all, then with it
  # disarmed (SIGNAL mode, no signal sent), armed (the worker got SIGTRAP,
  # no tracer) and attached (bpftrace counting every my_controller probe
  # of the worker, with -p as one would, and on the stub file alone). Each
  # round goes through every configuration, so that each is compared with
  # the others moments apart; two servers run throughout, only one is
  # under load at a time.
  #
  #   BENCH_MACRO_SECONDS=3   seconds of wrk for each configuration and round
  class Macro
    KEY = :macro
    ROUNDS = 4
    SECONDS = 3
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

    def initialize(rounds: ROUNDS)
      @rounds = rounds
      @seconds = Integer(ENV.fetch("BENCH_MACRO_SECONDS", SECONDS))
      @notes = []
      @armed = false
    end

    def run
      reason = unavailable_reason
      return skipped_section(reason) if reason

      absent = Unicorn.new(absent_config, log: log("unicorn-absent.log"))
      traced = Unicorn.new(File.join(Unicorn::APP, "config.ru"), log: log("unicorn-traced.log"))
      check_servers(absent, traced)
      [absent, traced].each { |server| wrk(server, WARMUP_SECONDS, "warmup") }
      section(Array.new(@rounds) { |round| run_round(absent, traced, round) })
    ensure
      [absent, traced].compact.each { |server| stop(server) }
    end

    private

    def unavailable_reason
      missing = %w[wrk unicorn].reject { |command| Bench.which(command) }
      "#{missing.join(" and ")} not installed" if missing.any?
    end

    def log(name)
      File.join(WORK_DIR, name)
    end

    # examples/unicorn/app.rb with the gem taken out: the same controller
    # and routes, no require, no include.
    def absent_config
      source = File.read(File.join(Unicorn::APP, "app.rb"))
      edits = [/^require "static_tracing"\n/, /^ *include StaticTracing::LatencyTracer\n/]
      stripped = edits.reduce(source) do |text, pattern|
        text.sub(pattern, "").tap do |result|
          raise "examples/unicorn/app.rb changed: #{pattern.inspect} not found" if result == text
        end
      end
      path = File.join(WORK_DIR, "unicorn-absent", "config.ru")
      FileUtils.mkdir_p(File.dirname(path))
      File.write(path, "#{stripped}\n# examples/unicorn/app.rb without static_tracing, for bench/macro.rb\n" \
                       "run App.new\n")
      path
    end

    def check_servers(absent, traced)
      raise "the gem-absent worker has static_tracing.so mapped" if absent.gem_loaded?
      raise "the traced worker has no static_tracing.so mapped" unless traced.gem_loaded?
      raise "the traced worker is not disarmed: #{traced.get("/tracing")}" unless
        traced.get("/tracing").include?("enabled=false")

      @notes << "gem absent: worker #{absent.worker} has no static_tracing.so mapped; " \
                "traced: worker #{traced.worker} has it, disarmed until SIGTRAP"
    end

    # One pass through the configurations, starting one further each
    # round, so that none is always the one after a toggle or a tracer's
    # start; the traced server is left disarmed.
    def run_round(absent, traced, round)
      order = CONFIGURATIONS.keys.rotate(round)
      results = order.to_h { |key| [key, run_configuration(key, absent, traced, round)] }
      arm(traced, false)
      results
    end

    def run_configuration(key, absent, traced, round)
      return wrk(absent, @seconds, "absent-#{round}") if key == :absent

      arm(traced, key != :disarmed)
      case key
      when :attached then attached(traced, round, pid: traced.worker)
      when :attached_file then attached(traced, round)
      else wrk(traced, @seconds, "#{key}-#{round}")
      end
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
    def attached(traced, round, pid: nil)
      reason = Bpftrace.unavailable_reason
      return { skipped: reason } if reason

      traced.wait_until(10, "bpftrace lists the worker's probes") { Bpftrace.list(PROBES, pid: traced.worker).any? }
      probes = pid ? PROBES : "usdt:#{traced.stub_path("my_controller")}:my_controller:*"
      name = "attached#{"-file" unless pid}-#{round}"
      Bpftrace.attached("#{probes} { @[probe] = count(); }", pid:, log: log("macro-bpftrace-#{name}.log")) do |tracer|
        result = wrk(traced, @seconds, name)
        hits = tracer.finish&.find { |key, _| key.end_with?(":index") }&.last
        result.merge(probe_hits: hits)
      end
    end

    def wrk(server, seconds, name)
      cpu_before = server.worker_cpu_ns
      output = Bench.run_command("wrk", "-t", THREADS.to_s, "-c", CONNECTIONS.to_s, "-d", "#{seconds}s", "--latency",
                                 server.url("/"), log: log("wrk-#{name}.log"), timeout: seconds + 30)
      cpu_ns = server.worker_cpu_ns - cpu_before
      Wrk.parse(output).then { |result| result.merge(worker_cpu_us_per_request: cpu_ns / 1e3 / result[:requests]) }
    end

    def stop(server)
      server.stop("QUIT", timeout: 10)
    rescue StandardError
      server.kill
    end

    def skipped_section(reason)
      section = Section.new(KEY, "Macro: examples/unicorn under wrk")
                       .column(:configuration, "configuration")
      CONFIGURATIONS.each do |key, label|
        section.row({ id: "macro.#{key}", configuration: "#{label}: skipped: #{reason}", skipped: reason })
      end
      section
    end

    def section(rounds)
      MacroSection.new(rounds, seconds: @seconds, notes: @notes).to_section
    end
  end

  # What wrk prints, as numbers.
  module Wrk
    UNITS = { "us" => 1e-3, "ms" => 1.0, "s" => 1e3 }.freeze

    module_function

    def parse(output)
      rate = output[%r{^Requests/sec:\s+([\d.]+)}, 1] or raise "no Requests/sec in wrk output:\n#{output}"
      {
        requests_per_s: Float(rate),
        requests: Integer(output[/(\d+) requests in/, 1]),
        p50_ms: percentile(output, 50),
        p99_ms: percentile(output, 99),
        non_2xx: output[/Non-2xx or 3xx responses: (\d+)/, 1].to_i
      }
    end

    def percentile(output, percent)
      value, unit = output.match(/^\s+#{percent}%\s+([\d.]+)(us|ms|s)$/)&.captures
      value && (Float(value) * UNITS.fetch(unit))
    end
  end
end
