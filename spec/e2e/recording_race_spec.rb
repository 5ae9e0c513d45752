# frozen_string_literal: true

require "fileutils"
require "tmpdir"
require "static_tracing/cli"

# A small ring (64K: 2048 slots) written as fast as four threads can, while
# `static-tracing` reads it from another process: followed by `record`, or
# snapshotted again and again by `dump` in flight mode. Each call's String
# is made from its Integer, unique to the call, so a torn record (bytes of
# two calls, or of a call half-written) cannot pass for a call.
RSpec.describe "The recorder's ring read while four threads write it", :subprocess do
  include CLIHelpers
  include E2E::Recording

  let(:threads) { 4 }
  let(:slot_count) { 64 * 1024 / 32 }
  let(:traces) { Dir.mktmpdir("static_tracing-race") }
  let(:app) do
    ruby_repl(<<~'RUBY')
      RACE = StaticTracing::Tracepoint.new(:rec_race, :event, Integer, String)
      WRITERS = 4
      # The String call n fires: its own number, then up to 899 bytes.
      def payload(n) = "#{n}:#{"x" * (n % 900)}"

      # Each thread fires n = WRITERS * i + thread, i = 0, 1, ..., as fast
      # as it can, until stop_writers (or 60 s have passed); it lets the
      # others run every few calls, so that their records mix in the ring.
      def start_writers
        $stop = false
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
        $writers = Array.new(WRITERS) do |thread|
          Thread.new do
            calls = 0
            until $stop || (calls % 1000 == 0 && Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline)
              n = (WRITERS * calls) + thread
              RACE.fire(n, payload(n))
              calls += 1
              Thread.pass if (calls % 4).zero?
            end
            calls
          end
        end
        nil
      end

      # Stops the writers; returns how many calls each made.
      def stop_writers
        $stop = true
        $writers.map(&:value)
      end
    RUBY
  end

  after { FileUtils.rm_rf(traces) }

  def payload(number)
    "#{number}:#{"x" * (number % 900)}"
  end

  # Every record is a whole call of rec_race:event: its String is the one
  # its Integer makes; and no call is there twice.
  def expect_whole_and_unique(trace)
    expect(trace.records.map { |record| record.probe.label }).to all(eq("rec_race:event"))
    torn = trace.records.reject do |record|
      number, string = record.args
      number.is_a?(Integer) && string == payload(number)
    end
    expect(torn.map(&:args).first(3)).to eq([])
    numbers = trace.records.map { |record| record.args.first }
    expect(numbers.uniq.size).to eq(numbers.size)
  end

  # The numbers of each thread's records, by thread id, in the order the
  # file holds them (the ring's); each thread fires only numbers of its own
  # remainder modulo the number of threads.
  def numbers_by_thread(trace)
    by_thread = trace.records.group_by(&:tid).transform_values { |records| records.map { |record| record.args.first } }
    remainders = by_thread.transform_values { |numbers| numbers.map { |number| number % threads }.uniq }
    expect(remainders.values).to all(have_attributes(size: 1))
    expect(remainders.values.flatten.uniq.size).to eq(by_thread.size)
    by_thread
  end

  # The same by each thread's remainder, which is the same in every dump.
  def numbers_by_remainder(trace)
    numbers_by_thread(trace).values.to_h { |numbers| [numbers.first % threads, numbers] }
  end

  # How many slots a record of this probe takes (docs/recording.md): the
  # first holds 8 bytes of payload, each other 24; the payload is the
  # Integer (8 bytes), then the String's length (2) and bytes.
  def slots(record)
    1 + (((8 + 2 + record.args.last.bytesize - 8) + 23) / 24)
  end

  it "is followed by record without a torn record, and with nothing lost but what a full ring dropped" do
    trace = File.join(traces, "live.trace")
    command = start_record(app.pid, "rec_race:*", "--size", "64K", "-o", trace)
    ring = published_state(app.pid).recorder.fetch("ring")
    app.evaluate("start_writers")
    # The reader has consumed the ring 16 times over while they write.
    eventually("record has read 16 rings' worth", timeout: 60, interval: 0.05) do
      ring_counters(ring)[:tail] >= 16 * slot_count
    end
    fired = app.evaluate("stop_writers")
    output = interrupt_record(command)

    recorded = read_trace(trace)
    expect_whole_and_unique(recorded)
    expect(recorded.dropped).to be_positive
    expect(recorded.lost).to eq(recorded.dropped)
    expect(recorded.records.size + recorded.dropped).to eq(fired.sum)
    expect(recorded.records.sum { |record| slots(record) }).to be >= 16 * slot_count
    # Each thread's calls in the order it made them.
    numbers_by_thread(recorded).each_value { |numbers| expect(numbers).to eq(numbers.sort) }
    expect(reported_calls(output)).to eq("rec_race:event" => recorded.records.size)
  end

  it "is dumped in flight mode again and again without a torn record, the newest kept and the rest counted lost" do
    started = run_cli("record", app.pid, "rec_race:*", "--flight", "--size", "64K")
    expect(started.exitstatus).to eq(0), started.stderr
    ring = published_state(app.pid).recorder.fetch("ring")
    app.evaluate("start_writers")

    # Dumps, each once the writers have gone round the ring twice since
    # the one before, until five hold records: a dump the writers lap as it
    # reads the ring holds none, rightly, which a busy machine makes likelier.
    dumps = []
    until dumps.count { |trace| trace.records.any? } == 5 || dumps.size == 30
      head = ring_counters(ring)[:head]
      eventually("the writers go round the ring twice", timeout: 60, interval: 0.05) do
        ring_counters(ring)[:head] >= head + (2 * slot_count)
      end
      dumps << dump(dumps.size)
    end
    expect(dumps.count { |trace| trace.records.any? }).to eq(5)
    fired = app.evaluate("stop_writers")
    last = dump("last")

    dumps.each do |trace|
      expect_whole_and_unique(trace)
      expect(trace.lost).to be_positive
      numbers_by_thread(trace).each_value { |numbers| expect(numbers).to eq(numbers.sort) }
    end
    expect(dumps.map(&:records_total)).to eq(dumps.map(&:records_total).sort.uniq)
    # The ring keeps the newest: each dump holds calls made after all those
    # of the dump before (the writers went round twice in between), and a
    # record lost as the ring was read is one being overwritten or written.
    dumps.select { |trace| trace.records.any? }.each_cons(2) do |older, newer|
      newest = numbers_by_remainder(older).transform_values(&:max)
      numbers_by_remainder(newer).each do |remainder, numbers|
        expect(numbers.min).to be > newest.fetch(remainder, -1)
      end
    end

    # Once the writers stopped, a dump holds exactly the newest calls of
    # each thread, up to its last one, and counts all the others lost.
    expect_whole_and_unique(last)
    expect(last.records_total).to eq(fired.sum)
    expect(last.records.size + last.lost).to eq(fired.sum)
    # They fill the ring but for part of one record (39 slots at most).
    expect(last.records.sum { |record| slots(record) }).to be_between(slot_count - 38, slot_count)
    numbers_by_thread(last).each_value do |numbers|
      thread = numbers.first % threads
      expect(numbers).to eq(((numbers.first / threads)...fired[thread]).map { |i| (threads * i) + thread })
    end
    expect(run_cli("record", app.pid, "--stop").stdout).to eq("Stopped recording in process #{app.pid}.\n")
  end

  # `static-tracing dump` of the app to a new trace file, read back; what it
  # says it wrote is what the file holds.
  def dump(name)
    path = File.join(traces, "dump-#{name}.trace")
    result = run_cli("dump", app.pid, "-o", path)
    expect(result.exitstatus).to eq(0), result.stderr
    trace = read_trace(path)
    expect(result.stdout).to start_with("Wrote #{trace.records.size} record")
    expect(result.stdout).to include("(#{trace.lost} record") if trace.lost.positive?
    trace
  end
end
