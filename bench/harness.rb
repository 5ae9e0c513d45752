# frozen_string_literal: true

require "etc"
require "fileutils"
require "json"
require "time"

# Timing, statistics and reporting shared by the benchmark groups. A group
# (bench/calls.rb, bench/load.rb, ...) measures and returns Sections;
# bench/run.rb prints them as one table and writes them as JSON.
module Bench
  module_function

  def now_ns
    Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
  end

  # Nanoseconds the block took.
  def time_ns
    start = now_ns
    yield
    now_ns - start
  end

  # Per-call loops are timed in the CPU time of the thread running them:
  # on a shared host the time it spends preempted would otherwise land in
  # whichever sample it hit. Time the kernel spends on its behalf (a
  # uprobe's trap and BPF program) is counted. BENCH_CLOCK=wall times them
  # by the monotonic clock instead.
  CALL_CLOCKS = { "cpu" => Process::CLOCK_THREAD_CPUTIME_ID, "wall" => Process::CLOCK_MONOTONIC }.freeze

  def call_clock_name
    @call_clock_name ||= ENV.fetch("BENCH_CLOCK", "cpu").tap do |name|
      CALL_CLOCKS.key?(name) or abort "bench: BENCH_CLOCK=#{name}: use one of #{CALL_CLOCKS.keys.join(", ")}"
    end
  end

  def call_clock_words
    call_clock_name == "cpu" ? "thread CPU time" : "monotonic (wall) time"
  end

  # Nanoseconds the block took, by the clock of per-call loops.
  def call_time_ns
    clock = CALL_CLOCKS.fetch(call_clock_name)
    start = Process.clock_gettime(clock, :nanosecond)
    yield
    Process.clock_gettime(clock, :nanosecond) - start
  end

  def median(values)
    sorted = values.sort
    middle = sorted.size / 2
    sorted.size.odd? ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2.0
  end

  # The median of the round-by-round ratios of two series: each ratio
  # compares measurements taken moments apart, which a shared machine's
  # drifting load would blur if whole medians were divided instead.
  def median_ratio(values, references)
    ratios = values.zip(references).filter_map do |value, reference|
      value.fdiv(reference) if reference.positive?
    end
    ratios.empty? ? nil : median(ratios)
  end

  # Runs every case once a round, in the same order each round (A, B, C,
  # A, B, C, ...), so the things compared share the same moments of noise.
  # The first +warmup+ rounds are run and dropped. Returns name => the
  # result of each kept round, in round order.
  def interleave(cases, rounds:, warmup: 1)
    results = cases.transform_values { [] }
    (warmup + rounds).times do |round|
      cases.each do |name, run|
        result = run.call
        results[name] << result if round >= warmup
      end
    end
    results
  end

  # Iterations for one sample of the slowest loop to last about +target_ms+:
  # long enough to dwarf the clock and scheduler ticks, short enough for
  # many interleaved rounds.
  def calibrate(loops, target_ms:, probe: 20_000)
    loops.each { |loop| loop.time_ns(probe) }
    slowest = loops.map { |loop| loop.time_ns(probe) }.max.fdiv(probe)
    (target_ms * 1_000_000 / slowest).round(-4).clamp(10_000, 100_000_000)
  end

  def machine_info
    uname = Etc.uname
    {
      ruby: RUBY_DESCRIPTION,
      cpu: cpu_model,
      cpus: Etc.nprocessors,
      kernel: "#{uname[:sysname]} #{uname[:release]} #{uname[:machine]}",
      load_average:
    }
  end

  def cpu_model
    line = File.foreach("/proc/cpuinfo").find { |entry| entry.start_with?("model name") }
    line ? line.split(":", 2).last.strip : "unknown"
  rescue SystemCallError
    "unknown"
  end

  # 1, 5 and 15 minute load averages: how busy the shared machine was.
  def load_average
    File.read("/proc/loadavg").split.first(3).map(&:to_f)
  rescue SystemCallError
    nil
  end

  # Shapes raw row values for the table; JSON gets the raw values.
  module Format
    module_function

    def decimal(digits)
      ->(value) { format("%.#{digits}f", value) }
    end

    def integer
      ->(value) { value.round.to_s.gsub(/(\d)(?=(\d{3})+\z)/, "\\1,") }
    end

    # Three or four significant digits, for columns mixing magnitudes.
    def auto
      lambda { |value|
        format(if value.abs >= 100
                 "%.1f"
               else
                 value.abs >= 10 ? "%.2f" : "%.3f"
               end, value)
      }
    end

    def ratio
      ->(value) { format("%.2fx", value) }
    end

    def range(digits)
      ->(value) { format("%.#{digits}f..%.#{digits}f", *value) }
    end
  end

  # A loop running +code+ +iterations+ times, compiled once with +locals+
  # as the parameters of its lambda: the loop holds the code as a caller
  # would write it, with no dispatch of the harness's own (a `public_send`
  # would add one) in what is measured. Without code it is the empty loop
  # whose cost the others subtract.
  class CodeLoop
    LOCAL = /\A[a-z][a-zA-Z0-9_]*\z/

    # Calls made through this loop so far, calibration included: what an
    # attached tracer must have counted.
    attr_reader :label, :calls

    def initialize(label, code = nil, **locals)
      bad = locals.keys.reject { |name| LOCAL.match?(name) && !name.start_with?("bench_") }
      raise ArgumentError, "not usable as locals: #{bad.inspect}" if bad.any?

      @label = label
      @values = locals.values
      @calls = 0
      @body = compile(code.to_s, locals.keys)
    end

    def time_ns(iterations)
      @calls += iterations
      Bench.call_time_ns { @body.call(iterations, *@values) }
    end

    # Objects allocated by one call: the loop is run at two lengths so that
    # whatever a run allocates once (caches filled on first use) cancels out.
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

    def compile(code, names)
      instance_eval(<<~RUBY, __FILE__, __LINE__ + 1)
        # ->(bench_n, receiver, a0) do
        #   bench_i = 0
        #   while bench_i < bench_n
        #     receiver.fire(a0)
        #     bench_i += 1
        #   end
        # end
        ->(bench_n#{names.map { |name| ", #{name}" }.join}) do
          bench_i = 0
          while bench_i < bench_n
            #{code}
            bench_i += 1
          end
        end
      RUBY
    end
  end

  # receiver.method(*args) in a CodeLoop: the call site is compiled for
  # that method, with the arguments as locals.
  class CallLoop < CodeLoop
    PLAIN_METHOD = /\A[a-z_][a-zA-Z0-9_]*[?!]?\z/

    def initialize(label, receiver = nil, method = nil, *args)
      raise ArgumentError, "not a plain method name: #{method.inspect}" if method && !PLAIN_METHOD.match?(method)

      locals = args.each_index.to_h { |index| [:"a#{index}", args[index]] }
      code = method && "receiver.#{method}(#{locals.keys.join(", ")})"
      super(label, code, receiver:, **locals)
    end
  end

  # A titled part of the report with its own columns. Rows keep raw values
  # (all of them go to the JSON); columns choose which the table shows and
  # how. A nil value shows as an empty cell.
  class Section
    Column = Struct.new(:key, :header, :format)

    attr_reader :key, :title

    def initialize(key, title, params: {})
      @key = key
      @title = title
      @params = params
      @columns = []
      @rows = []
      @notes = []
    end

    def column(key, header, format = :to_s.to_proc)
      @columns << Column.new(key, header, format)
      self
    end

    def row(values)
      @rows << values
      values
    end

    def note(text)
      @notes << text
      self
    end

    # The row with this id, or nil.
    def find(id)
      @rows.find { |row| row[:id] == id }
    end

    def lines
      cells = [@columns.map(&:header)] + @rows.map { |row| cells(row) }
      widths = @columns.each_index.map { |index| cells.map { |line| line[index].length }.max }
      table = cells.map { |line| align(line, widths) }
      table.insert(1, widths.map { |width| "-" * width }.join("  "))
      ["== #{@title}", *table, *notes]
    end

    def to_h
      { title: @title, params: @params, rows: @rows, notes: @notes }
    end

    private

    def notes
      @notes.map { |note| "  * #{note}" }
    end

    def cells(row)
      @columns.map { |column| row[column.key].nil? ? "" : column.format.call(row[column.key]) }
    end

    # Numbers (and ranges of them) compare best flush right, words read
    # best flush left.
    def numeric?(column)
      @rows.all? { |row| [Numeric, Array, NilClass].any? { |kind| row[column.key].is_a?(kind) } }
    end

    def align(line, widths)
      line.zip(widths, @columns).map do |cell, width, column|
        numeric?(column) ? cell.rjust(width) : cell.ljust(width)
      end.join("  ").rstrip
    end
  end

  class Report
    def initialize(title, machine)
      @title = title
      @machine = machine
      @sections = []
      @started_at = Time.now.utc
    end

    def add(*sections)
      @sections.concat(sections.flatten)
      self
    end

    # The section with this key, or nil when its group did not run.
    def section(key)
      @sections.find { |section| section.key == key }
    end

    def machine_line(key, value)
      @machine[key] = value
    end

    def render(io = $stdout)
      io.puts "#{@title}, #{@started_at.iso8601}"
      @machine.each { |key, value| io.puts format("  %-16<key>s %<value>s", key:, value: describe(value)) }
      @sections.each do |section|
        io.puts
        section.lines.each { |line| io.puts line }
      end
    end

    def write_json(path)
      FileUtils.mkdir_p(File.dirname(path))
      data = {
        started_at: @started_at.iso8601,
        machine: @machine,
        sections: @sections.to_h { |section| [section.key, section.to_h] }
      }
      File.write(path, "#{JSON.pretty_generate(data)}\n")
    end

    private

    def describe(value)
      value.is_a?(Array) ? value.join(" ") : value.to_s
    end
  end
end
