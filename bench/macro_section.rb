# frozen_string_literal: true

module Bench
  # The table of the macro benchmark, from its rounds of wrk results.
  class MacroSection
    def initialize(rounds, seconds:, notes:)
      @rounds = rounds
      @seconds = seconds
      @notes = notes
    end

    def to_section
      section = Section.new(Macro::KEY, "Macro: examples/unicorn, 1 worker, under wrk " \
                                        "(median of #{@rounds.size} rounds of #{@seconds} s each)",
                            params:)
      columns(section)
      Macro::CONFIGURATIONS.each { |key, label| section.row(row(key, label)) }
      notes.each { |note| section.note(note) }
      section
    end

    private

    def params
      { rounds: @rounds.size, seconds: @seconds, threads: Macro::THREADS, connections: Macro::CONNECTIONS,
        path: "/", workers: 1 }
    end

    def columns(section)
      section.column(:configuration, "configuration")
             .column(:requests_per_s, "req/s", Format.integer)
             .column(:requests_per_s_spread, "min..max", Format.range(0))
             .column(:ratio_to_absent, "req/s vs absent", Format.ratio)
             .column(:p50_ms, "p50 ms", Format.decimal(3))
             .column(:p99_ms, "p99 ms", Format.decimal(3))
             .column(:p99_ms_spread, "p99 min..max", Format.range(3))
             .column(:p99_ratio_to_absent, "p99 vs absent", Format.ratio)
             .column(:cpu_us, "worker CPU µs/req", Format.decimal(1))
             .column(:cpu_us_spread, "min..max", Format.range(1))
             .column(:cpu_ratio_to_absent, "CPU vs absent", Format.ratio)
             .column(:cpu_ratio_to_disarmed, "CPU vs disarmed", Format.ratio)
    end

    def series(key, field)
      @rounds.map { |round| round.fetch(key)[field] }
    end

    def row(key, label)
      skipped = @rounds.map { |round| round.fetch(key)[:skipped] }.compact.first
      return { id: "macro.#{key}", configuration: "#{label}: skipped: #{skipped}", skipped: } if skipped

      rates = series(key, :requests_per_s)
      p99 = series(key, :p99_ms)
      cpu = series(key, :worker_cpu_us_per_request)
      {
        id: "macro.#{key}", configuration: label,
        requests_per_s: Bench.median(rates), requests_per_s_spread: rates.minmax,
        ratio_to_absent: Bench.median_ratio(rates, series(:absent, :requests_per_s)),
        p50_ms: Bench.median(series(key, :p50_ms)), p99_ms: Bench.median(p99), p99_ms_spread: p99.minmax,
        p99_ratio_to_absent: Bench.median_ratio(p99, series(:absent, :p99_ms)),
        cpu_us: Bench.median(cpu), cpu_us_spread: cpu.minmax,
        cpu_ratio_to_absent: cpu_ratio(cpu, :absent),
        cpu_ratio_to_disarmed: key == :absent ? nil : cpu_ratio(cpu, :disarmed),
        requests: series(key, :requests), requests_per_s_samples: rates, p99_ms_samples: p99, cpu_us_samples: cpu,
        probe_hits: key.start_with?("attached") ? series(key, :probe_hits) : nil
      }.compact
    end

    def cpu_ratio(cpu, reference)
      Bench.median_ratio(cpu, series(reference, :worker_cpu_us_per_request))
    end

    def notes
      measured = Macro::CONFIGURATIONS.keys.reject { |key| @rounds.first.fetch(key)[:skipped] }
      non_2xx = measured.sum { |key| series(key, :non_2xx).sum }
      @notes + [
        "wrk -t#{Macro::THREADS} -c#{Macro::CONNECTIONS} -d#{@seconds}s --latency http://127.0.0.1:PORT/ " \
        "(one traced action a request); each round runs every configuration, starting one further than the round " \
        "before; ratios are medians of per-round ratios",
        "non-2xx responses: #{non_2xx}; wrk counts a read error for each connection unicorn closes after " \
        "its response, which is how unicorn answers",
        "worker CPU: CPU time of the worker's threads (/proc/PID/task/*/schedstat) over the requests wrk " \
        "completed: what a request costs the server whatever else runs on the host; vs disarmed compares " \
        "the same worker process in its other states",
        *%i[attached attached_file].filter_map { |key| hits_note(key) }
      ]
    end

    def hits_note(key)
      return if @rounds.first.fetch(key)[:skipped]

      pairs = series(key, :probe_hits).zip(series(key, :requests))
      "#{key}: bpftrace counted #{pairs.map { |hits, requests| "#{hits || "?"} index hits for #{requests} requests" }
        .join(", ")} (wrk does not count the requests still in flight when it stops)"
    end
  end
end
