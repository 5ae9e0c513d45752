# frozen_string_literal: true

# `rake bench` (ruby bench/harness.rb): one table on stdout, the same data
# in tmp/bench.json, progress on stderr. Attached rows need root and a
# working bpftrace, and say why they were skipped otherwise.
#
#   BENCH_ONLY=calls,load   run only these groups (the targets table always runs)
#   BENCH_ROUNDS=3          rounds per group instead of each group's own
#   BENCH_JSON=path         where the JSON goes
#   BENCH_CLOCK=wall        time calls and loads by the monotonic clock, not thread CPU time
#   BENCH_MACRO_SECONDS=3   seconds of wrk per configuration and round
#   BPFTRACE=path           the bpftrace to attach with
#   BENCH_CPU=1             the CPU groups run on (the last by default; any: not pinned)
#
# Adding a group is one file, bench/NAME.rb, found and loaded by this one:
#
#   module Bench
#     # What it measures and why.
#     class Name < Group                # key :name (RailsApp: :rails_app), for BENCH_ONLY and the JSON
#       ROUNDS = 5                      # BENCH_ROUNDS overrides it; read it as #rounds
#
#       def run                         # adds tables; what it returns is ignored
#         loops = [Loop.call("plain", 1, :itself), Loop.new("nil?", "receiver.nil?", receiver: 1)]
#         samples = time(loops, sample_ms: 25)        # interleaved rounds, ns/call net of an empty loop
#         table(:name, "Title (median of #{rounds} rounds)", measurement: "measurement",
#               ns_per_call: ["ns/call", :d1], ratio: ["ratio to plain", :x])
#           .row(id: "name.nil", measurement: "nil?", **samples.timing("nil?"), ratio: samples.ratio("nil?", "plain"))
#           .note("what the reader must know")
#       end
#     end
#   end
#
# Rows keep raw values, all of them in the JSON; columns pick what the table
# shows, formatted :d1 (decimals), :r1 (a [min, max] pair), :int, :auto (an
# Integer as :int), :x (a ratio), or as words. A row that cannot be measured
# says so in its first column ("...: skipped: why") and in skipped: why.
# Anything other than a loop: Bench.interleave(name => lambda, rounds:)
# gives each lambda's results, round by round, and Bench.median /
# Bench.median_ratio reduce them.
# Processes (Child, Bench.run_command), bpftrace (Bpftrace.attached) and the
# example app (Unicorn) are in bench/support.rb; #work_file names a file in
# tmp/bench/. Groups run in ORDER, then any other by key, then Targets,
# which checks the figures of the other tables against the performance bar
# (a new target is a row there). Inside module Bench a group's class hides
# a library of the same name: in class Rails < Group, the framework is ::Rails.

$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "etc"
require "json"
require "static_tracing"
require "time"
require_relative "support"

