# frozen_string_literal: true

require "rbconfig"

module Bench
  # What loading a provider costs as it grows: the time to generate, write
  # and dlopen its stub, the stub's size, the cost of growing a loaded
  # provider by one probe (a regenerate-and-reload), and resident memory;
  # and what a boot that declares a provider's probes with tracing on costs,
  # declarations and load together.
  class Load < Group
    ROUNDS = 7
    # The boot: this many probes of these types, each round with tracing on
    # and with it off (BOOT_ROUNDS_PER_ROUND rounds for each of the group's).
    BOOT_PROBES = 1_000
    BOOT_TYPES = [Integer, String].freeze
    BOOT_ROUNDS_PER_ROUND = 3
    SIZES = [10, 100, 1_000, 10_000].freeze
    # The size the reload is compared at, and the pair linearity is read from.
    GROWN = 1_000
    LINEAR = [1_000, 10_000].freeze
    # Mixed signatures, so notes carry argument specs of more than one length.
    SIGNATURES = [[Integer], [Integer, String]].freeze
    MEMORY_PROBES = 10_000
    MEMORY_ROUNDS = 3
    # Run in a fresh process, because memory a process has freed is not
    # given back to the kernel reliably: one that loaded providers before
    # would reuse it.
    MEMORY_SCRIPT = <<~'RUBY'
      def snapshot
        GC.start
        status = File.read("/proc/self/status")
        %w[VmRSS RssAnon RssFile].map { |key| Integer(status[/^#{key}:\s+(\d+) kB/, 1]) * 1024 }
      end

      signatures = [[Integer], [Integer, String]]
      provider = StaticTracing::Provider.register(:bench_memory)
      before = snapshot
      Integer(ARGV.fetch(0)).times { |index| provider.add_tracepoint("probe_#{index}", *signatures[index % 2]) }
      declared = snapshot
      provider.load
      puts "MEMORY #{(before + declared + snapshot).join(" ")} #{File.size(provider.path)}"
    RUBY

    def run
      names = SIZES.to_h { |size| [size, Array.new(size + 1) { |index| "probe_#{index}" }] }
      results = Bench.interleave(SIZES.to_h { |size| [size, -> { measure(names[size]) }] }, rounds:)
      @series = ->(size, key) { results[size].map { |result| result[key] } }
      sizes_table(results[SIZES.first].first[:stub_dir])
      growth_table
      boot_table
      memory_table
    end

    private

    # One fresh provider of names.size - 1 probes. Only #load is in
    # load_ns; the declarations and the one-probe growths are timed apart.
    def measure(names)
      *initial, extra = names
      provider = StaticTracing::Provider.register(:"bench_load_#{@providers = (@providers || 0) + 1}")
      *bulk, last = initial
      declare_ns = Bench.call_time_ns { bulk.each_with_index { |name, index| declare(provider, name, index) } }
      declare_last_ns = Bench.call_time_ns { declare(provider, last, bulk.size) }
      load_ns = quiet_time_ns { provider.load }
      bytes = File.size(provider.path)
      reload_ns = quiet_time_ns { declare(provider, extra, initial.size).provider.load }
      { load_ns:, bytes:, reload_ns:, declare_last_ns:, declare_ns: declare_ns + declare_last_ns,
        stub_dir: File.dirname(provider.path) }
    ensure
      provider&.unregister
    end

    def declare(provider, name, index) = provider.add_tracepoint(name, *SIGNATURES[index % SIGNATURES.size])

    # The previous provider's teardown must not be billed to this timing:
    # its garbage is collected first, then one large malloc takes the hit
    # of glibc consolidating the thousands of small blocks that freed
    # (+150..500 us on the first load after a 10,000-probe provider went
    # away). A load writes a file and maps it (no fsync): all of it is in
    # the thread's CPU time, while a neighbour's burst of work is not.
    def quiet_time_ns(&)
      GC.start
      String.new(capacity: 64 * 1024)
      Bench.call_time_ns(&)
    end

    def sizes_table(stub_dir)
      table = table(:load, "Provider load, fresh provider each time (median of #{rounds} interleaved rounds)",
                    params: { rounds:, sizes: SIZES, signatures: SIGNATURES.map(&:inspect),
                              probe_names: "probe_0, probe_1, ...", clock: CLOCK },
                    probes: ["probes", :int], load_ms: ["load ms", :d3], load_ms_spread: ["min..max", :r3],
                    load_us_per_probe: ["µs/probe", :d2], stub_bytes: ["stub bytes", :int],
                    stub_bytes_per_probe: ["bytes/probe", :int], reload_ms: ["add +1 ms", :d3],
                    declare_ms: ["declare ms", :d2], declare_us_per_probe: ["declare µs/probe", :d2])
      SIZES.each { |size| table.row(size_row(size)) }
      table.note("load = Provider#load only (generate, write and dlopen the stub); add +1 = add_tracepoint " \
                 "on the loaded provider (regenerate + reload); declare = the N add_tracepoint calls before load")
      table.note("stubs written to #{stub_dir}; timed in #{CLOCK_WORDS.fetch(CLOCK)}")
    end

    def size_row(size)
      load_ms = @series.call(size, :load_ns).map { |ns| ns / 1e6 }
      declare_ms = Bench.median(@series.call(size, :declare_ns)) / 1e6
      bytes = Bench.median(@series.call(size, :bytes))
      { id: "load.#{size}", probes: size, load_ms: Bench.median(load_ms), load_ms_spread: load_ms.minmax,
        load_us_per_probe: Bench.median(load_ms) * 1000 / size, stub_bytes: bytes,
        stub_bytes_per_probe: bytes.fdiv(size),
        reload_ms: Bench.median(@series.call(size, :reload_ns)) / 1e6, declare_ms:,
        declare_us_per_probe: declare_ms * 1000 / size, load_ms_samples: load_ms.map { |ms| ms.round(4) } }
    end

    def growth_table
      table = table(:load_growth, "Provider growth and linearity (ratios are medians of per-round ratios)",
                    measurement: "measurement", value: ["value", :auto], unit: "unit", reference: "compared with",
                    reference_value: ["its value", :auto], ratio: ["ratio", :x], target: "target")
      full_load = ["load #{count(GROWN)}", @series.call(GROWN, :load_ns)]
      linear = { target: "1.00x (linear)" }
      {
        load_per_probe: [*per_probe(:load_ns, "load per probe"), "µs", 1e3, linear],
        declare_per_probe: [*per_probe(:declare_ns, "declare per probe"), "µs", 1e3, linear],
        reload_one: [["add 1 probe to loaded #{count(GROWN)} (reload)", @series.call(GROWN, :reload_ns)],
                     full_load, "ms", 1e6],
        declare_one: [["add 1 probe to unloaded #{count(GROWN)} (no reload)", @series.call(GROWN, :declare_last_ns)],
                      full_load, "ms", 1e6],
        stub_bytes_per_probe: [*per_probe(:bytes, "stub bytes per probe"), "bytes", 1]
      }.each { |id, comparison| table.row(id: "growth.#{id}", **comparison(*comparison)) }
    end

    # [label, per-probe values] at the large size and at the small one: 1.0 is linear.
    def per_probe(key, what)
      LINEAR.reverse.map do |size|
        ["#{size == LINEAR.last ? "#{what} at" : "at"} #{count(size)}",
         @series.call(size, key).map { |value| value.fdiv(size) }]
      end
    end

    # +subject+ and +reference+ are [label, per-round values]; values are
    # divided by +scale+ for +unit+.
    def comparison((measurement, values), (reference, references), unit, scale, extra = {})
      { measurement:, value: Bench.median(values) / scale, unit:, reference:,
        reference_value: Bench.median(references) / scale, ratio: Bench.median_ratio(values, references), **extra }
    end

    def count(size) = Table.formatter(:int).call(size)

    # BOOT_PROBES declarations into a fresh provider and its load, with
    # tracing on (the mode a boot runs in: the first declaration loads the
    # provider, the others wait for one reload) and off (the load alone),
    # in interleaved rounds.
    def boot_table
      names = Array.new(BOOT_PROBES) { |index| "probe_#{index}" }
      modes = { on: StaticTracing::Configuration::Modes::ON, off: StaticTracing::Configuration::Modes::OFF }
      results = Bench.interleave(modes.transform_values { |mode| -> { boot(names, mode) } },
                                 rounds: rounds * BOOT_ROUNDS_PER_ROUND)
      table = table(:load_boot, "Declaring #{count(BOOT_PROBES)} #{signature} probes into a fresh provider and " \
                                "loading it (median of #{rounds * BOOT_ROUNDS_PER_ROUND} interleaved rounds)",
                    path: "tracing", total_ms: ["total ms", :d3], total_ms_spread: ["min..max", :r3],
                    first_us: ["first declaration µs", :d1], declare_us_per_probe: ["µs/declaration after", :d3],
                    load_ms: ["load ms", :d3], ratio_to_load: ["total / load alone", :x])
      load_alone = results[:off].map { |result| result[:load_ns] }
      modes.each_key { |mode| table.row(boot_row(mode, results[mode], load_alone)) }
      table.note("on: the first declaration loads the provider (a stub of one probe), the others wait for the load " \
                 "after them, which rebuilds it; load alone = the off row's load, same round; names probe_0, ...")
      table.note("a GC before each round, none between its declarations and its load; " \
                 "timed in #{CLOCK_WORDS.fetch(CLOCK)}")
    end

    def signature = StaticTracing::Tracepoint.signature(BOOT_TYPES)

    def boot(names, mode)
      StaticTracing::Configuration.mode = mode
      provider = StaticTracing::Provider.register(:"bench_boot_#{@providers = (@providers || 0) + 1}")
      GC.start
      String.new(capacity: 64 * 1024)
      first, *others = names
      # BOOT_TYPES, as a boot writes them.
      first_ns = Bench.call_time_ns { provider.add_tracepoint(first, Integer, String) }
      others_ns = Bench.call_time_ns { others.each { |name| provider.add_tracepoint(name, Integer, String) } }
      { first_ns:, others_ns:, load_ns: Bench.call_time_ns { provider.load } }
    ensure
      provider&.unregister
      StaticTracing::Configuration.mode = StaticTracing::Configuration::Modes::OFF
    end

    def boot_row(mode, results, load_alone)
      total = results.map { |result| result.values.sum / 1e6 }
      median = ->(key) { Bench.median(results.map { |result| result[key] }) }
      { id: "boot.#{mode}", path: mode.to_s, total_ms: Bench.median(total), total_ms_spread: total.minmax,
        first_us: median.call(:first_ns) / 1e3, declare_us_per_probe: median.call(:others_ns) / 1e3 / (BOOT_PROBES - 1),
        load_ms: median.call(:load_ns) / 1e6, ratio_to_load: Bench.median_ratio(total, load_alone.map { _1 / 1e6 }),
        total_ms_samples: total.map { |ms| ms.round(4) } }
    end

    def memory_table
      results = Array.new(MEMORY_ROUNDS) { |round| memory(round) }
      table = table(:load_memory, "Resident memory per probe, #{count(MEMORY_PROBES)} probes in a fresh process " \
                                  "(median of #{MEMORY_ROUNDS})",
                    params: { probes: MEMORY_PROBES, rounds: MEMORY_ROUNDS }, measurement: "step",
                    rss_bytes_per_probe: ["VmRSS bytes/probe", :int], rss_spread: ["min..max", :r0],
                    anon_bytes_per_probe: ["RssAnon bytes/probe", :int],
                    file_bytes_per_probe: ["RssFile bytes/probe", :int])
      [["memory.declare", "add_tracepoint x #{count(MEMORY_PROBES)}", 0, 1], ["memory.load", "Provider#load", 1, 2],
       ["memory.total", "both", 0, 2]].each { |row| table.row(memory_row(results, *row)) }
      stub_bytes = results.first.last
      table.note("stub file: #{count(stub_bytes)} bytes, #{stub_bytes / MEMORY_PROBES} bytes/probe; GC.start before " \
                 "each reading")
    end

    # [before, declared, loaded] snapshots of [VmRSS, RssAnon, RssFile], and the stub's size.
    def memory(round)
      command = [RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-r", "static_tracing", "-e", MEMORY_SCRIPT,
                 MEMORY_PROBES.to_s]
      output = Bench.run_command(*command, env: { "STATIC_TRACING_MODE" => "off" },
                                           log: work_file("load-memory-#{round}.log"), timeout: 60)
      values = output[/^MEMORY (.*)$/, 1].split.map { |value| Integer(value) }
      [*values.first(9).each_slice(3), values.last]
    end

    def memory_row(results, id, measurement, from, to)
      per_probe = ->(index) { results.map { |result| (result[to][index] - result[from][index]).fdiv(MEMORY_PROBES) } }
      rss = per_probe.call(0)
      { id:, measurement:, rss_bytes_per_probe: Bench.median(rss), rss_spread: rss.minmax,
        anon_bytes_per_probe: Bench.median(per_probe.call(1)), file_bytes_per_probe: Bench.median(per_probe.call(2)),
        samples: rss }
    end
  end
end
