# frozen_string_literal: true

# A recorder's ring file, laid out byte by byte as docs/recording.md says
# (header, probe table, slots) and written here, apart from the code under
# test, so that a misreading of the format on either side shows. It acts as
# the process's writer does: #append reserves slots at head and commits a
# record; #append_context a context record; #write_record writes one at
# any sequence number, committed or not; the header's fields are set by
# name (#[]=) to build broken files. Version 2 by default (version: 1 for
# a file of the format before trace contexts).
#
#   ring = RingImage.new(slot_count: 8)
#   id = ring.add_probe("app", "index", [:Integer], latency_arg: 0)
#   ring.append_context("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", tid: 7, tag: 1)
#   ring.append(id, [1500], time: 10, tid: 7, tag: 1)
#   StaticTracing::CLI::TraceFile.from_io(ring.io).records
class RingImage
  HEADER_SIZE = 4096
  SLOT_SIZE = 32
  PAGE = 4096
  NONE = 255
  TYPE_CODES = { Integer: 1, Float: 2, String: 3 }.freeze
  # Each header field: [offset, pack directive].
  FIELDS = {
    magic: [0, "a8"], version: [8, "L<"], header_size: [12, "L<"], table_offset: [16, "Q<"],
    table_capacity: [24, "Q<"], ring_offset: [32, "Q<"], slot_count: [40, "Q<"], slot_size: [48, "L<"],
    flags: [52, "L<"], pid: [56, "Q<"], pid_namespace: [64, "Q<"], anchor_monotonic_ns: [72, "Q<"],
    anchor_realtime_ns: [80, "q<"], max_string: [88, "L<"], reserved: [92, "L<"],
    head: [128, "Q<"], records: [192, "Q<"], dropped: [256, "Q<"], tail: [320, "Q<"], table_used: [384, "L<"]
  }.freeze
  OVERWRITE = 1
  COMPLETE = 2
  VERSION = 2
  # A record's word 2: the probe id in bits 0-19 (CONTEXT_PROBE: a context
  # record), the thread id in 32-53, its context tag's low 12 bits in
  # 20-31 and high 10 bits in 54-63.
  CONTEXT_PROBE = 0xfffff
  TAG_LOW_BITS = 12
  DEFAULTS = { pid: 4321, pid_namespace: 4_026_531_836, anchor_monotonic_ns: 5_000_000_000,
               anchor_realtime_ns: 1_700_000_000_000_000_000, max_string: 1024 }.freeze

  attr_reader :bytes, :slot_count, :ring_offset

  # +fields+: header fields other than the ring's geometry and flags
  # (pid:, max_string:, ...), by name.
  def initialize(slot_count: 16, table_capacity: PAGE, overwrite: false, complete: false, **fields)
    @slot_count = slot_count
    @ring_offset = HEADER_SIZE + table_capacity
    @bytes = "\0".b * (ring_offset + (slot_count * SLOT_SIZE))
    @types = []
    flags = (overwrite ? OVERWRITE : 0) | (complete ? COMPLETE : 0)
    { magic: "STATRACE", version: VERSION, header_size: HEADER_SIZE, table_offset: HEADER_SIZE, table_capacity:,
      ring_offset:, slot_count:, slot_size: SLOT_SIZE, flags:, **DEFAULTS, **fields }
      .each { |field, value| self[field] = value }
  end

  def [](field)
    offset, directive = FIELDS.fetch(field)
    bytes.unpack1(directive, offset:)
  end

  def []=(field, value)
    offset, directive = FIELDS.fetch(field)
    packed = [value].pack(directive)
    bytes[offset, packed.bytesize] = packed
  end

  # Appends a probe table entry; returns the probe's id. +types+ are
  # :Integer, :Float or :String (or their names as Strings).
  def add_probe(provider, name, types, latency_arg: nil, stack_arg: nil)
    names = "#{provider}#{name}".b
    size = self.class.entry_size(provider, name)
    codes = types.map { |type| TYPE_CODES.fetch(type.to_sym) }
    entry = [size, types.size, provider.bytesize, name.bytesize, latency_arg || NONE, stack_arg || NONE, 0]
            .pack("S< C C C C C C") << codes.pack("C*").ljust(8, "\0") << names
    used = self[:table_used]
    bytes[HEADER_SIZE + used, size] = entry.ljust(size, "\0")
    self[:table_used] = used + size
    @types << types.map(&:to_sym)
    @types.size - 1
  end

  # Writes a record as the process's writer does: reserves its slots at
  # head, counts it, then writes it and its stamps. Returns its sequence
  # number. +slot+: time: and tid:, as for #write_record.
  def append(probe, args, **slot)
    seq = self[:head]
    self[:head] = seq + slots_for(payload(probe, args).bytesize)
    self[:records] += 1
    write_record(seq, probe, args, **slot)
    seq
  end

  # Appends a context record: thread +tid+ is in the context of these ids
  # (hex) from now on, for its records of tag +tag+. Returns its sequence
  # number.
  def append_context(trace_id, span_id, tid:, tag:, time: 1_000)
    seq = self[:head]
    self[:head] = seq + 2
    self[:records] += 1
    write_record(seq, CONTEXT_PROBE, nil, payload: [trace_id + span_id].pack("H*"), time:, tid:, tag:)
    seq
  end

  # Writes a record of probe +probe+ at slot sequence number +seq+ (at
  # positions seq mod slot_count, wrapping); with +commit+ false its stamps
  # are left 0, as while it is written. +slot+: the record's time:, tid:
  # and tag: (its context's; 0, none, by default), and its payload: when
  # it is to be other than +args+ packed. Returns how many slots it fills.
  def write_record(seq, probe, args, commit: true, **slot)
    payload = slot.fetch(:payload) { payload(probe, args) }
    count = slots_for(payload.bytesize)
    padded = payload.ljust(8 + ((count - 1) * 24), "\0")
    first = [0, slot.fetch(:time, 1_000), self.class.thread_word(probe, slot.fetch(:tid, 100), slot.fetch(:tag, 0))]
            .pack("Q< Q< Q<")
    write_slot(seq, first << padded.byteslice(0, 8))
    (1...count).each do |index|
      write_slot(seq + index, [0].pack("Q<") << padded.byteslice(8 + ((index - 1) * 24), 24))
    end
    commit(seq, count) if commit
    count
  end

  # The stamps of a record of +count+ slots at +seq+: its later slots'
  # first, the first slot's last, as a writer commits it.
  def commit(seq, count)
    (1...count).each { |index| set_stamp(seq + index, ((seq + index) << 16) | index) }
    set_stamp(seq, (seq << 16) | 0x8000 | count)
  end

  # Writes the 32 bytes of the slot that sequence number +seq+ lives in.
  def write_slot(seq, slot)
    bytes[slot_offset(seq), SLOT_SIZE] = slot
  end

  # The stamp of the slot that sequence number +seq+ lives in.
  def stamp(seq)
    bytes.unpack1("Q<", offset: slot_offset(seq))
  end

  def set_stamp(seq, value)
    bytes[slot_offset(seq), 8] = [value].pack("Q<")
  end

  # Where the slot of sequence number +seq+ is in the file.
  def slot_offset(seq)
    ring_offset + ((seq % slot_count) * SLOT_SIZE)
  end

  # The payload of +args+ for +probe+: each argument packed in order.
  def payload(probe, args)
    self.class.payload(@types.fetch(probe), args)
  end

  def slots_for(size)
    self.class.slots_for(size)
  end

  class << self
    # Word 2 of a record: its probe id, its thread id and its context tag.
    def thread_word(probe, tid, tag)
      low = tag & ((1 << TAG_LOW_BITS) - 1)
      probe | (low << 20) | (tid << 32) | ((tag >> TAG_LOW_BITS) << 54)
    end

    # The payload of +args+ of +types+ (:Integer or "Integer"...): each
    # argument packed in order, a String as its u16 length and its bytes.
    def payload(types, args)
      args.zip(types).map do |value, type|
        case type.to_sym
        when :Integer then [value].pack("q<")
        when :Float then [value].pack("E")
        else [value.bytesize].pack("S<") << value.b
        end
      end.join.b
    end

    # How many slots a payload of +size+ bytes fills: 8 bytes in the first,
    # 24 in each later one.
    def slots_for(size)
      size <= 8 ? 1 : 1 + ((size - 8 + 23) / 24)
    end

    # The bytes of a probe table entry: 16, then the names, padded to 8.
    def entry_size(provider, name)
      (16 + provider.bytesize + name.bytesize + 7) / 8 * 8
    end

    # The names of threads (+names+: tid => name) as a trace file holds
    # them after its slots: "STTHREAD", a u32 count, then per thread its
    # id (u32), the length of its name (u8) and the name.
    def thread_names(names)
      return "".b if names.empty?

      ["STTHREAD", names.size].pack("a8L<") + names.map { |tid, name| [tid, name.bytesize, name].pack("L<Ca*") }.join
    end
  end

  def io
    RingIO.new(self)
  end

  def write(path)
    File.binwrite(path, bytes)
    path
  end

  # A failed expectation shows this, not the file's bytes.
  def inspect
    "#<RingImage slot_count=#{slot_count} head=#{self[:head]} flags=#{self[:flags]}>"
  end
end

# The ring as TraceFile reads it (#pread, #size, #pwrite), from the image's
# bytes as they are at each read (+image+: anything with #bytes and
# #ring_offset). #before_slot_read runs a block before the nth read of the
# slots (from 1), for a writer that works while the reader reads: a live
# ring is read in three passes, each one pread unless the read wraps.
# #largest_read is the most bytes one pread asked for.
class RingIO
  attr_reader :size, :slot_reads, :writes, :largest_read

  def initialize(image)
    @image = image
    @size = image.bytes.bytesize
    @slot_reads = 0
    @hooks = {}
    @writes = []
    @largest_read = 0
  end

  def path
    "ring.ring"
  end

  def before_slot_read(number, &block)
    @hooks[number] = block
  end

  def pread(length, offset)
    @largest_read = [largest_read, length].max
    if offset >= @image.ring_offset
      @slot_reads += 1
      @hooks.delete(@slot_reads)&.call
    end
    raise EOFError, "end of file reached" if offset >= @image.bytes.bytesize

    @image.bytes.byteslice(offset, length)
  end

  def pwrite(string, offset)
    @writes << [offset, string]
    @image.bytes[offset, string.bytesize] = string
    string.bytesize
  end
end
