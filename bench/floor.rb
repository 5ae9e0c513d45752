# frozen_string_literal: true

module Bench
  # The host's physical floor for an attached probe: a C program calling a
  # `nop; ret` stub in a tight loop, timed without a uprobe, then with
  # bpftrace counting on it; and the same for a stub on the 5-byte NOP
  # (`nopl 0x0(%rax,%rax,1); ret`, what a static_tracing probe site is on
  # x86-64), whose uprobe kernels that optimize uprobes turn into a call to
  # a trampoline instead of an int3 trap. Whatever an attached tracepoint
  # costs above the difference is this library's own. With it, the two
  # clock reads a latency probe adds to a call.
  class Floor < Group
    ROUNDS = 11
    SAMPLE_MS = 25
    # Calls a sample: about 25 ms each on this kind of host, unprobed at
    # about 1 ns a call, probed at about 1 µs.
    PLAIN_CALLS = 20_000_000
    PROBED_CALLS = 30_000
    PROBED = "bench_probed_stub"
    PROBED_NOP5 = "bench_probed_nop5_stub"

    # Three stubs, so that every round times the probed ones and an
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
              ".size #{PROBED_NOP5}, .-#{PROBED_NOP5}\\n");
      void bench_plain_stub(void);
      void #{PROBED}(void);
      void #{PROBED_NOP5}(void);

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
          printf("round %d %.4f %.4f %.4f\\n", round, plain, probed, probed_nop5);
        }
        return 0;
      }
    C

    def run
      binary = compile
      unprobed = run_binary(binary, "floor-unprobed.log")
      probed, hits = probed_run(binary)
      stub_table(unprobed, probed, hits, binary)
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

    # Per round: [plain, probed nop1, probed nop5] ns/call, the warm-up round dropped.
    def run_binary(binary, log_name)
      output = Bench.run_command(binary, (rounds + 1).to_s, PLAIN_CALLS.to_s, PROBED_CALLS.to_s, CLOCK,
                                 log: work_file(log_name), timeout: 120)
      output.scan(/^round (\d+) (\S+) (\S+) (\S+)$/).drop(1).map { |_, *ns| ns.map { |value| Float(value) } }
    end

    # The same program with bpftrace counting on the probed stubs: started
    # once bpftrace is attached (the uprobes are on the binary, so they hold
    # for the process to come), stopped once the program is done. Hits are
    # [nop1, nop5].
    def probed_run(binary)
      program = "uprobe:#{binary}:#{PROBED} { @nop1 = count(); } uprobe:#{binary}:#{PROBED_NOP5} { @nop5 = count(); }"
      Bpftrace.attached(program, log: work_file("floor-bpftrace.log")) do |tracer|
        next [nil, nil] unless tracer

        [run_binary(binary, "floor-probed.log"), tracer.finish&.values_at("nop1", "nop5")]
      end
    end

    def stub_table(unprobed, probed, hits, binary)
      table = table(:floor, "Physical floor: C `nop; ret` and `nop5; ret` stubs called in a loop, uprobe " \
                            "(median of #{rounds} rounds)",
                    params: { rounds:, plain_calls: PLAIN_CALLS, probed_calls: PROBED_CALLS, binary:, clock: CLOCK },
                    measurement: "measurement", ns_per_call: ["ns/call", :auto], spread_ns: ["min..max", :r2])
      stub_rows(unprobed, probed).each { |row| table.row(row) }
      table.note("the probed run has bpftrace `uprobe:BINARY:STUB { @ = count(); }` attached to #{PROBED} " \
                 "(1-byte nop) and #{PROBED_NOP5} (5-byte nopl 0x0(%rax,%rax,1)); the same stubs and loop are " \
                 "run once without bpftrace, then once with it")
      table.note(hits_note(hits)) if probed
    end

    # The probed stubs without and with the uprobe, same calls, same loop;
    # the other stub of the probed run shows the uprobe costs nothing to
    # code beside it.
    def stub_rows(unprobed, probed)
      without = series_row("stub.unprobed", "C nop1 stub call, no bpftrace", unprobed.map { |round| round[1] })
      without_nop5 = series_row("stub.nop5_unprobed", "C nop5 stub call, no bpftrace", unprobed.map(&:last))
      unless probed
        reason = Bpftrace.unavailable_reason
        return [without, without_nop5,
                { id: "stub.uprobe", measurement: "uprobe hit: skipped: #{reason}", skipped: reason }]
      end

      with = series_row("stub.probed", "C nop1 stub call, bpftrace count() attached", probed.map { |round| round[1] })
      with_nop5 = series_row("stub.nop5_probed", "C nop5 stub call, bpftrace count() attached", probed.map(&:last))
      [without, without_nop5, with, with_nop5,
       series_row("stub.other_in_probed_run", "C stub call, the other stub of the probed run", probed.map(&:first)),
       { id: "stub.uprobe", measurement: "nop1 uprobe hit: attached - no bpftrace (medians), the kernel's floor",
         ns_per_call: with[:ns_per_call] - without[:ns_per_call] },
       { id: "stub.uprobe_nop5", measurement: "nop5 uprobe hit: attached - no bpftrace (medians)",
         ns_per_call: with_nop5[:ns_per_call] - without_nop5[:ns_per_call] }]
    end

    def series_row(id, measurement, values)
      { id:, measurement:, ns_per_call: Bench.median(values), spread_ns: values.minmax,
        samples_ns: values.map { |value| value.round(3) } }
    end

    def hits_note(hits)
      expected = (rounds + 1) * PROBED_CALLS
      return "WARNING: bpftrace did not exit on SIGINT: its count is lost" unless hits
      return "bpftrace counted every probed call of each stub exactly (#{expected})" if hits.all?(expected)

      "WARNING: bpftrace counted #{hits.join(" and ")} hits (nop1, nop5) for #{expected} probed calls of each"
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
  end
end