module Bench
  ORDER = %i[calls methods floor load attach allocations macro].freeze
  # Per-call loops are timed in the CPU time of their thread: on a shared
  # host the time it spends preempted would otherwise land in whichever
  # sample it hit. The kernel's time on its behalf (a uprobe) is counted.
  CLOCKS = { "cpu" => Process::CLOCK_THREAD_CPUTIME_ID, "wall" => Process::CLOCK_MONOTONIC }.freeze
  CLOCK = ENV.fetch("BENCH_CLOCK", "cpu")
  CLOCK_WORDS = { "cpu" => "thread CPU time", "wall" => "monotonic (wall) time" }.freeze

  module_function

  def time_ns(clock = Process::CLOCK_MONOTONIC)
    start = Process.clock_gettime(clock, :nanosecond)
    yield
    Process.clock_gettime(clock, :nanosecond) - start
  end

  # Nanoseconds the block took, by the clock of per-call loops.
  def call_time_ns(&) = time_ns(CLOCKS.fetch(CLOCK), &)

  def median(values)
    sorted = values.sort
    middle = sorted.size / 2
    sorted.size.odd? ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2.0
  end

  # The median of round-by-round ratios: each compares measurements taken
  # moments apart, which a shared machine's drifting load would blur if
  # whole medians were divided instead.
  def median_ratio(values, references)
    ratios = values.zip(references).filter_map { |value, ref| value.fdiv(ref) if ref.positive? }
    ratios.empty? ? nil : median(ratios)
  end

  # Runs every case once a round, in the same order each round, so that the
  # things compared share the same moments of noise; the first round is a
  # warm-up. Returns name => the results of the kept rounds.
  def interleave(cases, rounds:)
    results = cases.transform_values { [] }
    (rounds + 1).times do |round|
      cases.each { |name, run| run.call.then { |result| results[name] << result if round.positive? } }
    end
    results
  end

  # +code+ run +iterations+ times in a lambda compiled once, with +locals+
  # as its parameters: the loop holds the call as a caller writes it, with
  # no dispatch of the harness's own. Without code: the empty loop.
  class Loop
    attr_reader :label, :calls # calls made so far: what an attached tracer must have counted

    def self.call(label, receiver, method, *args)
      locals = args.each_index.to_h { |index| [:"a#{index}", args[index]] }
      new(label, "receiver.#{method}(#{locals.keys.join(", ")})", receiver:, **locals)
    end

    def initialize(label, code = nil, **locals)
      raise ArgumentError, "bench_ names are the loop's own: #{locals.keys}" if locals.keys.grep(/\Abench_/).any?

      @label = label
      @values = locals.values
      @calls = 0
      @body = instance_eval(<<~RUBY, __FILE__, __LINE__ + 1)
        # ->(bench_n, receiver, a0) do
        #   bench_i = 0
        #   while bench_i < bench_n
        #     receiver.fire(a0)
        #     bench_i += 1
        #   end
        # end
        ->(bench_n#{locals.keys.map { |name| ", #{name}" }.join}) do
          bench_i = 0
          while bench_i < bench_n
            #{code}
            bench_i += 1
          end
        end
      RUBY
    end

    def time_ns(iterations)
      @calls += iterations
      Bench.call_time_ns { @body.call(iterations, *@values) }
    end

    # Objects one call allocates: run at two lengths, so that what a run
    # allocates once (caches filled on first use) cancels out.
    def objects_per_call(iterations)
      allocated(iterations)
      (allocated(2 * iterations) - allocated(iterations)).fdiv(iterations)
    end

    private

    def allocated(iterations)
      @calls += iterations
      before = GC.stat(:total_allocated_objects)
      @body.call(iterations, *@values)
      GC.stat(:total_allocated_objects) - before
    end
  end

  # Interleaved rounds of loops costing from nanoseconds to microseconds a
  # call: each gets its own iteration count, about +sample_ms+ a sample,
  # and every round times the empty loop too, whose cost is subtracted.
  # +around+.call(loop) { ... } runs the block, returning its value, in the
  # state the loop is measured in; loops sharing a state should be adjacent.
  class Samples
    attr_reader :iterations, :empty_ns

    NO_STATE = ->(_loop, &run) { run.call }
    CALIBRATION = 20_000

    def initialize(loops, sample_ms:, rounds:, around: NO_STATE)
      @iterations = {}
      empty = Loop.new("empty loop")
      cases = [empty, *loops].to_h { |loop| [loop.label, sample(loop, sample_ms, loop == empty ? NO_STATE : around)] }
      per_call = Bench.interleave(cases, rounds:)
      @empty_ns = per_call.delete(empty.label)
      @net = per_call.transform_values { |values| values.zip(@empty_ns).map { |value, empty_ns| value - empty_ns } }
    end

    def ns(label) = @net.fetch(label)
    def median(label) = Bench.median(ns(label))
    def ratio(label, reference) = Bench.median_ratio(ns(label), ns(reference))
    def empty_median = Bench.median(@empty_ns)

    # The median of per-round differences: what +label+ costs over +reference+.
    def over(label, reference) = Bench.median(ns(label).zip(ns(reference)).map { |value, ref| value - ref })

    # Median of per-round (label - base) / (reference - base).
    def overhead_ratio(label, reference, base)
      ratios = ns(label).zip(ns(reference), ns(base)).filter_map do |value, ref, base_ns|
        (value - base_ns).fdiv(ref - base_ns) if ref > base_ns
      end
      ratios.empty? ? nil : Bench.median(ratios)
    end

    # The columns of a timed row.
    def timing(label)
      { ns_per_call: median(label), spread_ns: ns(label).minmax, iterations: @iterations[label],
        samples_ns: ns(label).map { |value| value.round(2) } }
    end

    private

    # Calibrates +loop+ (a warm run, then a timed one) and returns what
    # times one sample of it, in ns a call.
    def sample(loop, sample_ms, around)
      per_call = around.call(loop) { 2.times.map { loop.time_ns(CALIBRATION) }.last.fdiv(CALIBRATION) }
      count = @iterations[loop.label] = (sample_ms * 1e6 / per_call).round(-4).clamp(10_000, 100_000_000)
      -> { around.call(loop) { loop.time_ns(count) }.fdiv(count) }
    end
  end

  # A titled table: rows keep raw values (all go to the JSON), columns
  # choose which the table shows and how; nil shows as an empty cell.
  class Table
    FORMATS = {
      int: ->(value) { value.round.to_s.gsub(/(\d)(?=(\d{3})+\z)/, "\\1,") },
      auto: lambda do |value|
        next FORMATS[:int].call(value) if value.is_a?(Integer)

        format("%.#{[3 - Math.log10([value.abs, 1].max).floor, 1].max}f", value)
      end,
      x: ->(value) { format("%.2fx", value) }, nil => :to_s.to_proc
    }.freeze

    def self.formatter(spec)
      case spec.to_s
      when /\Ad\d\z/ then ->(value) { format("%.#{spec[1]}f", value) }
      when /\Ar\d\z/ then ->(value) { format("%.#{spec[1]}f..%.#{spec[1]}f", *value) }
      else FORMATS.fetch(spec)
      end
    end

    attr_reader :key, :rows

    # +columns+: key => header, or key => [header, format].
    def initialize(key, title, params: {}, **columns)
      @key = key
      @title = title
      @params = params
      @columns = columns.transform_values { |header, spec| [header, Table.formatter(spec)] }
      @rows = []
      @notes = []
    end

    def row(values) = tap { @rows << values }
    def note(text) = tap { @notes << text }
    def find(id) = @rows.find { |row| row[:id] == id }

    def lines
      cells = [@columns.values.map(&:first)] + @rows.map { |row| @columns.map { |key, (_, fmt)| cell(row[key], fmt) } }
      widths = cells.transpose.map { |column| column.map(&:length).max }
      lines = cells.map { |line| align(line, widths) }
      ["== #{@title}", lines.first, widths.map { "-" * _1 }.join("  "), *lines.drop(1), *@notes.map { "  * #{_1}" }]
    end

    def align(line, widths)
      line.zip(widths, @columns.keys).map { |text, width, key| numeric?(key) ? text.rjust(width) : text.ljust(width) }
          .join("  ").rstrip
    end

    def cell(value, format) = value.nil? ? "" : format.call(value)

    # Numbers (and ranges of them) compare best flush right, words flush left.
    def numeric?(key) = @rows.all? { |row| [Numeric, Array, NilClass].any? { |kind| row[key].is_a?(kind) } }

    def to_h = { title: @title, params: @params, rows: @rows, notes: @notes }
  end

  # A group of measurements: a subclass per file, whose #run adds tables.
  class Group
    ROUNDS = 1
    # Whether the group runs on one CPU (Bench.on_one_cpu); a group timing
    # several processes that serve each other (wrk and a server) must not.
    ONE_CPU = true
    @all = []

    class << self
      def all = Group.instance_variable_get(:@all)

      def inherited(group)
        super
        all << group
      end

      def key = name.split("::").last.gsub(/(?<=[a-z])([A-Z])/, "_\\1").downcase.to_sym
    end

    attr_reader :rounds

    def initialize(report, rounds: nil)
      @report = report
      @rounds = rounds || self.class::ROUNDS
    end

    private

    def table(key, title, **columns) = Table.new(key, title, **columns).tap { |table| @report << table }
    def time(loops, sample_ms:, around: Samples::NO_STATE) = Samples.new(loops, sample_ms:, rounds:, around:)
    def work_file(name) = File.join(WORK_DIR, name)

    # A loaded provider with a tracepoint for each probe => types; yields
    # them by probe, then unregisters the provider, so that no group leaves
    # anything loaded that another could notice.
    def with_loaded_provider(name, signatures)
      provider = StaticTracing::Provider.register(name)
      tracepoints = signatures.to_h { |probe, types| [probe, provider.add_tracepoint(probe, *types)] }
      provider.load
      yield tracepoints
    ensure
      provider&.unregister
    end

    # The unattached numbers mean nothing if a tracer is attached.
    def attachment_note(tracepoints)
      attached = tracepoints.select(&:enabled?)
      return "no tracer attached (every enabled? was false)" if attached.empty?

      "WARNING: a tracer is attached to #{attached.map(&:inspect).join(", ")}: these are not unattached costs"
    end
  end

  # Everything one run measured, in the order measured.
  class Report
    attr_reader :machine

    def initialize(machine)
      @machine = machine
      @tables = []
      @started_at = Time.now.utc
    end

    def <<(table) = @tables << table
    def table(key) = @tables.find { |table| table.key == key }

    def render(io = $stdout)
      io.puts "static_tracing benchmark, #{@started_at.iso8601}"
      @machine.each { |key, value| io.puts format("  %-16<key>s %<value>s", key:, value: Array(value).join(" ")) }
      @tables.each { |table| io.puts("", *table.lines) }
    end

    def write_json(path)
      FileUtils.mkdir_p(File.dirname(path))
      data = { started_at: @started_at.iso8601, machine: @machine, sections: @tables.to_h { [_1.key, _1.to_h] } }
      File.write(path, "#{JSON.pretty_generate(data)}\n")
    end
  end

  def main
    abort "bench: BENCH_CLOCK=#{CLOCK}: use one of #{CLOCKS.keys.join(", ")}" unless CLOCKS.key?(CLOCK)
    # Groups switch tracing on for what they measure, never the environment.
    StaticTracing::Configuration.mode = StaticTracing::Configuration::Modes::OFF
    report = Report.new(machine)
    total = time_ns { (selected_groups + [Targets]).each { |group| run_group(group, report) } }
    report.machine.merge!(load_average_end: load_average, run_seconds: (total / 1e9).round(1))
    report.render
    path = ENV.fetch("BENCH_JSON", File.join(ROOT, "tmp", "bench.json"))
    report.write_json(path)
    puts "\nJSON: #{path}"
  end

  def run_group(group, report)
    warn "bench: #{group.key}..."
    rounds = ENV["BENCH_ROUNDS"]&.then { Integer(_1) }
    run = -> { time_ns { group.new(report, rounds:).run } }
    warn format("bench: #{group.key} took %.1f s", (group::ONE_CPU ? on_one_cpu(&run) : run.call) / 1e9)
  end

  # Runs the block with this process's threads, and the processes it
  # starts, on one CPU (BENCH_CPU, by default the last this process may
  # use; "any": left to the scheduler). On the reference host a thread
  # moved between CPUs measured a uprobe hit about 150 ns slower for whole
  # samples at a time, at random moments: a table measured minutes after
  # another disagreed with it by more than the targets' margins.
  def on_one_cpu
    cpu = pinned_cpu or return yield

    affinity(cpu)
    begin
      yield
    ensure
      affinity(ALLOWED_CPUS)
    end
  end

  # The CPUs this process may use, as it started ("0-1").
  ALLOWED_CPUS = File.read("/proc/self/status")[/^Cpus_allowed_list:\s*(\S+)/, 1]

  def pinned_cpu
    cpu = ENV.fetch("BENCH_CPU") { ALLOWED_CPUS&.scan(/\d+/)&.last }
    cpu unless cpu.nil? || cpu == "any" || !which("taskset")
  end

  # taskset walks /proc/PID/task: a thread that ends meanwhile (one a group
  # has just joined) fails the walk, and is gone from the next one.
  def affinity(cpus, attempts: 3)
    out, status = Open3.capture2e("taskset", "--all-tasks", "--cpu-list", "--pid", cpus, Process.pid.to_s)
    return if status.success?
    return affinity(cpus, attempts: attempts - 1) if attempts > 1

    abort "bench: taskset could not set CPU affinity #{cpus}: #{out.strip}"
  end

  # Every group of bench/, in ORDER and then by name.
  def groups
    (Dir[File.join(__dir__, "*.rb")] - [File.expand_path(__FILE__)]).each { |file| require file }
    (Group.all - [Targets]).sort_by { |group| [ORDER.index(group.key) || ORDER.size, group.key] }
  end

  def selected_groups
    only = ENV.fetch("BENCH_ONLY", nil) or return groups

    keys = only.split(",").map { _1.strip.to_sym }
    unknown = keys - groups.map(&:key)
    abort "bench: unknown group(s) #{unknown.join(", ")}; known: #{groups.map(&:key).join(", ")}" if unknown.any?
    groups.select { |group| keys.include?(group.key) }
  end

  # The checkout's commit, or why there is none: the benchmark runs from
  # an unpacked gem or a root without git too.
  def source_revision
    revision = IO.popen(%w[git describe --always --dirty], chdir: ROOT, err: File::NULL, &:read).strip
    revision.empty? ? "not a git checkout" : revision
  rescue SystemCallError
    "git not installed"
  end

  def machine
    uname = Etc.uname
    cpu = File.foreach("/proc/cpuinfo").find { _1.start_with?("model name") }&.split(":", 2)&.last&.strip
    commit = source_revision
    { ruby: RUBY_DESCRIPTION, cpu: cpu || "unknown", cpus: Etc.nprocessors,
      kernel: "#{uname[:sysname]} #{uname[:release]} #{uname[:machine]}", load_average:,
      static_tracing: "#{StaticTracing::VERSION} (#{commit})", usdt_supported: StaticTracing.supported?,
      cpu_affinity: pinned_cpu ? "groups other than macro on CPU #{pinned_cpu} (BENCH_CPU)" : "not pinned",
      call_clock: "calls and loads timed in #{CLOCK_WORDS.fetch(CLOCK)} (BENCH_CLOCK=wall|cpu); macro: wall time" }
  end

  # 1, 5 and 15 minute load averages: how busy the shared machine was.
  def load_average = File.read("/proc/loadavg").split.first(3).map(&:to_f)
end

Bench.main if $PROGRAM_NAME == __FILE__
