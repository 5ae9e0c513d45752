# frozen_string_literal: true

module Bench
  # What loading a provider costs as it grows: the time to generate, write
  # and dlopen its stub, the stub's size, and the cost of growing a loaded
  # provider by one probe (a regenerate-and-reload).
  class Load
    KEY = :load
    ROUNDS = 7
    SIZES = [10, 100, 1_000, 10_000].freeze
    # The size the reload is compared at, and the pair linearity is read from.
    GROWN = 1_000
    LINEAR = [1_000, 10_000].freeze
    # Mixed signatures, so notes carry argument specs of more than one length.
    SIGNATURES = [[Integer], [Integer, String]].freeze

    def initialize(rounds: ROUNDS)
      @rounds = rounds
      @providers = 0
    end

    def run
      names = SIZES.to_h { |size| [size, Array.new(size + 1) { |index| "probe_#{index}" }] }
      cases = SIZES.to_h { |size| [size, -> { measure(names[size]) }] }
      results = Bench.interleave(cases, rounds: @rounds)
      [sizes_section(results), growth_section(results), LoadMemory.new.run]
    end

    private

    # One fresh provider of names.size - 1 probes. Only #load is in
    # load_ns; the declarations and the one-probe growths are timed apart.
    def measure(names)
      *initial, extra = names
      provider = StaticTracing::Provider.register(:"bench_load_#{@providers += 1}")
      *bulk, last = initial
      declare_ns = Bench.call_time_ns { bulk.each_with_index { |name, index| declare(provider, name, index) } }
      declare_last_ns = Bench.call_time_ns { declare(provider, last, bulk.size) }
      load_ns = quiet_time_ns { provider.load }
      bytes = File.size(provider.path)
      reload_ns = quiet_time_ns { declare(provider, extra, initial.size).provider.load }
      { load_ns:, bytes:, reload_ns:, declare_last_ns:,
        declare_ns: declare_ns + declare_last_ns, stub_dir: File.dirname(provider.path) }
    ensure
      provider&.unregister
    end

    def declare(provider, name, index)
      provider.add_tracepoint(name, *SIGNATURES[index % SIGNATURES.size])
    end

    # The previous provider's teardown must not be billed to this timing:
    # its garbage is collected first, and then one large malloc takes the
    # hit of glibc consolidating the thousands of small blocks that freed
    # (measured at +150..500 us on the first load after a 10,000-probe
    # provider went away). Timed by the clock of the call loops: a load
    # does no more than write a file and map it (no fsync), all of it
    # counted in the thread's CPU time, while a neighbour's burst of work
    # would not be.
    def quiet_time_ns(&)
      GC.start
      String.new(capacity: 64 * 1024)
      Bench.call_time_ns(&)
    end

    def series(results, size, key)
      results[size].map { |result| result[key] }
    end

    def sizes_section(results)
      section = Section.new(KEY, "Provider load, fresh provider each time (median of #{@rounds} interleaved rounds)",
                            params: { rounds: @rounds, sizes: SIZES, signatures: SIGNATURES.map(&:inspect),
                                      probe_names: "probe_0, probe_1, ...", clock: Bench.call_clock_name })
      load_columns(section)
      SIZES.each { |size| section.row(size_row(results, size)) }
      section.note("load = Provider#load only (generate, write and dlopen the stub); add +1 = add_tracepoint " \
                   "on the loaded provider (regenerate + reload); declare = the N add_tracepoint calls before load")
      section.note("stubs written to #{results[SIZES.first].first[:stub_dir]}; timed in #{Bench.call_clock_words}")
    end

    def load_columns(section)
      section.column(:probes, "probes", Format.integer)
             .column(:load_ms, "load ms", Format.decimal(3))
             .column(:load_ms_spread, "min..max", Format.range(3))
             .column(:load_us_per_probe, "µs/probe", Format.decimal(2))
             .column(:stub_bytes, "stub bytes", Format.integer)
             .column(:stub_bytes_per_probe, "bytes/probe", Format.integer)
             .column(:reload_ms, "add +1 ms", Format.decimal(3))
             .column(:declare_ms, "declare ms", Format.decimal(2))
             .column(:declare_us_per_probe, "declare µs/probe", Format.decimal(2))
    end

    def size_row(results, size)
      load_ms = series(results, size, :load_ns).map { |ns| ns / 1e6 }
      declare_ms = series(results, size, :declare_ns).map { |ns| ns / 1e6 }
      bytes = Bench.median(series(results, size, :bytes))
      {
        id: "load.#{size}", probes: size, load_ms: Bench.median(load_ms), load_ms_spread: load_ms.minmax,
        load_us_per_probe: Bench.median(load_ms) * 1000 / size,
        stub_bytes: bytes, stub_bytes_per_probe: bytes.fdiv(size),
        reload_ms: Bench.median(series(results, size, :reload_ns)) / 1e6,
        declare_ms: Bench.median(declare_ms), declare_us_per_probe: Bench.median(declare_ms) * 1000 / size,
        load_ms_samples: load_ms.map { |ms| ms.round(4) }
      }
    end

    def growth_section(results)
      section = Section.new(:load_growth, "Provider growth and linearity (ratios are medians of per-round ratios)")
      section.column(:measurement, "measurement")
             .column(:value, "value", Format.auto)
             .column(:unit, "unit")
             .column(:reference, "compared with")
             .column(:reference_value, "its value", Format.auto)
             .column(:ratio, "ratio", Format.ratio)
             .column(:target, "target")
      growth_rows(results).each { |row| section.row(row) }
      section
    end

    def growth_rows(results)
      small, large = LINEAR
      full_load = ["load #{count(GROWN)}", series(results, GROWN, :load_ns)]
      rows = [
        per_probe_row(results, :load_ns, "load per probe"),
        per_probe_row(results, :declare_ns, "declare per probe"),
        comparison(["add 1 probe to loaded #{count(GROWN)} (reload)", series(results, GROWN, :reload_ns)],
                   full_load, "ms"),
        comparison(["add 1 probe to unloaded #{count(GROWN)} (no reload)", series(results, GROWN, :declare_last_ns)],
                   full_load, "ms"),
        comparison(["stub bytes per probe at #{count(large)}", per_probe(results, large, :bytes)],
                   ["at #{count(small)}", per_probe(results, small, :bytes)], "bytes", scale: 1)
      ]
      ids = %w[load_per_probe declare_per_probe reload_one declare_one stub_bytes_per_probe]
      rows.zip(ids).map { |row, id| { id: "growth.#{id}", **row } }
    end

    # Per-probe cost at the large size against the small one: 1.0 is linear.
    def per_probe_row(results, key, what)
      small, large = LINEAR
      comparison(["#{what} at #{count(large)}", per_probe(results, large, key)],
                 ["at #{count(small)}", per_probe(results, small, key)], "µs", scale: 1e3)
        .merge(target: "1.00x (linear)")
    end

    def per_probe(results, size, key)
      series(results, size, key).map { |value| value.fdiv(size) }
    end

    # +subject+ and +reference+ are [label, per-round values]; values are
    # nanoseconds unless +scale+ says what to divide them by for +unit+.
    def comparison(subject, reference, unit, scale: 1e6)
      measurement, values = subject
      reference_label, references = reference
      {
        measurement:, value: Bench.median(values) / scale, unit:,
        reference: reference_label, reference_value: Bench.median(references) / scale,
        ratio: Bench.median_ratio(values, references)
      }
    end

    def count(size)
      Format.integer.call(size)
    end
  end
end
