# frozen_string_literal: true

module Bench
  # The host's physical floor for an attached probe: a C program calling a
  # `nop; ret` stub in a tight loop, timed without a uprobe, then with
  # bpftrace counting on it; and the same for a stub on the 5-byte NOP
  # (`nopl 0x0(%rax,%rax,1); ret`, what a static_tracing probe site is on
  # x86-64), whose uprobe kernels that optimize uprobes turn into a call to
  # a trampoline instead of an int3 trap. Whatever an attached tracepoint
  # costs above the difference is this library's own. The nop5 stub is also
  # probed three calls down from the loop, where Tracepoint#fire's site is
  # from the interpreter's (a hit costs more the more returns follow it).
  # Attached calls of this process are timed in the same rounds, for the
  # targets' ratios. With it, the two clock reads a latency probe adds.
  class Floor < Group
    ROUNDS = 11
    SAMPLE_MS = 25
    # Calls a sample: about 25 ms each on this kind of host, unprobed at
    # about 1 ns a call, probed at about 1 µs.
    PLAIN_CALLS = 20_000_000
    PROBED_CALLS = 30_000
    PROBED = "bench_probed_stub"
    PROBED_NOP5 = "bench_probed_nop5_stub"
    PROBED_DEEP = "bench_probed_nop5_deep_stub"
    # What each round's line gives, in order, ns/call.
    COLUMNS = %i[plain nop1 nop5 nop5_deep].freeze
    # The probed columns: the stub bpftrace probes, the call timed, its
    # rows' ids (no bpftrace, bpftrace attached, the hit: their difference)
    # and what the hit is.
    STUBS = {
      nop1: { stub: PROBED, call: "C nop1 stub call", ids: %w[stub.unprobed stub.probed stub.uprobe],
              hit: "nop1 uprobe hit, the kernel's floor" },
      nop5: { stub: PROBED_NOP5, call: "C nop5 stub call",
              ids: %w[stub.nop5_unprobed stub.nop5_probed stub.uprobe_nop5], hit: "nop5 uprobe hit" },
      nop5_deep: { stub: PROBED_DEEP, call: "C nop5 stub called three calls down",
                   ids: %w[stub.nop5_deep_unprobed stub.nop5_deep_probed stub.uprobe_nop5_deep],
                   hit: "nop5 uprobe hit three calls down" }
    }.freeze

    # Four stubs, so that every round times the probed ones and an
    # unprobed one moments apart in the same process; calls go through
    # volatile pointers so the compiler keeps every one of them.
    SOURCE = <<~C.freeze
      #include <stdio.h>
      #include <stdlib.h>
      #include <time.h>

      __asm__(".text\\n"
              ".globl bench_plain_stub\\n.type bench_plain_stub, @function\\n"
              "bench_plain_stub:\\n nop\\n ret\\n.size bench_plain_stub, .-bench_plain_stub\\n"
              ".globl #{PROBED}\\n.type #{PROBED}, @function\\n"
              "#{PROBED}:\\n nop\\n ret\\n.size #{PROBED}, .-#{PROBED}\\n"
              ".globl #{PROBED_NOP5}\\n.type #{PROBED_NOP5}, @function\\n"
              "#{PROBED_NOP5}:\\n .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\\n ret\\n"
              ".size #{PROBED_NOP5}, .-#{PROBED_NOP5}\\n"
              ".globl #{PROBED_DEEP}\\n.type #{PROBED_DEEP}, @function\\n"
              "#{PROBED_DEEP}:\\n .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\\n ret\\n"
              ".size #{PROBED_DEEP}, .-#{PROBED_DEEP}\\n");
      void bench_plain_stub(void);
      void #{PROBED}(void);
      void #{PROBED_NOP5}(void);
      void #{PROBED_DEEP}(void);

      /* #{PROBED_DEEP} called three calls down: after its hit come four
         returns to the loop, as after Tracepoint#fire's (the site, the
         extension's method, two frames of the VM's C-method call). The empty
         asm after each call keeps it from being a tail call. */
      static void (*volatile deep_stub)(void) = #{PROBED_DEEP};
      __attribute__((noinline)) void bench_down1(void) { deep_stub(); __asm__ volatile("" ::: "memory"); }
      __attribute__((noinline)) void bench_down2(void) { bench_down1(); __asm__ volatile("" ::: "memory"); }
      __attribute__((noinline)) void bench_down3(void) { bench_down2(); __asm__ volatile("" ::: "memory"); }

      static clockid_t clock_id;

      static long long now_ns(void) {
        struct timespec t;
        clock_gettime(clock_id, &t);
        return t.tv_sec * 1000000000LL + t.tv_nsec;
      }

      static double per_call_ns(void (*volatile stub)(void), long calls) {
        long long start = now_ns();
        for (long i = 0; i < calls; i++) stub();
        return (double)(now_ns() - start) / calls;
      }

      /* rounds plain_calls probed_calls cpu|wall: one line a round, ns/call of each stub */
      int main(int argc, char **argv) {
        if (argc != 5) return 2;
        clock_id = argv[4][0] == 'c' ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
        int rounds = atoi(argv[1]);
        long plain_calls = atol(argv[2]), probed_calls = atol(argv[3]);
        for (int round = 0; round < rounds; round++) {
          double plain = per_call_ns(bench_plain_stub, plain_calls);
          double probed = per_call_ns(#{PROBED}, probed_calls);
          double probed_nop5 = per_call_ns(#{PROBED_NOP5}, probed_calls);
          double probed_deep = per_call_ns(bench_down3, probed_calls);
          printf("round %d %.4f %.4f %.4f %.4f\\n", round, plain, probed, probed_nop5, probed_deep);
        }
        return 0;
      }
    C

    # The attached calls timed in the probed run's rounds, beside the C
    # program's: a provider of their own, and a LatencyTracer m0().
    ATTACHED = :bench_floor_attached
    TRACED = :bench_floor_traced
    # Attached call => the C program's probed call it is compared with.
    RATIOS = [%i[fire_int nop5], %i[fire_int nop5_deep], %i[fire_int nop1], %i[latency nop1], %i[latency nop5]].freeze

    def run
      binary = compile
      unprobed = run_binary(binary, "floor-unprobed.log")
      probed, hits, attached = probed_run(binary)
      stub_table(unprobed, probed, hits, binary)
      attached_table(probed, attached) if attached
      clock_table
    end

    private

    def compile
      source = work_file("uprobe_floor.c")
      binary = work_file("uprobe_floor")
      FileUtils.mkdir_p(WORK_DIR)
      File.write(source, SOURCE)
      Bench.run_command("gcc", "-O2", "-o", binary, source, log: work_file("floor-gcc.log"), timeout: 60)
      binary
    end

    # Per round, COLUMNS => ns/call, the warm-up round dropped.
    def run_binary(binary, log_name, rounds: self.rounds)
      output = Bench.run_command(binary, (rounds + 1).to_s, PLAIN_CALLS.to_s, PROBED_CALLS.to_s, CLOCK,
                                 log: work_file(log_name), timeout: 120)
      output.scan(/^round \d+((?: \S+){#{COLUMNS.size}})$/).drop(1).map do |(values)|
        COLUMNS.zip(values.split.map { |value| Float(value) }).to_h
      end
    end

    # The same program with bpftrace counting on the probed stubs (the
    # uprobes are on the binary, so they hold for every process to come),
    # run a round at a time; after each, in the same moments, this process's
    # attached calls (AttachedCalls), with a second bpftrace counting them.
    # Returns the C rounds, the C hits (counted by stub, as the probed
    # COLUMNS name them), and the attached calls; [nil, nil, nil] where
    # bpftrace cannot run.
    def probed_run(binary)
      program = STUBS.map { |key, stub| "uprobe:#{binary}:#{stub[:stub]} { @#{key} = count(); }" }.join(" ")
      Bpftrace.attached(program, log: work_file("floor-bpftrace.log")) do |tracer|
        next [nil, nil, nil] unless tracer

        AttachedCalls.measure(ATTACHED, TRACED, log: work_file("floor-attached-bpftrace.log")) do |attached|
          results = Bench.interleave({ c: -> { run_binary(binary, "floor-probed.log", rounds: 1).first },
                                       ruby: -> { attached.sample(PROBED_CALLS) } }, rounds:)
          [results[:c], tracer.finish&.values_at(*STUBS.keys.map(&:to_s)), attached.finish(results[:ruby])]
        end
      end
    end

    def stub_table(unprobed, probed, hits, binary)
      table = table(:floor, "Physical floor: C `nop; ret` and `nop5; ret` stubs called in a loop, uprobe " \
                            "(median of #{rounds} rounds)",
                    params: { rounds:, plain_calls: PLAIN_CALLS, probed_calls: PROBED_CALLS, binary:, clock: CLOCK },
                    measurement: "measurement", ns_per_call: ["ns/call", :auto], spread_ns: ["min..max", :r2])
      stub_rows(unprobed, probed).each { |row| table.row(row) }
      table.note("the probed run has bpftrace `uprobe:BINARY:STUB { @ = count(); }` attached to #{PROBED} " \
                 "(1-byte nop), #{PROBED_NOP5} (5-byte nopl 0x0(%rax,%rax,1)) and #{PROBED_DEEP} (the same, " \
                 "called three calls down: four returns after the hit, as after Tracepoint#fire's); the same " \
                 "stubs and loop are run once without bpftrace, then once with it")
      table.note(hits_note(hits)) if probed
    end

    # The probed stubs without and with the uprobe, same calls, same loop,
    # and the hit (the difference); the other stub of the probed run shows
    # the uprobe costs nothing to code beside it.
    def stub_rows(unprobed, probed)
      without = stub_series(unprobed, 0, "no bpftrace")
      unless probed
        reason = Bpftrace.unavailable_reason
        return without + [{ id: "stub.uprobe", measurement: "uprobe hit: skipped: #{reason}", skipped: reason }]
      end

      with = stub_series(probed, 1, "bpftrace count() attached")
      hits = STUBS.values.zip(without, with).map do |stub, unprobed_row, probed_row|
        { id: stub[:ids][2], measurement: "#{stub[:hit]}: attached - no bpftrace (medians)",
          ns_per_call: probed_row[:ns_per_call] - unprobed_row[:ns_per_call] }
      end
      other = series_row("stub.other_in_probed_run", "C stub call, the other stub of the probed run",
                         probed.map { |round| round.fetch(:plain) })
      without + with + [other] + hits
    end

    # A row for each probed stub from +rounds+, by its id number +which+.
    def stub_series(rounds, which, words)
      STUBS.map do |column, stub|
        series_row(stub[:ids][which], "#{stub[:call]}, #{words}", rounds.map { |round| round.fetch(column) })
      end
    end

    # The attached calls beside the C program's probed calls of the same
    # rounds, and their ratios round by round: what the targets read.
    def attached_table(probed, attached)
      samples, count_note = attached
      table = table(:attached_floor, "Attached calls and the C program's probed calls, the same rounds " \
                                     "(median of #{rounds} rounds)",
                    measurement: "measurement", value: ["ns/call or ratio", :auto], spread: ["min..max", :r2])
      AttachedCalls::LOOPS.each do |name, label|
        row = series_row("attached.#{name}", "#{label}, bpftrace count() attached", samples.fetch(name))
        table.row(row.merge(value: row[:ns_per_call], spread: row[:spread_ns]))
      end
      RATIOS.each do |(name, column)|
        ratios = samples.fetch(name).zip(probed).map { |ns, round| ns / round.fetch(column) }
        measurement = "#{AttachedCalls::LOOPS[name]} / #{STUBS.dig(column, :call)}, bpftrace attached"
        ratio = Bench.median(ratios)
        table.row({ id: "ratio.#{name}.#{column}", measurement:, value: ratio, ratio:, spread: ratios.minmax,
                    samples: ratios.map { _1.round(4) } })
      end
      table.note("each round runs the C program (one warm-up round, one timed) and then times these calls in " \
                 "this process, #{PROBED_CALLS} each, net of an empty loop; ratios are medians of per-round ratios")
      table.note(count_note)
    end

    def series_row(id, measurement, values)
      { id:, measurement:, ns_per_call: Bench.median(values), spread_ns: values.minmax,
        samples_ns: values.map { |value| value.round(3) } }
    end

    # The probed run is rounds + 1 runs (the first a warm-up) of two rounds
    # (a warm-up and a timed one) each.
    def hits_note(hits)
      expected = (rounds + 1) * 2 * PROBED_CALLS
      return "WARNING: bpftrace did not exit on SIGINT: its count is lost" unless hits
      return "bpftrace counted every probed call of each stub exactly (#{expected})" if hits.all?(expected)

      "WARNING: bpftrace counted #{hits.join(", ")} hits (#{STUBS.keys.join(", ")}) for #{expected} probed " \
        "calls of each"
    end

    # Two clock reads: what a latency probe adds to a call around it.
    def clock_table
      loops = [Loop.new("2 x Process.clock_gettime(CLOCK_MONOTONIC, :nanosecond)",
                        "Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)\n" \
                        "Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)"),
               Loop.new("2 x StaticTracing.nsec", "StaticTracing.nsec\nStaticTracing.nsec")]
      samples = time(loops, sample_ms: SAMPLE_MS)
      clocksource = File.read("/sys/devices/system/clocksource/clocksource0/current_clocksource").strip
      table = table(:clock, "Two clock reads in Ruby (median of #{rounds} interleaved rounds)",
                    params: { rounds:, clocksource: }, measurement: "measurement", ns_per_call: ["ns/pair", :d1],
                    spread_ns: ["min..max", :r1])
      %w[clock.process_clock_gettime clock.static_tracing_nsec].zip(loops).each do |id, loop|
        table.row({ id:, measurement: loop.label, **samples.timing(loop.label) })
      end
      table.note("net of an empty loop; clocksource #{clocksource}")
    end

    # Attached calls of this process, timed a sample at a time between the
    # C program's rounds: fire(Integer) on a probe of provider +provider+,
    # and an empty method m0() under LatencyTracer (provider +traced+), each
    # net of the empty loop, with bpftrace counting both.
    class AttachedCalls
      LOOPS = { fire_int: "tp.fire(Integer)", latency: "LatencyTracer m0() call" }.freeze

      def self.measure(provider, traced, log:)
        StaticTracing.enable!
        tracepoint = StaticTracing::Provider.register(provider).add_tracepoint(:int, Integer)
        tracepoint.provider.load
        target = Class.new { include StaticTracing::LatencyTracer.with(provider: traced) }
        target.class_eval("def m0; end", __FILE__, __LINE__)
        program = "usdt:*:#{provider}:int { @fire_int = count(); } usdt:*:#{traced}:m0 { @latency = count(); }"
        Bpftrace.attached(program, pid: Process.pid, log:) do |tracer|
          yield new(tracer, Loop.call(LOOPS[:fire_int], tracepoint, :fire, 42),
                    Loop.call(LOOPS[:latency], target.new, :m0))
        end
      ensure
        StaticTracing.disable!
        [provider, traced].each { |name| StaticTracing.providers[name]&.unregister }
      end

      def initialize(tracer, fire, latency)
        @tracer = tracer
        @loops = { fire_int: fire, latency: }
        @empty = Loop.new("empty loop")
        @loops.each_value { |loop| loop.time_ns(PROBED_CALLS) } # warm-up, counted by the tracer
      end

      # One sample of each loop, +calls+ calls: name => ns/call.
      def sample(calls)
        empty_ns = @empty.time_ns(calls)
        @loops.transform_values { |loop| (loop.time_ns(calls) - empty_ns).fdiv(calls) }
      end

      # The samples by loop (name => ns/call per round), and the note on
      # bpftrace's counts against the calls made.
      def finish(samples)
        counts = @tracer.finish
        expected = @loops.transform_values(&:calls)
        [LOOPS.keys.to_h { |name| [name, samples.map { |sample| sample.fetch(name) }] },
         Bpftrace.count_note(counts, expected)]
      end
    end
  end
end
