# frozen_string_literal: true

require "bigdecimal"
require "fileutils"
require "json"
require "static_tracing/cli"
require "tmpdir"
require "zlib"

# `static-tracing report FILE...`, run through CLI.run on trace files that
# TraceImage writes and rings that RingImage lays out.
RSpec.describe "static-tracing report" do
  let(:trace_file) { StaticTracing::CLI::TraceFile }
  let(:dir) { Dir.mktmpdir("report") }
  # The wall clock of every file here: the Unix epoch at monotonic 0, so
  # that a record's time is its wall-clock time.
  let(:epoch) { 1_700_000_000_000_000_000 }
  let(:index) { probe(0, "my_controller", "index", ["Integer"], latency_arg: 0) }
  let(:hits) { probe(1, "app", "hits", %w[String Integer Float]) }
  let(:stack) { probe(2, "my_controller_stack", "index", ["String"], stack_arg: 0) }

  after { FileUtils.rm_rf(dir) }

  # +arguments+: latency_arg: and stack_arg:, the indexes of those arguments.
  def probe(id, provider, name, types, **arguments)
    trace_file::Probe.new(id, provider, name, types, arguments[:latency_arg], arguments[:stack_arg])
  end

  def record(probe, args, time:, tid: 7)
    trace_file::Record.new(nil, time, probe, tid, args)
  end

  # Calls of +index+ lasting +latencies+ (ns), one every microsecond from
  # +start+ (ns).
  def calls(latencies, start: 1_000_000)
    latencies.each_with_index.map { |latency, number| record(index, [latency], time: start + (number * 1000)) }
  end

  # A trace file holding +records+; +header+: the TraceImage fields (process
  # 4321 unless it says), +counters+: records_total: and dropped:.
  def trace(name, records, probes: [index, hits, stack], header: {}, **counters)
    writer = TraceImage.new(pid: 4321, anchor_monotonic_ns: 0, anchor_realtime_ns: epoch, **header)
    path = File.join(dir, name)
    File.binwrite(path, writer.bytes(probes:, records:, **counters))
    path
  end

  def histogram(stdout, label)
    stdout.split("\n\n").find { |block| block.start_with?("#{label}  ") }.lines.drop(1).map(&:rstrip)
  end

  describe "text" do
    it "sums up what was read: files, processes, records, their time span, records lost and why" do
      first = trace("a.trace", calls([1000] * 10), records_total: 20, dropped: 2)
      flight = trace("b.trace", calls([1000] * 2, start: 6_000_000), records_total: 5,
                                                                     header: { pid: 999, overwrite: true })
      result = cli("report", first, flight)
      expect(result).to have_attributes(exitstatus: 0, stderr: "")
      # 10 + 2 records from 1ms to 6.001ms; lost: 2 dropped, 20 - 10 in a
      # ring not in flight mode, 5 - 2 in one that was.
      expect(result.stdout.lines.first).to eq(
        "Read 2 files: processes 4321, 999, 12 records over 5ms; 15 lost (2 dropped because the ring (or its " \
        "probe table) was full, 3 overwritten in flight mode, 10 being written when the ring was read).\n"
      )
      single = cli("report", trace("c.trace", calls([5])))
      expect(single.stdout.lines.first).to eq("Read 1 file: process 4321, 1 record over 0ns; none lost.\n")
      # 999.999ms, which rounds to 1000ms: shown as 1s.
      second = cli("report", trace("e.trace", calls([1, 1]) + calls([1], start: 1_000_999_000)))
      expect(second.stdout.lines.first).to eq("Read 1 file: process 4321, 3 records over 1s; none lost.\n")
      empty = cli("report", trace("d.trace", []))
      expect(empty.stdout).to start_with("Read 1 file: process 4321, 0 records; none lost.\n")
    end

    it "counts the calls of each probe, and gives a latency probe's p50, p90, p99 and max by nearest rank" do
      records = calls((1..10).map { |ms| ms * 1_000_000 }) +
                [record(hits, ["x", 1, 0.5], time: 20_000_000), record(hits, ["y", 2, 1.5], time: 20_000_001)]
      result = cli("report", trace("a.trace", records))
      # Ranks ceil(0.5 * 10) = 5, ceil(0.9 * 10) = 9, ceil(0.99 * 10) = 10.
      expect(result.stdout).to include("\n\nmy_controller:index  10 calls, p50 5ms, p90 9ms, p99 10ms, max 10ms\n")
      expect(result.stdout).to include("\n\napp:hits  2 calls\n")
      expect(result.stdout).to include("\n\nmy_controller_stack:index  no calls\n")
      hundred = cli("report", trace("b.trace", calls((1..100).map { |us| us * 1000 })))
      expect(hundred.stdout).to include("my_controller:index  100 calls, p50 50us, p90 90us, p99 99us, max 100us\n")
    end

    # bpftrace's hist(arg0 / 1000) of these: arg0 / 1000 truncates toward
    # zero, so -1500ns is -1 ("< 0"), -5, 0 and 999ns are [0], 1000 and
    # 1999ns are [1], 2000 and 3999ns [2, 4), 4000ns [4, 8), 1.5ms
    # (1500us) [1K, 2K), with every empty bucket between.
    it "shows the latencies in the buckets bpftrace's hist() of arg0 / 1000 fills, as `latency` labels them" do
      result = cli("report", trace("a.trace", calls([-1500, -5, 0, 999, 1000, 1999, 2000, 3999, 4000, 1_500_000])))
      expect(histogram(result.stdout, "my_controller:index")).to eq(
        [
          "  < 0               1 |@@@@@@@@@@@@@@@@@                                   |",
          "  < 1us             3 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|",
          "  [1us, 2us)        2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                  |",
          "  [2us, 4us)        2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                  |",
          "  [4us, 8us)        1 |@@@@@@@@@@@@@@@@@                                   |",
          *%w[8us 16us 32us 64us 128us 256us 512us].each_cons(2).map do |low, high|
            "  #{"[#{low}, #{high})".ljust(16)}  0 |#{" " * 52}|"
          end,
          "  [512us, 1.02ms)   0 |                                                    |",
          "  [1.02ms, 2.05ms)  1 |@@@@@@@@@@@@@@@@@                                   |"
        ]
      )
    end

    # bpftrace's hist(arg0 / 1000), written out: C's division truncates
    # toward zero; a negative value counts in "< 0", 0 in [0], any other n
    # in the bucket of its bit length ([1], [2, 4), [4, 8), ...); the
    # buckets shown run from the lowest counted to the highest. Each as
    # [bucket, count], -1 for "< 0" and k for [2^(k-1), 2^k).
    def bpftrace_hist(nanoseconds)
      counts = Hash.new(0)
      nanoseconds.each do |ns|
        microseconds = ns.negative? ? -(-ns / 1000) : ns / 1000
        counts[microseconds.negative? ? -1 : microseconds.bit_length] += 1
      end
      (counts.keys.min..counts.keys.max).map { |bucket| [bucket, counts[bucket]] }
    end

    it "buckets any durations as bpftrace's hist() of arg0 / 1000 would" do
      random = Random.new(42)
      samples = [[-1000], [-999], [999], [1000], [0, 2**62], [-(2**62), 5]] +
                Array.new(50) do
                  Array.new(random.rand(1..300)) do
                    random.rand(-(10**random.rand(1..7))..(2**random.rand(1..62)))
                  end
                end
      probes = samples.each_index.map { |id| probe(id, "bench", "sample_#{id}", ["Integer"], latency_arg: 0) }
      records = samples.each_with_index.flat_map do |nanoseconds, id|
        nanoseconds.map { |ns| record(probes[id], [ns], time: 1_000) }
      end
      result = cli("report", "--format", "json", trace("samples.trace", records, probes:))
      reported = JSON.parse(result.stdout)["probes"].to_h { |entry| [entry["name"], entry["latency"]["histogram"]] }
      samples.each_with_index do |nanoseconds, id|
        buckets = reported.fetch("sample_#{id}").map do |bucket|
          low = bucket["low_ns"]
          index = if low.nil? then -1
                  elsif low == -999 then 0
                  else
                    (low / 1000).bit_length
                  end
          [index, bucket["count"]]
        end
        expect(buckets).to eq(bpftrace_hist(nanoseconds)), nanoseconds.inspect
      end
    end

    it "starts the histogram at the lowest bucket filled and ends it at the highest" do
      result = cli("report", trace("a.trace", calls([5_000, 6_000, 20_000])))
      expect(histogram(result.stdout, "my_controller:index")).to eq(
        [
          "  [4us, 8us)    2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|",
          "  [8us, 16us)   0 |                                                    |",
          "  [16us, 32us)  1 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |"
        ]
      )
    end

    it "merges several files into one report: a probe in two files is one line, its calls summed" do
      first = trace("a.trace", calls([1000, 2000]) + [record(hits, ["x", 1, 0.5], time: 5)])
      second = trace("b.trace", calls([3000] * 3), probes: [index], header: { pid: 5555 })
      result = cli("report", first, second)
      expect(result).to have_attributes(exitstatus: 0, stderr: "")
      expect(result.stdout.scan(/^my_controller:index .*$/))
        .to eq(["my_controller:index  5 calls, p50 3us, p90 3us, p99 3us, max 3us"])
      expect(result.stdout.scan(/^app:hits .*$/)).to eq(["app:hits  1 call"])
      expect(histogram(result.stdout, "my_controller:index").map { |row| row[/\A +\S+(?: \S+)? +(\d+) \|/, 1] })
        .to eq(%w[1 4])
    end

    it "reads a live ring as it is" do
      ring = RingImage.new(slot_count: 8, anchor_monotonic_ns: 0, anchor_realtime_ns: epoch)
      id = ring.add_probe("my_controller", "index", [:Integer], latency_arg: 0)
      3.times { |number| ring.append(id, [(number + 1) * 1000], time: number) }
      result = cli("report", ring.write(File.join(dir, "4321-4026531836.ring")))
      expect(result).to have_attributes(exitstatus: 0, stderr: "")
      expect(result.stdout).to start_with("Read 1 file: process 4321, 3 records over 2ns; none lost.\n\n" \
                                          "my_controller:index  3 calls, p50 2us, p90 3us, p99 3us, max 3us\n")
    end
  end

  describe "--format chrome" do
    # The events, their numbers read as JavaScript viewers read them: doubles.
    def events(stdout)
      JSON.parse(stdout)
    end

    # Microseconds from time 0 (the first call's start here, `first`
    # nanoseconds after the epoch), as a viewer reads them.
    def micros(nanoseconds, first: 1_000_000 - 2_500_001)
      (nanoseconds - first) / 1000.0
    end

    def expect_exact_step(value)
      # A whole number of 1/1024 µs: what a double holds exactly.
      expect((value * 1024) % 1).to eq(0), "#{value} is not a step"
    end

    let(:records) do
      calls([2_500_001, -3]) + [record(hits, ["a \"quoted\"\nline", -(2**63), Float::NAN], time: 9_000_123, tid: 8),
                                record(stack, ["main;work"], time: 9_500_000, tid: 8)]
    end

    it "is Trace Event Format JSON: an array of events, each with the fields its phase requires" do
      result = cli("report", "--format", "chrome", trace("a.trace", records),
                   trace("b.trace", calls([1]), header: { pid: 9 }))
      expect(result).to have_attributes(exitstatus: 0, stderr: "")
      events = events(result.stdout)
      expect(events).to all(include("name", "ph", "ts", "pid", "tid"))
      # Three calls, the stack's two frames as a timeline, and each track's
      # CPU profile (a Profile and a ProfileChunk event each).
      expect(events.group_by { |event| event["ph"] }.transform_values(&:size))
        .to eq("M" => 2, "X" => 5, "i" => 2, "P" => 6)
      expect(events.select { |event| event["ph"] == "X" }).to all(include("dur"))
      expect(events.select { |event| event["ph"] == "i" }).to all(include("s" => "t"))
      expect(events.select { |event| event["ph"] == "P" }).to all(include("id", "args"))
      # The wall-clock time of time 0: the earliest thing the files show,
      # here the first call's start (its end less its latency).
      origin = epoch + 1_000_000 - 2_500_001
      expect(events.select { |event| event["ph"] == "M" }.map { |event| [event["name"], event["pid"], event["args"]] })
        .to eq([["process_name", 4321, { "name" => "ruby 4321", "time_origin" => "2023-11-14T22:13:19.998499999Z",
                                         "time_origin_ns" => origin.to_s }],
                ["process_name", 9, { "name" => "ruby 9", "time_origin" => "2023-11-14T22:13:19.998499999Z",
                                      "time_origin_ns" => origin.to_s }]])
    end

    it "starts a call's complete event at its end less its latency, in exact steps within a nanosecond" do
      events = events(cli("report", "--format", "chrome", trace("a.trace", records)).stdout)
      calls = events.select { |event| event["ph"] == "X" && event["cat"] != "stack" }
      expect(calls.map { |event| [event["name"], event["cat"], event["tid"], event["args"]] })
        .to eq([["my_controller:index", "my_controller", 7, nil]] * 2)
      # The first call starts at the first record; the second, whose latency
      # is negative, lasts nothing.
      expect(calls[0]["ts"]).to eq(0)
      expect(calls[1]["ts"]).to be_within(0.0005).of(micros(1_001_000))
      expect(calls[0]["dur"]).to be_within(0.001).of(2500.001)
      expect(calls[1]["dur"]).to eq(0)
      calls.each { |event| [event["ts"], event["dur"]].each { |value| expect_exact_step(value) } }
    end

    it "makes a timeline of the stacks: a complete event per frame, until the thread's next stack or the last record" do
      stacks = [record(stack, ["main;a;b"], time: 1_000), record(stack, ["main;a;c"], time: 3_000),
                record(stack, ["main"], time: 4_000), record(hits, ["x", 1, 0.5], time: 10_000, tid: 9)]
      events = events(cli("report", "--format", "chrome", trace("a.trace", stacks)).stdout)
      frames = events.select { |event| event["cat"] == "stack" }
      expect(frames).to all(include("ph" => "X", "tid" => 7, "pid" => 4321))
      # In preorder (as viewers nest them), in microseconds from the first
      # record, a whole number of them here.
      expect(frames.map { |event| [event["name"], event["ts"], event["dur"]] }).to eq(
        [["main", 0, 9], ["a", 0, 3], ["b", 0, 2], ["c", 2, 1]]
      )
    end

    it "names the threads whose names the file holds after its slots" do
      names = { 7 => "puma srv tp 001", 8 => "worker \"é\"" }
      path = trace("a.trace", records, thread_names: names)
      events = events(cli("report", "--format", "chrome", path).stdout)
      expect(events.select { |event| event["name"] == "thread_name" }.map { |event| [event["tid"], event["args"]] })
        .to eq([[7, { "name" => "puma srv tp 001" }], [8, { "name" => "worker \"é\"" }]])
      # Read as before by what reads the records alone.
      expect(trace_file.read(path).records.size).to eq(4)
    end

    it "makes an instant event of a record of any other probe, with its arguments" do
      events = events(cli("report", "--format", "chrome", trace("a.trace", records)).stdout)
      instants = events.select { |event| event["ph"] == "i" }
      expect(instants.map { |event| [event["name"], event["tid"], event["args"]] }).to eq(
        [["app:hits", 8, { "arg0" => "a \"quoted\"\nline", "arg1" => -(2**63), "arg2" => "NaN" }],
         ["my_controller_stack:index", 8, { "arg0" => "main;work" }]]
      )
      expect(instants[0]["ts"]).to be_within(0.0005).of(micros(9_000_123))
      expect(instants[1]["ts"]).to be_within(0.0005).of(micros(9_500_000))
      instants.each { |event| expect_exact_step(event["ts"]) }
    end
  end

  describe "--format folded" do
    it "counts each distinct stack, one `stack count` line each, sorted, for flamegraph.pl" do
      records = %w[main;a;b main;a main;a;b].each_with_index.map { |text, time| record(stack, [text], time:) } +
                [record(stack, ["bad\nline;x"], time: 5), record(stack, [""], time: 6)] + calls([1000])
      second = trace("b.trace", [record(stack, ["main;a"], time: 1)], probes: [stack])
      result = cli("report", "--format", "folded", trace("a.trace", records), second)
      expect(result).to have_attributes(exitstatus: 0, stderr: "")
      # A line break in a stack would break the line: it shows as "?".
      expect(result.stdout).to eq("bad?line;x 1\nmain;a 2\nmain;a;b 2\n")
    end

    it "writes a leaf frame ending in a space and a number so that it cannot read as a differential count" do
      records = [record(stack, ["<main>;worker 7"], time: 1), record(stack, ["<main>;worker 7"], time: 2)]
      result = cli("report", "--format", "folded", trace("a.trace", records))
      expect(result).to have_attributes(exitstatus: 0, stdout: "<main>;worker_7 2\n")
    end

    it "says clearly that there is nothing to fold when no probe has a stack argument" do
      path = trace("a.trace", calls([1]), probes: [index])
      result = cli("report", "--format", "folded", path)
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to eq(
        "static-tracing: no stack probes in #{path} (probes with a stack argument, as StackTracer makes), " \
        "so no stacks to fold; probes: my_controller:index\n"
      )
    end
  end

  describe "-o OUTPUT" do
    let(:output) { File.join(dir, "report.txt") }

    # The report written to a terminal (its stdout says it is one).
    def report_to_terminal(*args)
      terminal = StringIO.new.tap { |io| io.define_singleton_method(:tty?) { true } }
      err = StringIO.new
      status = StaticTracing::CLI.run(["report", *args], out: terminal, err:, env: ENV)
      [status, terminal.string, err.string]
    end

    it "refuses to write pprof's gzip to a terminal unless -o names a file, and takes -o - for stdout" do
      path = trace("a.trace", calls([1000]))
      expect(report_to_terminal("--format", "pprof", path)).to eq(
        [2, "", "static-tracing report: --format pprof is binary (gzip): name a file with -o FILE, or pipe it " \
                "(-o - writes it to the terminal anyway) (see static-tracing report --help)\n"]
      )
      status, written, = report_to_terminal("--format", "pprof", "-o", "-", path)
      expect([status, Zlib.gunzip(written)]).to match([0, include("my_controller:index")])
      # Text formats go to a terminal as they are; -o - is stdout for any.
      expect(report_to_terminal("--format", "folded", "-o", "-", trace("b.trace", [record(stack, ["main"], time: 1)])))
        .to eq([0, "main 1\n", ""])
      expect(Dir.children(dir)).not_to include("-")
    end

    it "refuses to overwrite a file it reads" do
      path = trace("a.trace", calls([1000]))
      link = File.join(dir, "link.trace")
      File.link(path, link)
      [path, link].each do |target|
        result = cli("report", path, "-o", target)
        expect(result).to have_attributes(exitstatus: 2, stdout: "")
        expect(result.stderr).to eq("static-tracing report: -o #{target} is #{path}, a file this report reads: name " \
                                    "another output (see static-tracing report --help)\n")
      end
      expect(trace_file.read(path).records.size).to eq(1)
    end

    it "writes the report to OUTPUT instead of stdout" do
      result = cli("report", "-o", output, trace("a.trace", calls([1000])))
      expect(result).to have_attributes(exitstatus: 0, stdout: "", stderr: "")
      expect(File.read(output)).to start_with("Read 1 file: process 4321, 1 record over 0ns; none lost.\n")
    end

    it "leaves OUTPUT as it was when an input is bad, and says why in one line" do
      File.write(output, "the last report\n")
      good = trace("a.trace", calls([1000]))
      bad = File.join(dir, "bad.trace")
      File.binwrite(bad, File.binread(good).tap { |bytes| bytes[8, 4] = [7].pack("L<") })
      [[bad], [good, bad], [good, File.join(dir, "missing.trace")], [good, dir]].each do |inputs|
        result = cli("report", "-o", output, *inputs)
        expect(result).to have_attributes(exitstatus: 1, stdout: "")
        expect(result.stderr).to start_with("static-tracing: ").and end_with("\n")
        expect(result.stderr.lines.size).to eq(1)
        expect(result.stderr).not_to include(".rb:")
      end
      expect(cli("report", "-o", output, bad).stderr).to eq(
        "static-tracing: #{bad}: format version (offset 8): expected 1 or 2 " \
        "(the versions this static-tracing reads), found 7\n"
      )
      expect(File.read(output)).to eq("the last report\n")
    end

    it "leaves OUTPUT as it was when the report cannot be made of good inputs" do
      File.write(output, "the last report\n")
      result = cli("report", "--format", "folded", "-o", output, trace("a.trace", calls([1]), probes: [index]))
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(File.read(output)).to eq("the last report\n")
    end

    it "says so when OUTPUT cannot be written" do
      missing = File.join(dir, "no", "report.txt")
      result = cli("report", "-o", missing, trace("a.trace", calls([1])))
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to eq("static-tracing: cannot write the report to #{missing}: No such file or directory\n")
    end
  end

  describe "command line" do
    it "refuses an unknown format, and no FILE, as usage errors" do
      path = trace("a.trace", [])
      expect(cli("report", "--format", "png", path)).to have_attributes(
        exitstatus: 2, stdout: "",
        stderr: "static-tracing report: --format must be one of text, json, chrome, speedscope, pprof, folded, " \
                "svg, got \"png\" (see static-tracing report --help)\n"
      )
      expect(cli("report")).to have_attributes(
        exitstatus: 2, stdout: "",
        stderr: "static-tracing report: missing FILE: name one or more trace files or rings " \
                "(see static-tracing report --help)\n"
      )
    end

    it "refuses a FIFO given as FILE without waiting on it" do
      fifo = File.join(dir, "fifo")
      File.mkfifo(fifo)
      result = cli("report", fifo)
      expect(result).to have_attributes(exitstatus: 1, stdout: "",
                                        stderr: "static-tracing: cannot read #{fifo}: it is a fifo, not a " \
                                                "regular file\n")
    end

    # A fleet's dumps: each file is opened in turn (not by recursion, which
    # ran out of stack at about 2,000), and as many descriptors allowed as
    # it takes.
    it "reads thousands of files named at once" do
      paths = Array.new(3000) do |number|
        trace("worker-#{number}.trace", [record(index, [2000], time: 1_000_000)], header: { pid: 10_000 + number })
      end
      result = cli("report", "--format", "json", *paths)
      expect(result).to have_attributes(exitstatus: 0, stderr: "")
      summary = JSON.parse(result.stdout)
      expect(summary.fetch("records")).to eq(3000)
      expect(summary.fetch("files")).to eq(paths)
    end

    it "is listed in static-tracing --help, with the commands that write its files" do
      expect(cli("--help").stdout).to match(/^    record .*\n    dump .*\n    report +Summarize recorded trace files/)
      expect(cli("report", trace("a.trace", [])).exitstatus).to eq(0)
    end

    it "describes its formats in its help" do
      help = cli("report", "--help")
      expect(help).to have_attributes(exitstatus: 0, stderr: "")
      expect(help.stdout).to start_with("Usage: static-tracing report FILE... [--format FORMAT] [--probe PATTERN]... " \
                                        "[--since TIME] [--until TIME] [--trace-id HEX] [--slowest N] [-o OUTPUT]\n")
      expect(help.stdout).to include("--format FORMAT", "-o, --output OUTPUT", "p50/p90/p99/max", "Perfetto",
                                     "flamegraph.pl", "speedscope", "go tool pprof", "widths count calls (records), " \
                                                                                     "not time")
    end
  end

  describe "the formats for other programs" do
    let(:records) do
      calls([1500, 2500, 900]) +
        [record(stack, ["main;a;b"], time: 2_000_000), record(stack, ["main;a"], time: 2_000_100)]
    end

    it "json: the text report's figures" do
      result = cli("report", "--format", "json", trace("a.trace", records))
      expect(result).to have_attributes(exitstatus: 0, stderr: "")
      document = JSON.parse(result.stdout)
      expect(document).to include("records" => 5, "span_ns" => 1_000_100, "lost" => include("total" => 0))
      expect(document["probes"].first).to include(
        "probe" => "my_controller:index", "calls" => 3,
        "latency" => include("p50_ns" => 1500, "p90_ns" => 2500, "p99_ns" => 2500, "max_ns" => 2500)
      )
    end

    it "speedscope, pprof and svg: one document each, pprof gzipped" do
      path = trace("a.trace", records)
      speedscope = JSON.parse(cli("report", "--format", "speedscope", path).stdout)
      expect(speedscope["$schema"]).to eq("https://www.speedscope.app/file-format-schema.json")
      expect(speedscope["profiles"].map { |profile| profile["type"] }).to eq(%w[evented sampled])
      pprof = cli("report", "--format", "pprof", path).stdout
      expect(Zlib.gunzip(pprof)).to include("my_controller:index", "calls", "latency", "nanoseconds")
      expect(cli("report", "--format", "svg", path).stdout).to start_with("<?xml").and include("<title>main (2 calls")
    end

    it "svg refuses files without a stack probe, as folded does" do
      result = cli("report", "--format", "svg", trace("a.trace", calls([1]), probes: [index]))
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to start_with("static-tracing: no stack probes in ")
    end

    it "folded and svg say there are no stacks when the stack probe recorded none, and leave -o alone" do
      path = trace("a.trace", calls([1]))
      output = File.join(dir, "flame.svg")
      File.write(output, "before")
      %w[folded svg].each do |format|
        result = cli("report", "--format", format, path, "-o", output)
        expect(result).to have_attributes(exitstatus: 1, stdout: "")
        expect(result.stderr).to eq(
          "static-tracing: no stacks in #{path}: the stack probes (my_controller_stack:index) recorded none " \
          "(or none that --probe, --since and --until keep), so there is nothing to fold\n"
        )
        expect(File.read(output)).to eq("before")
      end
    end

    it "labels the flame graph's root bar, and draws a stack cut at its root as a tower of its own" do
      stacks = [record(stack, ["[truncated];Integer#times;App#work"], time: 1),
                record(stack, ["<main>;Integer#times;App#work"], time: 2)]
      svg = cli("report", "--format", "svg", trace("a.trace", stacks)).stdout
      root = "all \\(2 calls, 100%\\)"
      expect(svg).to match(%r{<title>#{root}</title><rect [^>]*/><text [^>]*>#{root}</text>})
      expect(svg).to include("<title>[truncated] (1 calls, 50.00%)</title>",
                             "<title>&lt;main&gt; (1 calls, 50.00%)</title>")
    end
  end

  describe "--probe, --since and --until" do
    it "refuses a probe pattern that names no probe of the files, saying which probes there are" do
      path = trace("a.trace", calls([1000]))
      result = cli("report", path, "--probe", "my_controller", "--probe", "nosuch:*")
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to eq("static-tracing: --probe nosuch:* names no probe of #{path}; their probes: " \
                                  "my_controller:index, app:hits, my_controller_stack:index\n")
    end

    it "refuses times and durations a trace's clock cannot hold, in one line" do
      path = trace("a.trace", calls([1000]))
      [["--until", "9999-12-31T23:59:59Z", "is outside the times a trace's clock can hold (1677-09-21T00:12:43Z " \
                                           "to 2262-04-11T23:47:16Z)"],
       ["--since", "1500-01-01T00:00:00Z", "is outside the times a trace's clock can hold (1677-09-21T00:12:43Z " \
                                           "to 2262-04-11T23:47:16Z)"],
       ["--since", "99999999999s", "is longer than a trace's clock can hold (292 years)"]].each do |option, time, why|
        result = cli("report", path, option, time)
        expect(result).to have_attributes(exitstatus: 2, stdout: "")
        expect(result.stderr).to eq("static-tracing report: #{option} #{time} #{why} (see static-tracing report " \
                                    "--help)\n")
      end
    end

    it "takes rbspy's names of the flame graph formats" do
      path = trace("a.trace", [record(stack, ["main;a"], time: 1)])
      expect(cli("report", path, "--format", "collapsed").stdout).to eq("main;a 1\n")
      expect(cli("report", path, "--format", "flamegraph").stdout).to start_with("<?xml")
    end

    let(:records) do
      calls([1000] * 5) + [record(hits, ["x", 1, 0.5], time: 3_000_000), record(stack, ["main"], time: 9_000_000)]
    end

    it "reports on the probes the patterns name, as record takes them" do
      path = trace("a.trace", records)
      result = cli("report", path, "--probe", "app", "--probe", "*_stack:ind?x")
      expect(result).to have_attributes(exitstatus: 0, stderr: "")
      expect(result.stdout).to start_with("Read 1 file: process 4321, 2 records over 6ms; none lost.\n")
      expect(result.stdout).to include("app:hits  1 call\n", "my_controller_stack:index  1 call\n")
      expect(result.stdout).not_to include("my_controller:index")
      bad = cli("report", path, "--probe", "a:b:c")
      expect(bad).to have_attributes(exitstatus: 2, stdout: "")
      expect(bad.stderr).to start_with('static-tracing report: invalid probe pattern "a:b:c"')
    end

    it "reports on a window after the first record, or of the wall clock" do
      path = trace("a.trace", records)
      from_first = cli("report", path, "--since", "1us", "--until", "2ms")
      expect(from_first.stdout).to include("my_controller:index  4 calls", "app:hits  no calls")
      # The first record is at 1ms after the epoch given: 1.000000001s.
      wall = Time.at(Rational(epoch, 1_000_000_000)).utc
      since = (wall + Rational(3, 1000)).iso8601(9)
      from_wall = cli("report", path, "--since", since)
      expect(from_wall.stdout).to include("my_controller:index  no calls", "app:hits  1 call",
                                          "my_controller_stack:index  1 call")
      bad = cli("report", path, "--until", "yesterday")
      expect(bad).to have_attributes(exitstatus: 2, stdout: "")
      expect(bad.stderr).to start_with("static-tracing report: --until takes a duration after the first record")
    end

    it "reads a file given twice once, and says so" do
      # A name given twice, and a hard link to it.
      path = trace("a.trace", records)
      link = File.join(dir, "link.trace")
      File.link(path, link)
      result = cli("report", path, link, path)
      expect(result.exitstatus).to eq(0)
      expect(result.stderr).to eq("static-tracing: warning: #{link} is the same file as #{path}: read once\n" \
                                  "static-tracing: warning: #{path} is the same file as #{path}: read once\n")
      expect(result.stdout).to start_with("Read 1 file: process 4321, 7 records")
    end
  end

  describe "trace contexts: --trace-id and --slowest" do
    let(:trace_id) { "4bf92f3577b34da6a3ce929d0e0e4736" }
    let(:span_id) { "00f067aa0ba902b7" }
    let(:other) { %w[0af7651916cd43dd8448eb211c80319c b7ad6b7169203331] }
    # Six calls of index: two in the trace (one on another thread), one in
    # another, one whose context is unknown, two outside any.
    let(:records) do
      durations = [5_000_000, 312_000_000, 7_000_000, 45_000_000, 1_000, 2_000]
      contexts = [[trace_id, span_id], [trace_id, span_id], other, :unknown, nil, nil]
      durations.zip(contexts).each_with_index.map do |(duration, context), number|
        record(index, [duration], time: 1_000_000 + (number * 1000), tid: number == 1 ? 8 : 7)
          .tap { |each| each.context = context }
      end + [record(hits, ["x", 1, 0.5], time: 3_000_000)]
    end

    it "keeps only the records made in that trace, in any format, and says what it expects of a bad id" do
      path = trace("a.trace", records)
      result = cli("report", path, "--trace-id", trace_id)
      expect(result).to have_attributes(exitstatus: 0, stderr: "")
      expect(result.stdout).to start_with("Read 1 file: process 4321, 2 records over 1us; none lost.\n")
      expect(result.stdout).to include("my_controller:index  2 calls", "app:hits  no calls")
      chrome = JSON.parse(cli("report", path, "--trace-id", trace_id, "--format", "chrome").stdout)
      calls = chrome.select { |event| event["ph"] == "X" }
      expect(calls.map { |event| [event["tid"], event["args"]] })
        .to eq([[7, { "trace_id" => trace_id, "span_id" => span_id }],
                [8, { "trace_id" => trace_id, "span_id" => span_id }]])
      expect(cli("report", path, "--trace-id", "ffffffffffffffffffffffffffffffff").stdout)
        .to start_with("Read 1 file: process 4321, 0 records; none lost.\n")

      ["4bf9", trace_id.upcase, "0" * 32].each do |bad|
        refused = cli("report", path, "--trace-id", bad)
        expect(refused).to have_attributes(exitstatus: 2, stdout: "")
        expect(refused.stderr).to start_with("static-tracing report: --trace-id: a trace id is 32 lowercase hex " \
                                             "digits, not all zero (as in a W3C traceparent: " \
                                             "4bf92f3577b34da6a3ce929d0e0e4736); got ")
      end
    end

    it "lists each latency probe's slowest calls with their process, thread and trace context" do
      path = trace("a.trace", records)
      result = cli("report", path, "--slowest", "4")
      expect(result.stdout.split("\n\n").find { |block| block.start_with?("  slowest:") }.lines.map(&:chomp)).to eq(
        ["  slowest:",
         "  312ms  process 4321 thread 8  trace #{trace_id} span #{span_id}",
         "   45ms  process 4321 thread 7  trace context unknown",
         "    7ms  process 4321 thread 7  trace #{other[0]} span #{other[1]}",
         "    5ms  process 4321 thread 7  trace #{trace_id} span #{span_id}"]
      )
      json = JSON.parse(cli("report", path, "--format", "json").stdout)
      slowest = json["probes"].find { |probe| probe["probe"] == "my_controller:index" }["latency"]["slowest"]
      expect(slowest.size).to eq(5)
      expect(slowest.first).to eq("duration_ns" => 312_000_000, "ended_ns" => epoch + 1_001_000, "pid" => 4321,
                                  "tid" => 8, "trace_id" => trace_id, "span_id" => span_id,
                                  "context_unknown" => false)
      expect(slowest[1]).to include("trace_id" => nil, "context_unknown" => true)
      expect(cli("report", path, "--slowest", "0").stdout).not_to include("slowest")
      bad = cli("report", path, "--slowest", "-1")
      expect(bad).to have_attributes(exitstatus: 2, stdout: "")
      expect(bad.stderr).to start_with("static-tracing report: --slowest takes a count (0 or more), got \"-1\"")
    end
  end
end
