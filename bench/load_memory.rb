# frozen_string_literal: true

require "rbconfig"

module Bench
  # Resident memory per probe: a fresh Ruby process declares PROBES probes
  # and loads them, reading /proc/self/status before and after each step.
  # Fresh, because memory a process has freed is not given back to the
  # kernel reliably: one that loaded providers before would reuse it.
  class LoadMemory
    PROBES = 10_000
    ROUNDS = 3
    KEYS = %w[VmRSS RssAnon RssFile].freeze

    SCRIPT = <<~'RUBY'
      def snapshot
        GC.start
        status = File.read("/proc/self/status")
        %w[VmRSS RssAnon RssFile].map { |key| Integer(status[/^#{key}:\s+(\d+) kB/, 1]) * 1024 }
      end

      count = Integer(ARGV.fetch(0))
      signatures = [[Integer], [Integer, String]]
      provider = StaticTracing::Provider.register(:bench_memory)
      before = snapshot
      count.times { |index| provider.add_tracepoint("probe_#{index}", *signatures[index % signatures.size]) }
      declared = snapshot
      provider.load
      loaded = snapshot
      puts "MEMORY #{(before + declared + loaded).join(" ")} #{File.size(provider.path)}"
    RUBY

    def initialize(rounds: ROUNDS)
      @rounds = rounds
    end

    def run
      results = Array.new(@rounds) { |round| measure(round) }
      section = Section.new(:load_memory, "Resident memory per probe, #{Format.integer.call(PROBES)} probes " \
                                          "in a fresh process (median of #{@rounds})",
                            params: { probes: PROBES, rounds: @rounds })
      section.column(:measurement, "step")
             .column(:rss_bytes_per_probe, "VmRSS bytes/probe", Format.integer)
             .column(:rss_spread, "min..max", Format.range(0))
             .column(:anon_bytes_per_probe, "RssAnon bytes/probe", Format.integer)
             .column(:file_bytes_per_probe, "RssFile bytes/probe", Format.integer)
      rows(results).each { |row| section.row(row) }
      section.note(format("stub file: %<bytes>s bytes, %<per>d bytes/probe; GC.start before each reading",
                          bytes: Format.integer.call(results.first[:stub_bytes]),
                          per: results.first[:stub_bytes] / PROBES))
    end

    private

    def measure(round)
      command = [RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-r", "static_tracing", "-e", SCRIPT, PROBES.to_s]
      output = Bench.run_command(*command, env: { "STATIC_TRACING_MODE" => "off" },
                                           log: File.join(WORK_DIR, "load-memory-#{round}.log"), timeout: 60)
      values = output[/^MEMORY (.*)$/, 1].split.map { |value| Integer(value) }
      before, declared, loaded = values.first(9).each_slice(3).map { |slice| KEYS.zip(slice).to_h }
      { before:, declared:, loaded:, stub_bytes: values.last }
    end

    def rows(results)
      [row("memory.declare", "add_tracepoint x #{Format.integer.call(PROBES)}", results, :before, :declared),
       row("memory.load", "Provider#load", results, :declared, :loaded),
       row("memory.total", "both", results, :before, :loaded)]
    end

    def row(id, measurement, results, from, to)
      per_probe = ->(key) { results.map { |result| (result[to][key] - result[from][key]).fdiv(PROBES) } }
      rss = per_probe.call("VmRSS")
      { id:, measurement:, rss_bytes_per_probe: Bench.median(rss), rss_spread: rss.minmax,
        anon_bytes_per_probe: Bench.median(per_probe.call("RssAnon")),
        file_bytes_per_probe: Bench.median(per_probe.call("RssFile")), samples: rss }
    end
  end
end
