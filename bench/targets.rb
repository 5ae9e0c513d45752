# frozen_string_literal: true

module Bench
  # The performance bar, next to what this run measured: information for
  # the reader, not a pass/fail gate. Every value comes from a row of
  # another table of the same run; a target whose rows are missing (group
  # not selected, bpftrace unavailable) says so. Each target adds a few
  # lines: the bar, not the logic, makes the class long.
  class Targets < Group # rubocop:disable Metrics/ClassLength
    SHAPES = %w[m0 m2 mk].freeze
    # Plain method and disarmed wrapper: equal within this.
    DISARMED = 1.02
    # A plain method cheaper than this (YJIT compiles an empty one into its
    # caller) is no reference for a ratio: the disarmed one is held to it
    # within DISARMED_NS instead.
    MEASURABLE_NS = 1.0
    DISARMED_NS = 0.5
    # Armed and unattached: at most this many times the floor's overhead.
    ARMED = 2.0
    # Attached: at most the kernel's uprobe, two clock reads and the armed
    # cost, plus this margin.
    ATTACHED_MARGIN = 1.2
    # Attached fire(Integer): at most this times the C nop5 stub's probed call.
    FIRE_OVER_NOP5 = 1.10
    # An attached LatencyTracer call: at most this times the C nop1 stub's.
    LATENCY_OVER_NOP1 = 1.20
    LOAD_1000_MS = 2.0
    # 1,000 (Integer, String) probes declared into a fresh provider and
    # loaded, tracing on: declarations and load together.
    BOOT_1000_MS = 2.0
    # Per-probe load cost at 10,000 over that at 1,000: linear within this.
    LINEAR = 1.25
    # A recorded fire(Integer) on a fresh ring's first lap: at most this
    # times one on a ring that has wrapped.
    FIRST_LAP = 1.1
    # Beside LTTng-UST's event of one 64-bit field from C (bench/lttng.rb),
    # on the same lap of fresh or wrapped buffers: our ring written from
    # Rust, its clock read included, and a recorded fire(Integer) from Ruby.
    RUST_OVER_LTTNG = 0.75
    RUBY_OVER_LTTNG = 1.0
    # A recorded LatencyTracer call: at most this times the same call with
    # bpftrace attached.
    RECORDED_OVER_ATTACHED = 0.25
    RECORDED_FIRE_NS = 60.0
    # Trace contexts (bench/recorder/contexts.rb): a recorded call in a
    # context / one outside any; setting and clearing one while nothing
    # records (ns; the block form and the set/clear pair); while recording, alone and around a recorded call, /
    # that.
    IN_CONTEXT = 1.05
    SET_CLEAR_NS = 100.0
    SET_CLEAR_RECORDING = 2.0
    # A scrape served in OpenMetrics with exemplars, of calls in request
    # contexts (bench/recorder/scraping.rb): at most this times one of the
    # same calls outside any context, in the text format.
    SCRAPE_EXEMPLARS = 1.2
    # A block probe with no tracer attached: at most this times a method
    # that yields (the same block), tracing on or off.
    BLOCK_OVER_YIELD = 2.0
    # Block rows of the blocks table => what they are; the held probes are
    # the targets, the block forms information (docs/api.md says which to
    # use where).
    BLOCK_PATHS = {
      "held_latency_disarmed" => ["held latency probe measure { }, tracing off", true],
      "held_latency_armed" => ["held latency probe measure { }, on, no tracer", true],
      "held_tracepoint" => ["held probe fire_if_enabled { }, no tracer", true],
      "latency_disarmed" => ["StaticTracing.latency(name:, provider:) { }, tracing off", false],
      "latency_armed" => ["StaticTracing.latency(name:, provider:) { }, on, no tracer", false],
      "tracepoint_unattached" => ["StaticTracing.tracepoint(...) { }, no tracer", false]
    }.freeze
    # `static-tracing report` of a million one-Integer records: what it
    # costs beyond a report of 1,000, in start-ups of the command (its
    # --version, the same rounds); the CPU time it aims at.
    REPORT_OVER_STARTUP = 2.0
    REPORT_MILLION_CPU_S = 0.3
    # Ten files of a million records each in one report; a million in
    # Chrome's format.
    REPORT_MERGED_S = 3.0
    REPORT_CHROME_S = 1.0
    # `static-tracing dump` of an idle 16 MiB flight ring, beyond the
    # command's start-up (its memory's bound is the reading table's).
    DUMP_IDLE_MS = 50.0
    # The longest a thread calling a recorded method waits, in the worst
    # round, while a large ring starts or is snapshotted, for anything but
    # a CPU (the machine's other work makes those waits, not the recorder).
    STALL_MS = 10.0
    # While nothing records, a path's cost against its twin's once a
    # recording that recorded it has stopped, over that before the first:
    # unchanged within this (the noise of two phases that cannot share rounds).
    IDLE = 1.05
    # Rows of the recorder_idle table => what the path is.
    IDLE_PATHS = {
      "fire_int" => "fire(Integer), no tracer",
      "latency_tracer.disarmed" => "LatencyTracer method, tracing off",
      "latency_tracer.armed" => "LatencyTracer method, on, no tracer",
      "latency_block.off" => "StaticTracing.latency { }, tracing off",
      "latency_block.armed" => "StaticTracing.latency { }, on, no tracer"
    }.freeze
    # Figures the recorder is asked to report: id => [what, section, row, field, unit].
    RECORDER_INFORMATION = {
      "recorder.report_live" => ["static-tracing report, 1,000,000 records of a live ring", :recorder_reading,
                                 "reading.report_live", :seconds, "s"],
      "recorder.dump_full" => ["static-tracing dump of a 16 MiB flight ring holding 500,000 records, beyond " \
                               "start-up", :recorder_reading, "reading.dump_full", :over_startup_ms, "ms"],
      "recorder.fire_int_string" => ["recorded fire(Integer, String)", :recorder, "fire_int_string.recorded",
                                     :ns_per_call, "ns/call"],
      "recorder.latency_block" => ["recorded StaticTracing.latency(name:, provider:) { }", :recorder,
                                   "latency_block.recorded", :ns_per_call, "ns/call"],
      "recorder.memory" => ["ring file, default size (8 MiB of slots)", :recorder_ring, "ring.memory.default",
                            :file_bytes, "bytes"],
      "recorder.memory_flight" => ["ring file, default flight size (16 MiB of slots)", :recorder_ring,
                                   "ring.memory.flight", :file_bytes, "bytes"]
    }.freeze

    # Check => what it says; one row a shape, id "check.shape".
    METHOD_TARGETS = {
      disarmed: "disarmed within 2% of plain (of a plain call under 1 ns: within 0.5 ns)",
      armed: "armed-unattached overhead <= 2x floor's",
      attached: "attached overhead <= 1.2 x (uprobe + 2 clock reads + armed)",
      allocations: "armed-unattached allocations <= floor's"
    }.freeze

    Missing = Class.new(StandardError)

    def run
      table = table(:targets, "Targets (information, not pass/fail; from the tables above, same run)",
                    target: "target", measured: ["measured", :auto], limit: ["limit", :auto], unit: "unit",
                    verdict: "verdict")
      rows.each { |row| table.row(row) }
      table.note("within one group ratios are medians of per-round ratios; targets combining groups " \
                 "(attached budget) use each group's medians")
      table.note("attached budget: the C stub's uprobe hit (floor table) + 2 x Process.clock_gettime (clock " \
                 "table) + the armed overhead of the same shape, times #{ATTACHED_MARGIN}")
      table.note("allocations: on Ruby 3.1 a super that passes keywords allocates one object a call, a " \
                 "hand-written one too, so each shape is held to its prepend+super floor's count")
    end

    # The targets over +report+'s tables as they stand: what #run shows.
    def self.evaluate(report) = new(report).rows

    def rows
      method_rows + fire_rows + attached_floor_rows +
        [target("load.thousand_ms", "load of 1,000 probes <= 2 ms") { load_thousand },
         target("load.linear", "load linear to 10,000 (per-probe cost ratio <= #{LINEAR})") { linear },
         target("load.add_one", "add 1 probe to a loaded 1,000 <= full load") { reload_one },
         target("load.boot", "declare 1,000 (Integer, String) probes and load them, tracing on, " \
                             "<= #{BOOT_1000_MS.to_i} ms") { boot },
         target("attach.wrap", "attach mode, #{Attach::CALLERS} threads calling: (un)wrapped after a semaphore " \
                               "change <= attach_delay (median)") { wrap }] +
        recorder_rows + lttng_rows + reading_rows + stall_rows + block_rows
    end

    private

    # Block probes against a method that yields the same block.
    def block_rows
      BLOCK_PATHS.map do |path, (name, target)|
        limit = BLOCK_OVER_YIELD if target
        target("block.#{path}", "#{name} / a method that yields#{target ? " <= #{limit}" : " (information)"}") do
          [value(:blocks, "block.#{path}", :ratio_to_yield), limit, "x yield", nil]
        end
      end
    end

    # The recorder's targets (bench/recorder.rb), and the figures it is asked to report.
    def recorder_rows
      [target("recorder.latency_tracer", "recorded LatencyTracer call <= 1/4 of the call attached (bpftrace)") do
         recorded_latency
       end,
       target("recorder.fire_int", "recorded fire(Integer) <= #{RECORDED_FIRE_NS.to_i} ns") do
         [value(:recorder, "fire_int.recorded", :ns_per_call), RECORDED_FIRE_NS, "ns/call", nil]
       end,
       target("recorder.threads", "4 threads recording at once: records == calls, lost == 0") { threads },
       *context_rows,
       *IDLE_PATHS.map do |path, name|
         target("recorder.idle.#{path}", "nothing recording: #{name}, stopped / never started <= #{IDLE}") do
           [value(:recorder_idle, path, :ratio), IDLE, "x never started (against its twin)", nil]
         end
       end,
       *RECORDER_INFORMATION.map do |id, (name, *field, unit)|
         target(id, "#{name} (information)") { [value(*field), nil, unit, nil] }
       end]
    end

    def context_rows
      [target("recorder.contexts.fire_int", "recorded fire(Integer) in a trace context / outside any <= " \
                                            "#{IN_CONTEXT}") do
         [value(:recorder_contexts, "contexts.fire_int_in_context", :ratio), IN_CONTEXT, "x outside", nil]
       end,
       *{ "set_clear" => ["set_clear_idle", "with_trace_context { }"],
          "set_clear_pair" => ["set_clear_pair_idle", "set_trace_context + clear_trace_context"] }
         .map do |id, (row, what)|
           target("recorder.contexts.#{id}", "#{what} while nothing records <= #{SET_CLEAR_NS.to_i} ns") do
             [value(:recorder_contexts, "contexts.#{row}", :ns_per_call), SET_CLEAR_NS, "ns/call", nil]
           end
         end,
       *%w[set_clear_recording set_clear_around_fire].map do |row|
         target("recorder.contexts.#{row}", "#{row.tr("_", " ")} / set+clear while nothing records <= " \
                                            "#{SET_CLEAR_RECORDING}") do
           [value(:recorder_contexts, "contexts.#{row}", :ratio), SET_CLEAR_RECORDING, "x nothing recording", nil]
         end
       end,
       target("recorder.scrape.exemplars", "a scrape with exemplars / without <= #{SCRAPE_EXEMPLARS}") do
         [value(:recorder_scraping, Recorder::Scraping::WITH_EXEMPLARS, :ratio), SCRAPE_EXEMPLARS, "x", nil]
       end]
    end

    # The recorder's files read by the command (bench/recorder/reading.rb),
    # each held to figures of the same rounds.
    def reading_rows
      [target("recorder.report", "static-tracing report, 1,000,000 records: its cost beyond 1,000 records' " \
                                 "<= #{REPORT_OVER_STARTUP.to_i}x the command's start-up") { report_over_startup },
       target("recorder.report_cpu", "static-tracing report, 1,000,000 records: CPU time < " \
                                     "#{REPORT_MILLION_CPU_S} s (the aim)") do
         [reading(:report_dump, :cpu_s), REPORT_MILLION_CPU_S, "s CPU", { wall_s: reading(:report_dump, :wall_s) }]
       end,
       target("recorder.report_merged", "10 files of 1,000,000 records each in one report < " \
                                        "#{REPORT_MERGED_S.to_i} s") { reading_seconds(:report_merged) },
       target("recorder.report_chrome", "report --format chrome of 1,000,000 records < " \
                                        "#{REPORT_CHROME_S.to_i} s") { reading_seconds(:report_chrome) },
       target("recorder.dump_idle", "static-tracing dump of an idle 16 MiB flight ring < #{DUMP_IDLE_MS.to_i} ms " \
                                    "beyond the command's start-up") do
         [reading(:dump_idle, :over_startup_ms), DUMP_IDLE_MS, "ms (#{reading(:dump_idle, :clock)})",
          { cpu_ms: reading(:dump_idle, :cpu_ms), wall_ms: reading(:dump_idle, :wall_ms),
            startup_cpu_ms: reading(:dump_startup, :cpu_ms), startup_wall_ms: reading(:dump_startup, :wall_ms) }]
       end,
       *{ idle: "an idle 16 MiB flight ring", full: "a 16 MiB flight ring holding 500,000 records" }.map do |key, what|
         target("recorder.dump_#{key}_memory", "static-tracing dump of #{what}: peak memory <= 2x the file it " \
                                               "writes + the start-up's + 8 MiB") { dump_memory(key) }
       end]
    end

    def method_rows
      METHOD_TARGETS.flat_map do |check, name|
        SHAPES.map { |shape| target("#{check}.#{shape}", "#{name}, #{shape}") { send(check, shape) } }
      end
    end

    def fire_rows
      %w[none int int6].map do |probe|
        target("fire_allocations.#{probe}", "integer-only fire allocates nothing, fire_#{probe}") do
          fire_allocations(probe)
        end
      end
    end

    # Attached calls against the C program's probed calls, as the floor
    # group measures them in the same rounds (ratios of per-round ratios):
    # fire(Integer), and a LatencyTracer call (no parameters); fire(Integer)
    # also against the nop5 stub probed as deep as its site is.
    def attached_floor_rows
      names = { fire_int: "attached fire(Integer)", latency: "attached LatencyTracer call" }
      floors = { nop5: "nop5", nop1: "nop1", nop5_deep: "nop5 (three calls down)" }
      limits = { %i[fire_int nop5] => FIRE_OVER_NOP5, %i[latency nop1] => LATENCY_OVER_NOP1 }
      Floor::RATIOS.map do |(subject, floor)|
        limit = limits[[subject, floor]]
        name = "#{names[subject]} / C #{floors[floor]} probed call#{limit ? " <= #{limit}" : " (information)"}"
        target("attached_floor.#{subject}.#{floor}", name) do
          row = "ratio.#{subject}.#{floor}"
          [value(:attached_floor, row, :ratio), limit, "x C #{floors[floor]} probed call",
           { round_ratios: value(:attached_floor, row, :samples) }]
        end
      end
    end

    # A row for +name+ from the block's [measured, limit (nil: no target),
    # unit, inputs], or one saying why it could not be computed.
    def target(id, name)
      measured, limit, unit, inputs = yield
      verdict = if limit.nil? then "information"
                elsif measured <= limit then "met"
                else
                  "MISSED"
                end
      { id:, target: name, measured:, limit:, unit:, verdict:, inputs: }
    rescue Missing => e
      { id:, target: name, verdict: "not measured: #{e.message}" }
    end

    def value(section_key, id, field)
      table = @report.table(section_key) or raise Missing, "no #{section_key} table in this run"
      row = table.find(id) or raise Missing, "no row #{id} in #{section_key}"
      raise Missing, "#{id} skipped: #{row[:skipped]}" if row[:skipped]

      row.fetch(field) { raise Missing, "no #{field} in #{section_key} #{id}" }
    end

    def disarmed(shape)
      plain_ns = value(:methods, "#{shape}.plain", :ns_per_call)
      if plain_ns < MEASURABLE_NS
        return [value(:methods, "#{shape}.disarmed", :over_plain_ns).abs, DISARMED_NS,
                "ns from plain (plain under #{MEASURABLE_NS} ns)", { plain_ns: }]
      end

      [value(:methods, "#{shape}.disarmed", :ratio_to_plain), DISARMED, "x plain", nil]
    end

    def armed(shape)
      [value(:methods, "#{shape}.armed", :overhead_vs_floor), ARMED, "x floor's overhead",
       { armed_over_plain_ns: value(:methods, "#{shape}.armed", :over_plain_ns),
         floor_over_plain_ns: value(:methods, "#{shape}.floor", :over_plain_ns) }]
    end

    def attached(shape)
      inputs = { uprobe_ns: value(:floor, "stub.uprobe", :ns_per_call),
                 two_clock_reads_ns: value(:clock, "clock.process_clock_gettime", :ns_per_call),
                 armed_over_plain_ns: value(:methods, "#{shape}.armed", :over_plain_ns) }
      [value(:methods, "#{shape}.attached", :over_plain_ns), ATTACHED_MARGIN * inputs.values.sum, "ns over plain",
       inputs]
    end

    def allocations(shape)
      [value(:method_allocations, "#{shape}.armed", :objects_per_call),
       value(:method_allocations, "#{shape}.armed", :target_objects), "objects/call", nil]
    end

    def fire_allocations(probe) = [value(:allocations, "fire_#{probe}", :objects_per_call), 0, "objects/call", nil]

    def load_thousand = [value(:load, "load.1000", :load_ms), LOAD_1000_MS, "ms", nil]

    def boot
      [value(:load_boot, "boot.on", :total_ms), BOOT_1000_MS, "ms",
       { first_declaration_us: value(:load_boot, "boot.on", :first_us),
         us_per_declaration_after: value(:load_boot, "boot.on", :declare_us_per_probe),
         load_ms: value(:load_boot, "boot.on", :load_ms),
         load_alone_ms: value(:load_boot, "boot.off", :load_ms),
         over_load_alone: value(:load_boot, "boot.on", :ratio_to_load) }]
    end

    def wrap = [value(:attach_wrap, "attach.wrap.callers", :ratio_to_delay), 1.0, "x attach_delay", nil]

    def linear
      [value(:load_growth, "growth.load_per_probe", :ratio), LINEAR, "x per-probe cost at 1,000", nil]
    end

    def recorded_latency
      inputs = { attached_ns: value(:recorder, "latency_tracer.attached", :ns_per_call),
                 recorded_ns: value(:recorder, "latency_tracer.recorded", :ns_per_call) }
      [value(:recorder, "latency_tracer.recorded", :ratio), RECORDED_OVER_ATTACHED, "x the attached call", inputs]
    end

    # A thread calling a recorded method while a large ring starts or is
    # snapshotted (bench/recorder_stall.rb), beside its stall with nothing
    # else going on.
    # The first lap against the next, and the recorder beside LTTng-UST.
    def lttng_rows
      laps = { first_lap: "the first lap", wrapped: "a wrapped ring" }
      [target("lttng.first_lap", "recorded fire(Integer) on a fresh ring's first lap / on a wrapped ring <= " \
                                 "#{FIRST_LAP}") do
         row = "lttng.ruby.first_lap"
         [value(:lttng, row, :ratio_to_wrapped), FIRST_LAP, "x wrapped",
          { spread: value(:lttng, row, :ratio_to_wrapped_spread), resident_mib: value(:lttng, row, :resident_mib),
            resident_wrapped_mib: value(:lttng, "lttng.ruby.wrapped", :resident_mib) }]
       end] +
        laps.flat_map do |lap, words|
          [target("lttng.rust.#{lap}", "our ring from Rust (clock read included), on #{words} / LTTng-UST's " \
                                       "event <= #{RUST_OVER_LTTNG}") do
             lttng_ratio("lttng.rust.#{lap}", RUST_OVER_LTTNG)
           end,
           target("lttng.ruby.#{lap}", "recorded fire(Integer) from Ruby, on #{words} / LTTng-UST's event from C " \
                                       "<= #{RUBY_OVER_LTTNG}") { lttng_ratio("lttng.ruby.#{lap}", RUBY_OVER_LTTNG) }]
        end
    end

    def lttng_ratio(row, limit)
      ratio = value(:lttng, row, :ratio_lttng) or raise Missing, "LTTng-UST was not measured (see its table)"

      [ratio, limit, "x LTTng-UST", { spread: value(:lttng, row, :ratio_spread) }]
    end

    def stall_rows
      RecorderStall::TARGETS.merge(RecorderStall::INFORMATION).map do |step, name|
        limit = STALL_MS if RecorderStall::TARGETS.key?(step)
        target("recorder.stall.#{step}", "#{name}: a thread calling a recorded method stalls " \
                                         "#{limit ? "< #{limit.to_i} ms" : "(information)"}, its waits for a CPU " \
                                         "left out (longest round)") do
          row = "stall.#{step}"
          [value(:recorder_stall, row, :max_not_cpu_ms), limit, "ms",
           { longest_stall_ms: value(:recorder_stall, row, :max_gap_ms), step_ms: value(:recorder_stall, row, :step_ms),
             baseline_longest_stall_ms: value(:recorder_stall, "stall.baseline", :max_gap_ms) }]
        end
      end
    end

    # Records wrong in any way: missing or extra against the calls made,
    # lost, values read twice, never or out of range.
    def threads
      row = %i[calls records lost missing repeated outside].to_h do |field|
        [field, value(:recorder_ring, "ring.threads", field)]
      end
      [(row[:records] - row[:calls]).abs + row.values_at(:lost, :missing, :repeated, :outside).sum, 0,
       "records wrong of #{Table::FORMATS[:int].call(row[:calls])}", row]
    end

    def reading(row, field) = value(:recorder_reading, "reading.#{row}", field)

    # The row's seconds by the reading table's clock, with both clocks.
    def reading_seconds(row)
      limit = { report_merged: REPORT_MERGED_S, report_chrome: REPORT_CHROME_S }.fetch(row)
      [reading(row, :seconds), limit, "s (#{reading(row, :clock)})",
       { cpu_s: reading(row, :cpu_s), wall_s: reading(row, :wall_s) }]
    end

    def report_over_startup
      [reading(:report_dump, :over_thousand_ratio), REPORT_OVER_STARTUP, "x start-up (#{reading(:startup, :clock)})",
       { million_s: reading(:report_dump, :seconds), thousand_s: reading(:report_thousand, :seconds),
         beyond_thousand_s: reading(:report_dump, :over_thousand_s), startup_s: reading(:startup, :seconds) }]
    end

    def dump_memory(key)
      row = :"dump_#{key}"
      [reading(row, :peak_mib), reading(row, :memory_limit_mib), "MiB peak",
       { file_bytes: reading(row, :file_bytes), startup_peak_mib: reading(:dump_startup, :peak_mib) }]
    end

    def reload_one
      [value(:load_growth, "growth.reload_one", :ratio), 1.0, "x full load of 1,000",
       { reload_ms: value(:load_growth, "growth.reload_one", :value),
         load_ms: value(:load_growth, "growth.reload_one", :reference_value) }]
    end
  end
end
