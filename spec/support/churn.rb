# frozen_string_literal: true

require "fileutils"
require "io/wait"
require "json"
require "open3"
require "rbconfig"
require "tmpdir"
require "static_tracing/cli"
require_relative "e2e"
require_relative "stub_names"

# Churn: tracers attaching and leaving thousands of times, a provider
# reloaded a thousand times, children forked every 10 ms under a tracer
# coming and going, each against a process calling traced methods from four
# threads and checking every result (spec/support/churn/target.rb). What the
# process holds is measured after a warm-up, in the middle and at the end,
# against Bounds. The short form is spec/hardening/churn_spec.rb, the long
# one `rake soak` (soak/churn.rb): the same scenarios
# (spec/support/churn/scenarios.rb) and the same bounds, other counts.
#
# Every wait is bounded, and synchronized on what it waits for; every
# process started is tracked (Processes) and killed by whoever runs a
# scenario.
module Churn
  TARGET = File.expand_path("churn/target.rb", __dir__)
  # How long the target may take to answer a request that waits for nothing.
  REQUEST_TIMEOUT = 30
  # The targets' attach_delay (seconds): short, for thousands of cycles in
  # seconds (a cycle waits for the poller twice, every attach_delay / 2).
  ATTACH_DELAY = 0.004
  # The counts of the short form (spec/hardening/churn_spec.rb: 35 seconds
  # on 2 cores, 55 with both busy meanwhile) and of `rake soak` (the
  # defaults of its SOAK_* variables: 3 minutes), by scenario.
  SHORT = {
    attach: { semaphore_cycles: 3_000, bpftrace_cycles: 200 },
    two: { cycles: 4 },
    reload: { reloads: 1_000, every: 10 },
    fork: { tracer_cycles: 10 }
  }.freeze
  LONG = {
    attach: { semaphore_cycles: 10_000, bpftrace_cycles: 1_000 },
    two: { cycles: 20 },
    reload: { reloads: 1_000, every: 1 },
    fork: { tracer_cycles: 100 }
  }.freeze

  # What a scenario could not go on from: a process that died, a wait that
  # timed out.
  class Failure < StandardError; end

  # How much may change between the baseline, taken after a warm-up, and the
  # end; the same for every count of cycles.
  module Bounds
    # The allocator's bytes in use (kB, after a full GC: see Target::ALLOCATOR)
    # may grow by this much: measured, 1 kB over 20,000 attach/detach cycles.
    # The leak these cycles found (a wrapper compiled at each attach, whose
    # keyword call sites Ruby 3.1 never freed) held 0.5 kB a cycle: 1.5 MB
    # over the short form's 3,000. A leak of 32 bytes a cycle shows there.
    HEAP_KB = 64
    # A provider grown by a thousand reloads may hold this much more heap
    # (kB) than the same provider loaded once: its tables grew by doubling
    # where the other's were sized at once (measured, 24 to 36 kB).
    RELOAD_HEAP_KB = 128
    # Resident memory may grow by this much (kB): it counts what the
    # allocator holds free too, as requests, wrappers and tracers come and
    # go (measured: 100 kB over 20,000 semaphore cycles, 540 kB at most in
    # a full `rake soak`, by less and less as it goes on).
    RSS_KB = 1024
    # Ruby's live objects after a full GC, counted while the workers wait
    # between two calls, may be this share more: what the threads
    # answering requests hold then (measured: 100 to 120 of 28,800).
    LIVE_SLOTS_SHARE = 0.02
    # Descriptors, mappings of files (stubs, and others), threads and the
    # process's files in its stub directory are held for good or not at
    # all: exactly equal. (A descriptor open only while the state file is
    # written is not held: the target counts with the gem's lock held; nor
    # is a thread answering a request: the target makes them at the start.)
    # A provider that grows maps more of its stub, elsewhere (see
    # ReloadChurn): there, the mappings of other files are equal.
    EXACT = %w[fds stub_maps file_maps threads files].freeze
    # Anonymous mappings are reported, not bounded: they are the
    # allocators' (glibc's arenas; Ruby's heap pages from Ruby 3.2 on, each
    # mapped on its own), and neighbours merge or split as pages come and
    # go (Ruby 3.4: 214, 213, 214). What they hold, the heap bound bounds.
    UNBOUNDED = %w[anonymous_maps].freeze
    # A method is wrapped within attach_delay of a tracer attaching, and
    # unwrapped within it of the last one leaving, when the process gets
    # the CPU (docs/modes.md): the poller scans every attach_delay / 2, and
    # the other half is for the watcher's thread to get the GVL and wrap.
    # That is a speed, measured by `rake bench` (the attach_wrap table); here
    # the median, 99th percentile and the share later than attach_delay are
    # reported, not bounded. With four bpftrace starting at once beside four
    # busy threads on two cores, or the whole machine busy, a thread is at
    # times not scheduled for tens of milliseconds (measured: the median
    # from 0.7 to 5.1 ms, with attach_delay 4 ms; the slowest seen, 150 ms).
    # What is bounded is that the wrapped state follows the tracer: every
    # transition comes within LATE_LIMIT (seconds).
    LATE_LIMIT = 1.0
  end

  module_function

  def monotonic
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # Re-evaluates the block until it is truthy, every +interval+ seconds, for
  # at most +timeout+; returns its value, or raises Failure naming +what+.
  def wait_until(what, timeout: 20, interval: 0.005)
    deadline = monotonic + timeout
    loop do
      value = yield
      return value if value
      raise Failure, "timed out after #{timeout}s waiting until #{what}" if monotonic > deadline

      sleep interval
    end
  end

  # The processes a scenario started, killed together at the end.
  class Processes
    def initialize
      @lock = Mutex.new
      @processes = []
    end

    def track(process)
      @lock.synchronize { @processes << process }
      process
    end

    def forget(process)
      @lock.synchronize { @processes.delete(process) }
    end

    def kill_all
      @lock.synchronize { @processes.dup }.reverse_each(&:kill)
      @lock.synchronize { @processes.clear }
    end
  end

  # The target process (see its header), driven over its stdin and stdout.
  # Its stderr goes to a file, shown when something fails.
  class Target
    # How glibc's allocator is set in the target, for what it holds to be
    # measured exactly. It makes a new arena (a heap: two mappings) whenever
    # threads happen to contend for the ones there are, up to 8 per core, at
    # any moment, as scheduling goes: capped at 2, as many Ruby servers cap
    # it, all are made during the warm-up. And each thread keeps chunks it
    # freed in a cache of its own (tcache: up to 7 of each of 64 sizes),
    # which counts as in use and fills for as long as rarer sizes come and
    # go (measured: 360 kB over 40,000 attach/detach cycles, by less and
    # less): without it, the heap in use is flat to the kilobyte.
    ALLOCATOR = { "MALLOC_ARENA_MAX" => "2", "GLIBC_TUNABLES" => "glibc.malloc.tcache_count=0" }.freeze

    attr_reader :pid, :stub_dir

    def initialize(stub_dir:, attach_delay:, workers: 4, timeout: 30)
      @stub_dir = stub_dir
      FileUtils.mkdir_p(File.dirname(stub_dir))
      @log = File.join(File.dirname(stub_dir), "#{File.basename(stub_dir)}.log")
      env = { "STATIC_TRACING_MODE" => "attach", "STATIC_TRACING_ATTACH_DELAY" => attach_delay.to_s,
              "STATIC_TRACING_DIR" => stub_dir, "CHURN_WORKERS" => workers.to_s, **ALLOCATOR }
      @stdin, @stdout, @thread = Open3.popen2(env, RbConfig.ruby, "-I", E2E::LIB, TARGET,
                                              pgroup: true, err: @log)
      @pid = @thread.pid
      @lock = Mutex.new
      @answered = ConditionVariable.new
      @answers = {}
      @next_id = 0
      wait_ready(timeout)
      @reader = Thread.new { read_answers }
    end

    # Sends COMMAND ARGS and returns the parsed answer; raises Failure on an
    # error answer, or when none comes within +timeout+ seconds.
    def request(command, *args, timeout: REQUEST_TIMEOUT)
      id = @lock.synchronize { @next_id += 1 }
      @stdin.puts([id, command, *args].join(" "))
      @stdin.flush
      answer = wait_answer(id, timeout) or
        raise Failure, "#{name}: no answer to #{command} #{args.join(" ")} within #{timeout}s" \
                       "#{" (it exited)" unless alive?}\n#{log}"
      status, payload = answer
      raise Failure, "#{name}: #{command} #{args.join(" ")}: #{payload}" unless status == "ok"

      JSON.parse(payload)
    rescue Errno::EPIPE, IOError
      raise Failure, "#{name} is gone (#{@thread.value.inspect}):\n#{log}"
    end

    # What the process holds (see the target's footprint), and how many
    # files of its own are in its stub directory. Its mappings are told
    # apart: of files in the stub directory, of other files, anonymous.
    def footprint
      footprint = request("footprint")
      maps = footprint.delete("maps")
      footprint.merge("anonymous_maps" => maps - footprint["stub_maps"] - footprint["file_maps"],
                      "files" => own_files.size)
    end

    # The files in the stub directory named after this process: its stubs,
    # state file and control channel (not its children's).
    def own_files
      key = StubNames.process_key(@pid)
      Dir.children(@stub_dir).select { |file| file.start_with?("#{key}.") || file.include?("-#{key}-") }
    end

    def alive?
      @thread.alive?
    end

    def log
      File.exist?(@log) ? File.read(@log) : ""
    end

    # Kills the process and its children (its process group).
    def kill
      Process.kill("KILL", -@pid) if alive?
      @thread.join(5)
    rescue Errno::ESRCH
      nil
    ensure
      [@stdin, @stdout].each { |io| io.close unless io.closed? }
    end

    def name
      "churn target #{@pid}"
    end

    private

    def wait_ready(timeout)
      ready = @stdout.wait_readable(timeout) && @stdout.gets
      return if ready&.start_with?("CHURN_READY")

      kill
      raise Failure, "the churn target did not start (#{ready.inspect}):\n#{log}"
    end

    def wait_answer(id, timeout)
      deadline = Churn.monotonic + timeout
      @lock.synchronize do
        until @answers.key?(id) || @closed || Churn.monotonic > deadline
          @answered.wait(@lock, [deadline - Churn.monotonic, 0.001].max)
        end
        @answers.delete(id)
      end
    end

    def read_answers
      @stdout.each_line do |line|
        id, status, payload = line.chomp.split(" ", 3)
        @lock.synchronize do
          @answers[Integer(id, exception: false)] = [status, payload]
          @answered.broadcast
        end
      end
    rescue IOError
      nil
    ensure
      @lock.synchronize do
        @closed = true
        @answered.broadcast
      end
    end
  end

  # The semaphores of some probes of a process, read and written through
  # /proc/PID/mem (root), as the kernel writes them when a tracer attaches:
  # the attach poller cannot tell the two apart. Their addresses are found
  # as `static-tracing list` finds them, from the stub's mapping and notes.
  class Semaphores
    def initialize(pid, provider, probes)
      stub = StaticTracing::CLI::Target.new(pid).stubs.find { |candidate| candidate.provider == provider.to_s } or
        raise Failure, "process #{pid} has no stub of #{provider}"
      @addresses = probes.map do |name|
        probe = stub.probes.find { |candidate| candidate.name == name.to_s } or
          raise Failure, "#{provider}:#{name} is not in #{stub.path}"
        stub.bias + probe.semaphore
      end
      @memory = File.open("/proc/#{pid}/mem", "r+b")
    end

    def set(value)
      @addresses.each { |address| @memory.pwrite([value].pack("S<"), address) }
    end

    def values
      @addresses.map { |address| @memory.pread(2, address).unpack1("S<") }
    end

    def close
      @memory.close
    end
  end

  # What the scenarios measured, as a table, and what broke a bound.
  class Report
    # +figures+: [start, middle, end], any of them nil; +within+: whether
    # they keep to the bound.
    Row = Struct.new(:scenario, :what, :figures, :bound, :within)
    HEADERS = ["scenario", "measure", "start", "middle", "end", "bound", ""].freeze
    # Columns of figures, right-aligned.
    FIGURES = (2..4)

    attr_reader :rows, :failures

    def initialize
      @lock = Mutex.new
      @rows = []
      @failures = []
    end

    # A measure taken at the start (after the warm-up), in the middle and
    # at the end (+figures+), and its bound; a failure unless +within+ it.
    def measure(scenario, what, figures, bound:, within:)
      add(Row.new(scenario, what, figures, bound, within))
      failed(scenario, "#{what}: #{figures.first} at the start, #{figures.last} at the end, bound #{bound}") unless
        within
    end

    # One figure (the end column), bounded or not.
    def fact(scenario, what, value, bound: nil, within: true)
      add(Row.new(scenario, what, [nil, nil, value], bound, within))
      failed(scenario, "#{what}: #{value}, bound #{bound}") unless within
    end

    def failed(scenario, message)
      @lock.synchronize { @failures << "#{scenario}: #{message}" }
    end

    def ok?
      @failures.empty?
    end

    # Each measure of three footprints (the middle one may be nil) against
    # Bounds.
    def footprints(scenario, start, middle, finish)
      start.each_key do |key|
        values = [start[key], middle&.[](key), finish[key]]
        bound, within = bound_of(key, values)
        measure(scenario, key.tr("_", " "), values, bound:, within:)
      end
    end

    def to_s
      table = [HEADERS] + rows.map { |row| cells(row) }
      widths = HEADERS.each_index.map { |column| table.map { |line| line[column].size }.max }
      lines = table.map { |line| format_line(line, widths) }
      lines.insert(1, widths.map { |width| "-" * width }.join("  "))
      (lines + failure_lines).join("\n")
    end

    private

    def add(row)
      @lock.synchronize { @rows << row }
    end

    def failure_lines
      failures.empty? ? [] : ["", "Failed:", *failures.map { |failure| "  #{failure}" }]
    end

    def cells(row)
      [row.scenario, row.what, *row.figures.map { |figure| cell(figure) }, row.bound.to_s,
       row.within ? "ok" : "FAILED"]
    end

    def format_line(line, widths)
      line.each_with_index.map do |value, column|
        FIGURES.cover?(column) ? value.rjust(widths[column]) : value.ljust(widths[column])
      end.join("  ").rstrip
    end

    def bound_of(key, (start, middle, finish))
      case key
      when "rss_kb" then ["+#{Bounds::RSS_KB} kB", finish - start <= Bounds::RSS_KB]
      when "heap_kb" then ["+#{Bounds::HEAP_KB} kB", finish - start <= Bounds::HEAP_KB]
      when "live_slots"
        ["+#{(Bounds::LIVE_SLOTS_SHARE * 100).round}%", finish <= start * (1 + Bounds::LIVE_SLOTS_SHARE)]
      when *Bounds::EXACT then ["equal", [start, middle || start, finish].uniq.size == 1]
      when *Bounds::UNBOUNDED then ["", true]
      else raise ArgumentError, "no bound for #{key}"
      end
    end

    def cell(value)
      case value
      when nil then ""
      when Float then format("%.2f", value)
      when Integer then value.to_s.gsub(/(\d)(?=(\d{3})+\z)/, "\\1,")
      else value.to_s
      end
    end
  end
end

require_relative "churn/scenarios"
