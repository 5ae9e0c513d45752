# frozen_string_literal: true

# ruby -Ilib bench/recorder/stall_process.rb ROUNDS SIZE DIR, with
# STATIC_TRACING_DIR=DIR: the process the recorder_stall group measures
# (bench/recorder_stall.rb). One thread calls a recorded LatencyTracer
# method in a tight loop and notes every gap between two of its calls
# longer than GAP_FLOOR_NS; the main thread, round after round, waits
# doing nothing (the baseline), starts a flight recording of SIZE, lets
# the calls fill the ring, dumps it, makes one call exceed the trigger's
# threshold and waits for that snapshot, and stops. The main thread spends
# each step asleep or inside the recorder: a thread spinning in Ruby would
# take the GVL from the caller for a 100 ms time slice at a time, and
# that, not the recorder, would be measured. Prints on its last line, as
# JSON, each step's duration and the longest gap that overlaps it, round
# by round.
require "json"
require "static_tracing"
require "static_tracing/trace_reader_library"

module RecorderStall
  PROVIDER = :bench_recorder_stall
  PATTERNS = ["#{PROVIDER}:*".freeze].freeze
  # The slow call sleeps past the trigger's threshold.
  SLOW_SECONDS = 0.02
  TRIGGER = "#{PROVIDER}:slow > 10ms".freeze
  # Gaps shorter than this are not kept: a call and a clock read take
  # about 0.1 us, so a gap this long is the thread kept off its CPU or out
  # of the GVL, and rare enough to keep all of them; and longer than the
  # read of the thread's CPU wait after a gap (a few us).
  GAP_FLOOR_NS = 50_000
  BASELINE_SECONDS = 1.0
  # How often the main thread looks whether the ring is full, or a
  # trigger's snapshot written: rarely, each look takes the GVL.
  POLL_SECONDS = 0.2
  STEP_TIMEOUT_SECONDS = 60

  def self.now = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)

  class Traced
    include StaticTracing::LatencyTracer.with(provider: PROVIDER)

    def call = nil
    def slow = sleep(SLOW_SECONDS)
  end

  # The thread calling Traced#call, and every gap between two calls over
  # GAP_FLOOR_NS: [from, to, how long the thread waited for a CPU since the
  # last gap ended] in ns, read once the thread has ended (reading them
  # meanwhile would be Ruby work holding the GVL). A gap's CPU wait tells
  # the stalls the machine's other work makes (the thread runnable, not
  # running) from those that leave it waiting for the GVL or the kernel.
  # The thread allocates nothing while it runs: growing its malloc arena
  # (mprotect, mmap) would make it wait for the kernel's lock on the
  # process's mappings, which the kernel holds while it maps a ring in:
  # a wait apart from the GVL's, which docs/performance.md describes.
  class Caller
    MAX_GAPS = 100_000

    attr_reader :calls, :gaps_dropped

    def initialize(traced)
      @gaps = Array.new(3 * MAX_GAPS, 0)
      @gap_count = 0
      @gaps_dropped = 0
      @calls = 0
      @running = true
      @thread = Thread.new { run(traced) }
    end

    def stop
      @running = false
      @thread.join
    end

    # [longest gap, the longest part of a gap not spent waiting for a
    # CPU] of the gaps that overlap [from, to], in ns; nil if none passed
    # GAP_FLOOR_NS.
    def longest_gaps(from, to)
      overlapping = @gaps.first(3 * @gap_count).each_slice(3).select { |start, finish, _| finish > from && start < to }
      return [nil, nil] if overlapping.empty?

      [overlapping.map { |start, finish, _| finish - start }.max,
       overlapping.map { |start, finish, cpu_wait| [finish - start - cpu_wait, 0].max }.max]
    end

    private

    def run(traced)
      File.open("/proc/thread-self/schedstat") do |schedstat|
        buffer = String.new(capacity: 128)
        cpu_wait = cpu_wait_ns(schedstat, buffer)
        previous = RecorderStall.now
        calls = 0
        while @running
          traced.call
          time = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
          if time - previous > GAP_FLOOR_NS
            waited = cpu_wait_ns(schedstat, buffer)
            keep_gap(previous, time, waited - cpu_wait)
            cpu_wait = waited
          end
          # The read counts in the next gap: what it takes to get the GVL
          # back after it is as much a stall as any.
          previous = time
          calls += 1
          # Published now and then: a write a call would show in the gaps.
          @calls = calls if (calls & 0xffff).zero?
        end
        @calls = calls
      end
    end

    def keep_gap(from, to, cpu_wait)
      if @gap_count == MAX_GAPS
        @gaps_dropped += 1
        return
      end

      at = 3 * @gap_count
      @gaps[at] = from
      @gaps[at + 1] = to
      @gaps[at + 2] = cpu_wait
      @gap_count += 1
    end

    # The time this thread has waited for a CPU, in ns: the second field
    # of its schedstat (the run delay), read into +buffer+ and parsed in
    # place, allocating nothing.
    def cpu_wait_ns(schedstat, buffer)
      schedstat.pread(128, 0, buffer)
      field = 0
      value = 0
      buffer.each_byte do |byte|
        if byte == 32
          field += 1
          break if field == 2
        elsif field == 1
          value = (value * 10) + byte - 48
        end
      end
      value
    end
  end

  # How long each snapshot's write took, by whom: the main thread's
  # dumps, the watcher's thread's trigger snapshots. The steps' own
  # durations add the wait for the GVL (up to a time slice) after it.
  module TimedSnapshots
    WRITES = { dump: [], trigger: [] }.freeze

    def write(path)
      started = RecorderStall.now
      by = Thread.current.equal?(Thread.main) ? :dump : :trigger
      super.tap { WRITES[by] << ((RecorderStall.now - started) / 1e6) }
    end
  end
  StaticTracing::Recorder::Snapshots.singleton_class.prepend(TimedSnapshots)

  # One process's rounds of steps.
  class Rounds
    Step = Struct.new(:round, :name, :from, :to, :gc_runs)

    def initialize(size, dir)
      @size = size
      @dir = dir
      @traced = Traced.new
      @steps = []
    end

    def run(rounds)
      @caller = Caller.new(@traced)
      sleep BASELINE_SECONDS # the caller's first calls are its slowest
      rounds.times { |round| one_round(round) }
      @caller.stop
      report
    ensure
      StaticTracing::Recorder.stop
    end

    private

    def one_round(round)
      step(round, :baseline) { sleep BASELINE_SECONDS }
      status = step(round, :start) do
        StaticTracing::Recorder.start(probes: PATTERNS, flight: true, size: @size, dump_when: TRIGGER,
                                      dump_dir: @dir, dump_interval: 0)
      end
      @ring_bytes = status["size"]
      @ring_dir = File.dirname(status["ring"])
      @slots = @ring_bytes / StaticTracing.trace_reader::SLOT_SIZE
      File.open(status["ring"], "rb") do |ring|
        head = StaticTracing.trace_reader::HEAD_OFFSET
        step(round, :fill) { wait_until { ring.pread(8, head).unpack1("Q<") >= @slots } }
      end
      dump(round)
      # The step starts as the slow call returns, the trigger pulled; it
      # ends once the snapshot is counted.
      step(round, :trigger, before: -> { @traced.slow }) do
        wait_until { StaticTracing::Recorder.status["dumps"].any? }
      end
      File.delete(*StaticTracing::Recorder.status["dumps"])
      step(round, :stop) { StaticTracing::Recorder.stop }
    end

    def dump(round)
      path = File.join(@dir, "dump-#{round}.trace")
      step(round, :dump) { StaticTracing::Recorder.dump(path) }
      @dump_bytes = File.size(path)
      File.delete(path)
    end

    def step(round, name, before: nil)
      gc = GC.count
      before&.call
      from = RecorderStall.now
      result = yield
      @steps << Step.new(round, name, from, RecorderStall.now, GC.count - gc)
      result
    end

    def wait_until
      deadline = RecorderStall.now + (STEP_TIMEOUT_SECONDS * 1e9)
      sleep POLL_SECONDS until yield || RecorderStall.now > deadline
      raise "not done after #{STEP_TIMEOUT_SECONDS} s" unless yield
    end

    def report
      { ring_bytes: @ring_bytes, ring_dir: @ring_dir, slots: @slots, dump_bytes: @dump_bytes, calls: @caller.calls,
        gaps_dropped: @caller.gaps_dropped,
        gap_floor_ns: GAP_FLOOR_NS, baseline_seconds: BASELINE_SECONDS, writes_ms: TimedSnapshots::WRITES,
        steps: @steps.map do |step|
          gap, not_cpu_wait = @caller.longest_gaps(step.from, step.to).map { |ns| ns && (ns / 1e6) }
          { round: step.round, step: step.name, ms: (step.to - step.from) / 1e6, longest_gap_ms: gap,
            longest_not_cpu_wait_ms: not_cpu_wait, gc_runs: step.gc_runs }
        end }
    end
  end
end

rounds, size, dir = ARGV
puts JSON.generate(RecorderStall::Rounds.new(size, dir).run(Integer(rounds)))
