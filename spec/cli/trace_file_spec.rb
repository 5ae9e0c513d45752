# frozen_string_literal: true

require "fileutils"
require "static_tracing/cli"
require "timeout"
require "tmpdir"

# Reading a recorder's files (docs/recording.md, version 1): trace files
# written by TraceImage, and live rings laid out by RingImage
# (spec/support/ring_image.rb) as a process's writer would leave them,
# some while it writes.
RSpec.describe StaticTracing::CLI::TraceFile do
  let(:format_error) { described_class::FormatError }
  let(:dir) { Dir.mktmpdir("trace_file") }

  after { FileUtils.rm_rf(dir) }

  # +arguments+: latency_arg: and stack_arg:, the indexes of those arguments.
  def probe(id, provider, name, types, **arguments)
    described_class::Probe.new(id, provider, name, types, arguments[:latency_arg], arguments[:stack_arg])
  end

  def record(probe, args, time: 1_000, tid: 7)
    described_class::Record.new(nil, time, probe, tid, args)
  end

  # Writes a trace file of +contents+ (probes:, records:, and the source's
  # records_total: and dropped:) and returns its path.
  def write_trace(writer: TraceImage.new(pid: 4321), **contents)
    path = File.join(dir, "recorded.trace")
    File.open(path, "wb") { |file| writer.write(file, **contents) }
    path
  end

  def read_bytes(bytes)
    path = File.join(dir, "given.trace")
    File.binwrite(path, bytes)
    described_class.read(path)
  end

  # What a record holds, as comparable values: Floats by their bits, so
  # that NaN equals NaN and -0.0 differs from 0.0; Strings by their bytes.
  def contents(records)
    records.map do |record|
      args = record.args.map do |value|
        case value
        when Float then [:float, [value].pack("E")]
        when String then value.b
        else value
        end
      end
      [record.probe.label, record.time_ns, record.tid, args]
    end
  end

  describe "a trace file written by TraceImage, read back" do
    let(:latency) { probe(0, "my_controller", "index", ["Integer"], latency_arg: 0) }
    let(:stack) { probe(1, "my_controller_stack", "show", %w[String Integer], stack_arg: 0) }
    let(:bare) { probe(2, "app", "bare", []) }
    let(:six) do
      probe(3, "a" * 128, "B_9" * 42, %w[Integer Float String Integer String Float], latency_arg: 3, stack_arg: 4)
    end
    let(:floats) { probe(4, "app", "floats", %w[Float Float]) }
    let(:words) { probe(5, "app", "words", ["String"]) }
    let(:probes) { [latency, stack, bare, six, floats, words] }

    it "has the same probes: ids, provider and probe names, types, latency and stack arguments" do
      trace = described_class.read(write_trace(probes:, records: []))
      expect(trace.probes).to eq(probes)
      expect(trace.probes.map(&:label)).to start_with("my_controller:index", "my_controller_stack:show")
    end

    it "has the same records, in order: times, threads, Integers to the 64-bit extremes" do
      integers = [0, 1, -1, 42, (2**63) - 1, -(2**63), 2**32, -(2**31), 2**62, -(2**62) - 1]
      records = integers.each_with_index.map { |value, index| record(latency, [value], time: index, tid: index * 3) } +
                integers.each_slice(2).map { |a, b| record(six, [a, 0.5, "s", b, "", -1.0], time: (2**64) - 1, tid: 0) }
      trace = described_class.read(write_trace(probes:, records:))
      expect(contents(trace.records)).to eq(contents(records))
    end

    it "keeps Floats bit for bit: NaN, both infinities, -0.0, the extremes" do
      values = [Float::NAN, Float::INFINITY, -Float::INFINITY, -0.0, 0.0, Float::MAX, Float::MIN, 5e-324, 1.1]
      records = values.each_slice(2).map { |a, b| record(floats, [a, b || -0.0]) }
      trace = described_class.read(write_trace(probes:, records:))
      expect(contents(trace.records)).to eq(contents(records))
      expect(trace.records.first.args.first).to be_nan
      expect(trace.records[1].args.last.to_s).to eq("-0.0")
    end

    it "keeps Strings byte for byte up to max_string (1024), and cuts longer ones to their first 1024 bytes" do
      strings = ["", "a", "a;b;c", "\0\xff\n".b, "é" * 300, "x" * 1023, "y" * 1024, "z" * 1025, "w" * 5000,
                 ("é" * 600).encode("UTF-8")]
      records = strings.map { |value| record(words, [value]) }
      read = described_class.read(write_trace(probes:, records:)).records.map { |each| each.args.first }
      expect(read.map(&:encoding).uniq).to eq([Encoding::UTF_8])
      cut = ["z" * 1024, "w" * 1024, ("é" * 600).b.byteslice(0, 1024)]
      expect(read.map(&:b)).to eq(strings.first(7).map(&:b) + cut)
    end

    it "reads records of many slots, back to back, each numbered by its first slot" do
      long = "q" * 1024
      records = [record(six, [1, 2.0, long, 3, long, 4.0], time: 10), record(latency, [5], time: 11),
                 record(bare, [], time: 12), record(stack, ["main;run;work", 7], time: 13),
                 record(six, [8, 9.0, "", 10, "x" * 30, 11.0], time: 14)]
      trace = described_class.read(write_trace(probes:, records:))
      expect(contents(trace.records)).to eq(contents(records))
      # 8 + 8 + 1026 + 8 + 1026 + 8 bytes: the first slot's 8, then 24 a
      # slot, 88 slots; the stack's 2 + 13 + 8 bytes, 2 slots.
      expect(trace.records.map(&:seq)).to eq([0, 88, 89, 90, 92])
    end

    it "says how many records its source reserved and dropped, so that lost is the source's" do
      records = Array.new(4) { |index| record(latency, [index]) }
      trace = described_class.read(write_trace(probes:, records:, records_total: 10, dropped: 3))
      expect(trace).to have_attributes(records_total: 10, dropped: 3, lost: 3 + 10 - 4)
      expect(described_class.read(write_trace(probes:, records:))).to have_attributes(records_total: 4, lost: 0)
    end

    it "keeps its source's header: pid, pid namespace, clock anchors, max_string, flight mode" do
      writer = TraceImage.new(pid: 99, pid_namespace: 4_026_531_836, anchor_monotonic_ns: 5_000,
                              anchor_realtime_ns: -7, max_string: 16, overwrite: true)
      trace = described_class.read(write_trace(writer:, probes:, records: [record(words, ["x" * 40])]))
      expect(trace).to have_attributes(pid: 99, pid_namespace: 4_026_531_836, anchor_monotonic_ns: 5_000,
                                       anchor_realtime_ns: -7, max_string: 16, overwrite?: true, complete?: true)
      expect(trace.records.first.args).to eq(["x" * 16])
      expect(trace.wall_time_ns(5_010)).to eq(3)
      copy = described_class.read(write_trace(writer: TraceImage.like(trace), probes:, records: []))
      expect(copy).to have_attributes(pid: 99, pid_namespace: 4_026_531_836, anchor_monotonic_ns: 5_000,
                                      anchor_realtime_ns: -7, max_string: 16, overwrite?: true)
    end

    it "holds nothing when nothing was recorded" do
      trace = described_class.read(write_trace(probes: [], records: []))
      expect(trace).to have_attributes(probes: [], records: [], lost: 0, slot_count: 0)
    end

    it "is refused by TraceImage when it would not read back" do
      writer = TraceImage.new
      expect { writer.bytes(probes:, records: [record(latency, [1])], records_total: 0) }
        .to raise_error(ArgumentError, /records_total \(0\) is less than the 1 records given/)
      stranger = probe(0, "app", "stranger", ["Integer"])
      expect { writer.bytes(probes: [latency], records: [record(stranger, [1])]) }
        .to raise_error(ArgumentError, /its probe app:stranger is not among the probes/)
      expect { writer.bytes(probes:, records: [record(latency, [1, 2])]) }
        .to raise_error(ArgumentError, /2 arguments for probe my_controller:index\(Integer\)/)
      expect { writer.bytes(probes: [probe(0, "app", "a-b", [])], records: []) }
        .to raise_error(ArgumentError, /"a-b" is not a provider or probe name/)
      expect { writer.bytes(probes: [probe(0, "a" * 129, "b", [])], records: []) }
        .to raise_error(ArgumentError, /is not a provider or probe name/)
    end
  end

  # A live ring is read at a cut: its counters first, then its slots. A
  # record reserved after the cut (head then) is not the read's: neither
  # returned nor counted lost, however far it got (docs/recording.md).
  describe "a live ring, read as its process writes it" do
    let(:ring) { RingImage.new(slot_count: 8, overwrite: true) }
    let!(:number) { ring.add_probe("app", "number", [:Integer], latency_arg: 0) }
    let!(:text) { ring.add_probe("app", "text", [:String]) }

    def read(io = ring.io)
      described_class.from_io(io, name: "ring")
    end

    # The records whose slots the ring still holds whole: all of them start
    # a lap before head or later.
    def expected(appended)
      appended.select { |seq, _| seq >= ring[:head] - ring.slot_count }.map(&:last)
    end

    it "reads a ring that has not wrapped yet from its first record" do
      appended = [[number, [1]], [text, ["abc" * 5]], [number, [3]]].each { |id, args| ring.append(id, args) }
      trace = read
      expect(trace.records.map(&:args)).to eq(appended.map(&:last))
      expect(trace.records.map(&:seq)).to eq([0, 1, 3])
      expect(trace).to have_attributes(complete?: false, overwrite?: true, lost: 0)
    end

    it "gives each record the trace context its thread's context record of its tag names (version 2)" do
      ids = %w[4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7]
      # A tag whose bits fall on both sides of the thread id.
      tag = (3 << 12) | 5
      ring.append(number, [1], tid: 7)
      ring.append_context(*ids, tid: 7, tag:)
      ring.append(number, [2], tid: 7, tag:)
      ring.append(number, [3], tid: 8, tag:)
      ring.append(number, [4], tid: 7, tag: tag + 1)
      trace = read
      expect(trace.records.map { |record| [record.args.first, record.tid, record.context] })
        .to eq([[1, 7, nil], [2, 7, ids], [3, 8, :unknown], [4, 7, :unknown]])
      expect(trace.lost).to eq(0)
    end

    it "reads a version-1 ring, whose records have no context" do
      ring = RingImage.new(slot_count: 8, version: 1)
      id = ring.add_probe("app", "number", [:Integer])
      ring.append(id, [5], tid: 4_194_303)
      expect(read(ring.io).records.map { |record| [record.args, record.tid, record.context] })
        .to eq([[[5], 4_194_303, nil]])
    end

    it "returns the records in sequence order across a wraparound, one of them wrapping from the last slot" do
      appended = []
      [1, 2, 3, 4, 5, 6, 7].each { |value| appended << [ring.append(number, [value]), [value]] }
      # 2 slots: positions 7 and 0.
      appended << [ring.append(text, ["w" * 20]), ["w" * 20]]
      appended << [ring.append(number, [9]), [9]]
      expect(appended[7].first % 8).to eq(7)
      trace = read
      expect(trace.records.map(&:args)).to eq(expected(appended))
      expect(trace.records.map(&:seq)).to eq(trace.records.map(&:seq).sort)
      expect(trace.records.map(&:args)).to include(["w" * 20])
      expect(trace.lost).to eq(ring[:records] - trace.records.size)
    end

    it "holds the newest records after many laps in flight mode, and counts the others lost" do
      appended = Array.new(1000) do |index|
        args = index % 3 == 0 ? ["#{index};" * (index % 7)] : [index]
        [ring.append(args.first.is_a?(String) ? text : number, args, time: index), args]
      end
      trace = read
      expect(trace.records.map(&:args)).to eq(expected(appended))
      expect(trace.records.size).to be_between(3, 8)
      expect(trace.lost).to eq(1000 - trace.records.size)
    end

    it "skips a record not yet committed (its first stamp 0) or half committed (a later stamp 0)" do
      ring.append(number, [1])
      ring[:head] = 3
      ring[:records] += 1
      ring.write_record(1, text, ["x" * 10], commit: false)
      ring.append(number, [2])
      half = ring.append(text, ["y" * 10])
      ring.set_stamp(half + 1, 0)
      ring.append(number, [3])
      trace = read
      expect(trace.records.map(&:args)).to eq([[1], [2], [3]])
      expect(trace.lost).to eq(2)
    end

    it "does not return a record overwritten between passes A and C, nor any of its bytes" do
      8.times { |value| ring.append(number, [value]) }
      io = ring.io
      # After pass A saw seq 0 committed, the writer takes its slot for seq
      # 8: stamp 0, the new record's bytes (pass B), then its stamp (pass C).
      io.before_slot_read(2) do
        ring[:head] = 9
        ring[:records] += 1
        ring.write_record(8, number, [800], commit: false)
      end
      io.before_slot_read(3) { ring.commit(8, 1) }
      trace = read(io)
      expect(io.slot_reads).to eq(3)
      expect(trace.records.map(&:args)).to eq((1..7).map { |value| [value] })
      # Seq 0, overwritten; not seq 8, reserved after the cut.
      expect(trace.lost).to eq(1)
    end

    it "does not return a record of many slots torn by a writer, whatever the bytes pass B saw" do
      ring = RingImage.new(slot_count: 8, overwrite: true)
      text = ring.add_probe("app", "text", [:String])
      ring.append(text, ["a" * 30])
      ring.append(text, ["b" * 30])
      ring.append(text, ["c" * 30])
      ring.append(text, ["d" * 30])
      io = ring.io
      # Before pass B, a writer a lap later has written the first slot of
      # its record over the first of "a" (the rest of "a" still there);
      # it commits it before pass C.
      io.before_slot_read(2) do
        ring[:head] = 10
        ring[:records] += 1
        ring.write_record(8, text, ["e" * 30], commit: false)
        ring.set_stamp(9, ring.stamp(9)) # "e"'s later slot not written yet
        ring.bytes[ring.slot_offset(9) + 8, 24] = "a" * 24
      end
      io.before_slot_read(3) { ring.commit(8, 2) }
      trace = described_class.from_io(io, name: "ring")
      expect(trace.records.map(&:args)).to eq([["b" * 30], ["c" * 30], ["d" * 30]])
      # "a", overwritten; not "e", reserved after the cut.
      expect(trace.lost).to eq(1)
    end

    it "does not return a record committed between passes A and C: pass B may hold it in part" do
      ring.append(number, [1])
      io = ring.io
      io.before_slot_read(2) do
        ring[:head] = 3
        ring[:records] += 1
        ring.write_record(1, text, ["late" * 4], commit: false)
      end
      io.before_slot_read(3) { ring.commit(1, 2) }
      trace = read(io)
      expect(trace.records.map(&:args)).to eq([[1]])
      # Reserved after the cut: not lost.
      expect(trace.lost).to eq(0)
    end

    it "reads the probes added to its table while it was read" do
      ring.append(number, [1])
      io = ring.io
      io.before_slot_read(1) do
        late = ring.add_probe("app", "late", [:Float])
        ring.append(late, [2.5])
      end
      trace = read(io)
      expect(trace.probes.map(&:label)).to eq(%w[app:number app:text app:late])
      # The late probe's record was reserved after the cut.
      expect(trace.records.map(&:args)).to eq([[1]])
      expect(trace.lost).to eq(0)
    end
  end

  describe "a file that breaks the format" do
    # Never a hang, whatever the file says.
    around { |example| Timeout.timeout(20) { example.run } }

    # A small valid ring: probe 0 app:number(Integer), its entry at 4096;
    # probe 1 app:text(String), its entry at 4128; records 1 (slot 0),
    # "hello" (slot 1) and 3 (slot 2); the slots from 8192. With
    # +complete+, a trace file of the same bytes but its flags.
    def ring(complete: false)
      RingImage.new(slot_count: 8, complete:).tap do |ring|
        number = ring.add_probe("app", "number", [:Integer], latency_arg: 0)
        text = ring.add_probe("app", "text", [:String], stack_arg: 0)
        ring.append(number, [1])
        ring.append(text, ["hello"])
        ring.append(number, [3])
      end
    end

    def refusal(bytes)
      read_bytes(bytes)
      nil
    rescue format_error => e
      e.message
    end

    it "is read when nothing is wrong with it: the cases below break it one way each" do
      [false, true].each do |complete|
        expect(read_bytes(ring(complete:).bytes).records.map(&:args)).to eq([[1], ["hello"], [3]])
      end
    end

    it "is refused when truncated anywhere: in the header, the probe table or the slots" do
      bytes = ring.bytes
      [0, 4, 7, 8, 12, 100, 4095, 4096, 4100, 4150, 8191, 8192, 8200, 8447].each do |length|
        expect(refusal(bytes.byteslice(0, length))).to include("truncated"), "cut at #{length} bytes"
      end
      (0...trace_bytes.bytesize).step(7).each do |length|
        expect(refusal(trace_bytes.byteslice(0, length))).to include("truncated"), "trace file cut at #{length} bytes"
      end
    end

    # The hostile corpus, which the reader's Rust tests read too: each case
    # a base file, the edits that break it, and the message it is refused
    # with (the file says how it is laid out). Here the base is RingImage's.
    def self.hostile_corpus
      path = File.expand_path("../../ext/stapsdt/tests/hostile/corpus.txt", __dir__)
      File.read(path).split("\n\n").filter_map do |paragraph|
        lines = paragraph.lines(chomp: true).reject { |line| line.empty? || line.start_with?("#") }
        hostile_case(lines) unless lines.empty?
      end
    end

    # A case's "key: value" lines as { case:, base:, edits: [...], refused: }.
    def self.hostile_case(lines)
      lines.each_with_object({ edits: [] }) do |line, fields|
        key, value = line.split(": ", 2)
        next fields[:edits] << value if key == "edit"
        raise ArgumentError, "corpus line of an unknown key: #{line}" unless %w[case base refused].include?(key)

        fields[key.to_sym] = value
      end
    end

    # One edit of the corpus to +bytes+: "u8|u16|u32|u64 OFFSET VALUE",
    # "bytes OFFSET HEX" or "cut LENGTH".
    def apply_edit(bytes, edit)
      kind, *words = edit.split
      case kind
      when "cut" then bytes.slice!(Integer(words[0])..)
      when "bytes" then bytes[Integer(words[0]), words[1].size / 2] = [words[1]].pack("H*")
      else
        width = { "u8" => 1, "u16" => 2, "u32" => 4, "u64" => 8 }.fetch(kind)
        value = Integer(words[1])
        raise ArgumentError, "#{value} does not fit in #{edit}" unless value < 2**(8 * width)

        bytes[Integer(words[0]), width] = [value].pack({ 1 => "C", 2 => "S<", 4 => "L<", 8 => "Q<" }.fetch(width))
      end
    end

    # A live ring on its first lap is read only up to head: its later
    # slots were never written, and what reading costs follows the records
    # present. So the cases whose fault lies past head (a stamp planted
    # there, a head set below a record) break a trace file (base "trace"),
    # whose every slot is read.
    hostile_corpus.each do |fields|
      it "is refused with a FormatError naming what is wrong: #{fields.fetch(:case)}" do
        bytes = ring(complete: { "ring" => false, "trace" => true }.fetch(fields.fetch(:base))).bytes
        fields.fetch(:edits).each { |edit| apply_edit(bytes, edit) }
        expected = "#{File.join(dir, "given.trace")}: #{fields.fetch(:refused)}"
        actual = refusal(bytes)
        expect(actual).to eq(expected), "expected: #{expected}\n     got: #{actual || "no FormatError"}"
      end
    end

    it "is refused when it is not a regular file, with a CLI::Error and nothing read" do
      fifo = File.join(dir, "fifo")
      File.mkfifo(fifo)
      expect { described_class.read(fifo) }
        .to raise_error(StaticTracing::CLI::Error, "cannot read #{fifo}: it is a fifo, not a regular file")
      expect { described_class.read(dir) }
        .to raise_error(StaticTracing::CLI::Error, "cannot read #{dir}: it is a directory, not a regular file")
      missing = File.join(dir, "missing.trace")
      expect { described_class.read(missing) }
        .to raise_error(StaticTracing::CLI::Error, "cannot read #{missing}: No such file or directory")
    end

    it "is refused when reading it fails, or it shrinks while it is read" do
      io = ring.io
      def io.pread(*)
        raise Errno::EIO
      end
      expect { described_class.from_io(io, name: "ring") }
        .to raise_error(StaticTracing::CLI::Error, "cannot read ring: Input/output error")
      image = ring
      shrinking = image.io
      shrinking.before_slot_read(1) { image.bytes.slice!(4200..) }
      expect { described_class.from_io(shrinking, name: "ring") }
        .to raise_error(format_error, "ring: it shrank while it was read: it had 8448 bytes, now at most 8192")
    end

    # Bytes flipped at random in valid files: whatever they make, the
    # reader returns records that make sense or raises a FormatError (a
    # CLI::Error), reading no more than the file holds.
    it "survives random corruption: every outcome is records or a FormatError" do
      random = Random.new(20_240_611)
      bases = [ring.bytes, RingImage.new(slot_count: 16, overwrite: true).tap do |image|
        ids = [image.add_probe("app", "n", [:Integer], latency_arg: 0),
               image.add_probe("app", "mixed", %i[Integer Float String], stack_arg: 2)]
        40.times { |index| image.append(ids[index % 2], index.even? ? [index] : [index, 0.5, "a;b" * (index % 11)]) }
      end.bytes, trace_bytes]
      outcomes = Hash.new(0)
      400.times do |attempt|
        bytes = corrupt(bases[attempt % bases.size], random)
        io = RingIO.new(Struct.new(:bytes, :ring_offset).new(bytes, 4096))
        begin
          trace = described_class.from_io(io, name: "corrupt")
          expect(trace.records.size).to be <= trace.records_total
          expect(trace.lost).to be >= 0
          outcomes[:read] += 1
        rescue StaticTracing::CLI::Error => e
          expect(e.message).to start_with("corrupt: ")
          outcomes[e.class] += 1
        end
        expect(io.largest_read).to be <= bytes.bytesize
      end
      expect(outcomes.keys).to contain_exactly(:read, format_error)
    end

    def trace_bytes
      probes = [probe(0, "app", "n", ["Integer"], latency_arg: 0), probe(1, "app", "s", %w[String Float], stack_arg: 0)]
      records = Array.new(30) do |index|
        index.even? ? record(probes[0], [index]) : record(probes[1], ["x;y" * index, index / 3.0])
      end
      TraceImage.new.bytes(probes:, records:, records_total: 33, dropped: 1)
    end

    # +bytes+ with one to four bytes set at random, most in the header, the
    # table or the first slots, where a byte says the most; sometimes cut.
    def corrupt(bytes, random)
      bytes = bytes.dup
      random.rand(1..4).times do
        offset = [random.rand(512), 4096 + random.rand(256), 8192 + random.rand(512), random.rand(bytes.bytesize)]
                 .sample(random:)
        bytes.setbyte(offset, random.rand(256)) if offset < bytes.bytesize
      end
      random.rand < 0.1 ? bytes.byteslice(0, random.rand(bytes.bytesize)) : bytes
    end
  end

  describe described_class::RingReader do
    let(:ring) { RingImage.new(slot_count: 8) }
    let!(:number) { ring.add_probe("app", "number", [:Integer]) }
    let!(:text) { ring.add_probe("app", "text", [:String]) }
    let(:io) { ring.io }
    let(:reader) { described_class.new(io, name: "ring") }

    def args(records)
      records.map(&:args)
    end

    it "returns each committed record once, poll after poll" do
      reader
      ring.append(number, [1])
      ring.append(text, ["two" * 5])
      expect(args(reader.poll)).to eq([[1], ["two" * 5]])
      expect(reader.poll).to eq([])
      ring.append(number, [3])
      expect(args(reader.poll)).to eq([[3]])
      expect(reader).to have_attributes(records_read: 3, lost: 0, position: 4)
    end

    it "stores in tail, with one pwrite, how far it read, so that the writer may reuse those slots" do
      reader
      ring.append(number, [1])
      ring.append(text, ["x" * 20])
      reader.poll
      expect(io.writes).to eq([[320, [3].pack("Q<")]])
      expect(ring[:tail]).to eq(3)
      reader.poll
      expect(io.writes.size).to eq(1)
    end

    it "stores nothing in a flight-mode ring, whose writer does not wait for it" do
      ring = RingImage.new(slot_count: 8, overwrite: true)
      id = ring.add_probe("app", "number", [:Integer])
      io = ring.io
      reader = described_class.new(io, name: "ring")
      ring.append(id, [1])
      expect(args(reader.poll)).to eq([[1]])
      expect(io.writes).to eq([])
    end

    it "stops at a record not yet committed and returns it, whole, on a later poll" do
      reader
      ring.append(number, [1])
      ring[:head] = 3
      ring[:records] += 1
      ring.write_record(1, text, ["slow" * 4], commit: false)
      ring.append(number, [3])
      expect(args(reader.poll)).to eq([[1]])
      expect(ring[:tail]).to eq(1)
      ring.commit(1, 2)
      expect(args(reader.poll)).to eq([["slow" * 4], [3]])
      expect(ring[:tail]).to eq(4)
    end

    it "returns on a later poll a record committed between its passes A and C" do
      reader
      ring.append(number, [1])
      ring[:head] = 2
      ring[:records] += 1
      ring.write_record(1, number, [2], commit: false)
      io.before_slot_read(3) { ring.commit(1, 1) }
      expect(args(reader.poll)).to eq([[1]])
      expect(ring[:tail]).to eq(1)
      expect(args(reader.poll)).to eq([[2]])
    end

    it "reads every record once, in order, across many laps of a small ring, with the writer waiting on tail" do
      written = []
      read = []
      dropped = 0
      500.times do |index|
        args = index.odd? ? ["#{index}," * (index % 9)] : [index]
        size = ring.slots_for(ring.payload(args.first.is_a?(String) ? text : number, args).bytesize)
        if ring[:head] + size > ring[:tail] + ring.slot_count
          ring[:dropped] += 1
          dropped += 1
        else
          ring.append(args.first.is_a?(String) ? text : number, args)
          written << args
        end
        read.concat(args(reader.poll)) if (index % 10).zero?
      end
      read.concat(args(reader.finish))
      expect(read).to eq(written)
      expect(dropped).to be_positive
      expect(reader.lost).to eq(dropped)
    end

    it "returns the newest records of a flight-mode ring it fell behind, once each, and counts the others lost" do
      ring = RingImage.new(slot_count: 8, overwrite: true)
      id = ring.add_probe("app", "number", [:Integer])
      reader = described_class.new(ring.io, name: "ring")
      read = []
      100.times do |value|
        ring.append(id, [value])
        read.concat(args(reader.poll)) if (value % 20) == 19
      end
      expect(read).to eq(read.uniq)
      expect(read).to eq(read.sort)
      expect(read.last(8)).to eq((92..99).map { |value| [value] })
      expect(reader.lost).to eq(100 - read.size)
    end

    it "#finish returns what is left past a record never committed, and releases every slot" do
      reader
      ring.append(number, [1])
      ring[:head] = 2
      ring[:records] += 1
      ring.write_record(1, number, [2], commit: false)
      ring.append(number, [3])
      expect(args(reader.poll)).to eq([[1]])
      expect(args(reader.finish)).to eq([[3]])
      expect(ring[:tail]).to eq(3)
      expect(reader).to have_attributes(records_read: 2, lost: 1, position: 3)
      expect(reader.finish).to eq([])
    end

    it "starts from the ring's tail: records a reader before it took are not returned again" do
      ring.append(number, [1])
      ring.append(number, [2])
      ring[:tail] = 1
      expect(args(reader.poll)).to eq([[2]])
    end

    it "reads a trace file as a ring whose writer is done, and writes nothing to it" do
      writer = TraceImage.new
      probe = StaticTracing::CLI::TraceFile::Probe.new(0, "app", "number", ["Integer"], nil, nil)
      records = [1, 2].map { |value| StaticTracing::CLI::TraceFile::Record.new(nil, 0, probe, 0, [value]) }
      path = File.join(Dir.mktmpdir("ring_reader"), "done.trace")
      File.binwrite(path, writer.bytes(probes: [probe], records:))
      File.open(path, "rb") do |file|
        reader = described_class.new(file)
        expect(args(reader.poll)).to eq([[1], [2]])
        expect(reader.finish).to eq([])
        expect(reader.lost).to eq(0)
      end
    ensure
      FileUtils.rm_rf(File.dirname(path)) if path
    end
  end
end
