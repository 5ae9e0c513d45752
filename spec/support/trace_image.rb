# frozen_string_literal: true

# A trace file written byte by byte as docs/recording.md says, here in the
# specs, apart from the reader under test (the format's implementation is
# the Rust crate's): flag complete, the probe table, the records in
# consecutive slots from sequence number 0, and counters such that the file
# tells how many records its source lost. What it writes, the reader must
# read back: the same probes and records (numbered from 0).
#
#   image = TraceImage.new(pid: 4321)
#   File.binwrite(path, image.bytes(probes:, records:, records_total: 12, dropped: 1))
#
# Probes and records are TraceFile::Probe and TraceFile::Record values.
# RingImage (ring_image.rb) lays out live rings the same way.
class TraceImage
  MAGIC = "STATRACE"
  FORMAT_VERSION = 1
  HEADER_SIZE = 4096
  SLOT_SIZE = 32
  OVERWRITE = 1
  COMPLETE = 2
  NO_ARG = 255
  MAX_ARGS = 6
  MAX_NAME = 128
  NAME = /\A[A-Za-z_][A-Za-z0-9_]*\z/
  TABLE_ENTRY_HEADER = 16
  FIRST = 0x8000
  STAMP_SHIFT = 16
  FIRST_PAYLOAD = 8
  LATER_PAYLOAD = 24
  DEFAULT_MAX_STRING = 1024
  FIELDS = {
    pid: 0, pid_namespace: 0, anchor_monotonic_ns: 0, anchor_realtime_ns: 0,
    max_string: DEFAULT_MAX_STRING, overwrite: false
  }.freeze
  TYPE_CODES = { "Integer" => 1, "Float" => 2, "String" => 3 }.freeze
  HEADER_FORMAT = "a8 L< L< Q< Q< Q< Q< L< L< Q< Q< Q< q< L< L< " \
                  "@128 Q< @192 Q< @256 Q< @320 Q< @384 L< @#{HEADER_SIZE}".freeze
  ENTRY_FORMAT = "S< C C C C C C C6 x2 a* a*"
  FIRST_SLOT_FORMAT = "Q< Q< L< L<"
  PACKED = { "Integer" => "q<", "Float" => "E" }.freeze
  # A String's length is a u16.
  MAX_STRING_LENGTH = 0xffff

  # A probe's index among the probes written: looked up by the object
  # first, as records share their probes' objects, else by value.
  class ProbeIds
    def initialize(probes)
      @by_value = probes.each_with_index.to_h
      @by_object = {}.compare_by_identity
    end

    def [](probe)
      @by_object.fetch(probe) { @by_object[probe] = @by_value[probe] }
    end
  end

  # A writer of files with the header fields of +source+ (a TraceFile
  # or a RingReader).
  def self.like(source)
    new(pid: source.pid, pid_namespace: source.pid_namespace, anchor_monotonic_ns: source.anchor_monotonic_ns,
        anchor_realtime_ns: source.anchor_realtime_ns, max_string: source.max_string,
        overwrite: source.overwrite?)
  end

  # +fields+: those of FIELDS; +overwrite+ keeps, for what reads the
  # file, that its source ran in flight mode.
  def initialize(**fields)
    unknown = fields.keys - FIELDS.keys
    raise ArgumentError, "unknown header fields: #{unknown.join(", ")}" unless unknown.empty?

    @fields = FIELDS.merge(fields)
  end

  # Writes the file to +io+; see #bytes.
  def write(io, **contents)
    io.write(bytes(**contents))
  end

  # The file's bytes. +records+ (Records, in the order to keep) name
  # probes among +probes+; +records_total+ and +dropped+ are the
  # source's counters (records it reserved, records it dropped), so
  # that the file's lost is the source's.
  def bytes(probes:, records:, records_total: records.size, dropped: 0)
    if records_total < records.size
      raise ArgumentError, "records_total (#{records_total}) is less than the #{records.size} records given"
    end

    ids = ProbeIds.new(probes)
    table = probes.map { |probe| entry(probe) }.join
    slots = records.each_with_object(+"".b) { |record, out| out << slots(record, ids, out.bytesize / 32) }
    head = slots.bytesize / SLOT_SIZE
    header(table.bytesize, head, records_total, dropped) << table << slots
  end

  private

  def header(table_size, slot_count, records_total, dropped)
    flags = COMPLETE | (@fields[:overwrite] ? OVERWRITE : 0)
    [
      MAGIC, FORMAT_VERSION, HEADER_SIZE, HEADER_SIZE, table_size,
      HEADER_SIZE + table_size, slot_count, SLOT_SIZE, flags,
      *@fields.values_at(:pid, :pid_namespace, :anchor_monotonic_ns, :anchor_realtime_ns, :max_string), 0,
      slot_count, records_total, dropped, 0, table_size
    ].pack(HEADER_FORMAT)
  end

  def entry(probe)
    check_names(probe)
    names = "#{probe.provider}#{probe.name}".b
    size = (TABLE_ENTRY_HEADER + names.bytesize + 7) / 8 * 8
    [size, probe.types.size, probe.provider.bytesize, probe.name.bytesize, probe.latency_arg || NO_ARG,
     probe.stack_arg || NO_ARG, 0, *type_codes(probe), probe.provider, probe.name]
      .pack(ENTRY_FORMAT).ljust(size, "\0")
  end

  # Names the reader would refuse (the gem's rule, and a length that
  # fits the entry's u8) are refused here, before a file is written.
  def check_names(probe)
    [probe.provider, probe.name].each do |name|
      next if name.bytesize <= MAX_NAME && NAME.match?(name)

      raise ArgumentError, "probe #{probe.label}: #{name.inspect} is not a provider or probe name " \
                           "(letters, digits and underscores, not starting with a digit, 1 to " \
                           "#{MAX_NAME} bytes)"
    end
  end

  # The six type codes of the entry: 0 past the arguments.
  def type_codes(probe)
    codes = probe.types.map do |type|
      TYPE_CODES.fetch(type) { raise ArgumentError, "probe #{probe.label}: unknown type #{type.inspect}" }
    end
    raise ArgumentError, "probe #{probe.label}: more than #{MAX_ARGS} arguments" if
      codes.size > MAX_ARGS

    codes.fill(0, codes.size...MAX_ARGS)
  end

  # The slots of +record+, from sequence number +seq+.
  def slots(record, ids, seq)
    id = ids[record.probe] or
      raise ArgumentError, "record #{record.seq}: its probe #{record.probe.label} is not among the probes"
    payload = payload(record)
    count = slots_for(payload.bytesize)
    payload = payload.ljust(FIRST_PAYLOAD + ((count - 1) * LATER_PAYLOAD), "\0")
    out = [(seq << STAMP_SHIFT) | FIRST | count, record.time_ns, id, record.tid]
          .pack(FIRST_SLOT_FORMAT) << payload.byteslice(0, FIRST_PAYLOAD)
    (1...count).each { |index| out << later_slot(seq, index, payload) }
    out
  end

  # How many slots a payload of +size+ bytes fills.
  def slots_for(size)
    size <= FIRST_PAYLOAD ? 1 : 1 + ((size - FIRST_PAYLOAD + LATER_PAYLOAD - 1) / LATER_PAYLOAD)
  end

  # Slot +index+ (from 1) of the record at +seq+.
  def later_slot(seq, index, payload)
    [((seq + index) << STAMP_SHIFT) | index].pack("Q<") <<
      payload.byteslice(FIRST_PAYLOAD + ((index - 1) * LATER_PAYLOAD), LATER_PAYLOAD)
  end

  def payload(record)
    types = record.probe.types
    unless record.args.size == types.size
      raise ArgumentError, "record #{record.seq}: #{record.args.size} arguments for probe " \
                           "#{record.probe.label}(#{types.join(", ")})"
    end

    record.args.zip(types).map { |value, type| argument(value, type) }.join.b
  end

  def argument(value, type)
    return [value].pack(PACKED.fetch(type)) unless type == "String"

    bytes = value.b.byteslice(0, [@fields[:max_string], MAX_STRING_LENGTH].min)
    [bytes.bytesize].pack("S<") << bytes
  end
end
