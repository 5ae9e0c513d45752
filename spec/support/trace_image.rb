# frozen_string_literal: true

require_relative "ring_image"

# A trace file written byte by byte as docs/recording.md says, here in the
# specs, apart from the reader under test (the format's implementation is
# the Rust crate's): flag complete, the probe table, the records in
# consecutive slots from sequence number 0, counters such that the file
# tells how many records its source lost, and the names of its threads
# after the slots. The bytes are RingImage's (ring_image.rb), the specs'
# one layout of the format: a trace file is a ring its writer is done
# with. What it writes, the reader must read back: the same probes and
# records (numbered from 0).
#
#   image = TraceImage.new(pid: 4321)
#   File.binwrite(path, image.bytes(probes:, records:, records_total: 12, dropped: 1))
#
# Probes and records are TraceFile::Probe and TraceFile::Record values.
class TraceImage
  MAX_ARGS = 6
  MAX_NAME = 128
  NAME = /\A[A-Za-z_][A-Za-z0-9_]*\z/
  DEFAULT_MAX_STRING = 1024
  FIELDS = {
    pid: 0, pid_namespace: 0, anchor_monotonic_ns: 0, anchor_realtime_ns: 0,
    max_string: DEFAULT_MAX_STRING, overwrite: false
  }.freeze
  TYPES = %w[Integer Float String].freeze
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
  # that the file's lost is the source's; +thread_names+ (tid => name)
  # follow the slots.
  def bytes(probes:, records:, records_total: records.size, dropped: 0, thread_names: {})
    if records_total < records.size
      raise ArgumentError, "records_total (#{records_total}) is less than the #{records.size} records given"
    end

    probes.each { |probe| check(probe) }
    ids = ProbeIds.new(probes)
    image = image(probes, records.map { |record| payload(record, ids) })
    # Context records are records too, read and not lost.
    image[:records] = records_total + @context_records
    image[:dropped] = dropped
    image.bytes + RingImage.thread_names(thread_names)
  end

  private

  # A ring whose writer is done, holding +probes+ and the records of
  # +payloads+ ([record, probe id, arguments]) one after another; a
  # record's context ([trace_id, span_id], or :unknown) is written as the
  # process's writer does: a context record before the first record of its
  # thread in it, each context of a thread with a tag of its own.
  def image(probes, payloads)
    tags = contexts(payloads)
    slot_count = payloads.sum do |record, _, args|
      RingImage.slots_for(RingImage.payload(record.probe.types, args).bytesize)
    end + (2 * @context_records)
    table_capacity = probes.sum { |probe| RingImage.entry_size(probe.provider, probe.name) }
    image = RingImage.new(slot_count:, table_capacity:, complete: true, overwrite: @fields[:overwrite],
                          **@fields.except(:overwrite))
    probes.each do |probe|
      image.add_probe(probe.provider, probe.name, probe.types, latency_arg: probe.latency_arg,
                                                               stack_arg: probe.stack_arg)
    end
    append(image, payloads, tags)
  end

  # Appends the records of +payloads+, each context record first where
  # its thread's context changes.
  def append(image, payloads, tags)
    written = {}
    payloads.each do |record, id, args|
      tag = tags[[record.tid, record.context]]
      if tag && tag != UNKNOWN_TAG && written[record.tid] != tag
        image.append_context(*record.context, tid: record.tid, tag:, time: record.time_ns)
        written[record.tid] = tag
      end
      image.append(id, args, time: record.time_ns, tid: record.tid, tag: tag || 0)
    end
    image
  end

  UNKNOWN_TAG = 0x3fffff

  # The tag of each thread's contexts, by [tid, context]; counts the
  # context records they take in @context_records.
  def contexts(payloads)
    @context_records = 0
    tags = {}
    last = {}
    payloads.each do |record, _, _|
      context = record.context or next
      tags[[record.tid, context]] ||= context == :unknown ? UNKNOWN_TAG : tags.size + 1
      tag = tags[[record.tid, context]]
      next if tag == UNKNOWN_TAG || last[record.tid] == tag

      last[record.tid] = tag
      @context_records += 1
    end
    tags
  end

  # Names and types the reader would refuse (the gem's rule, and a length
  # that fits the entry's u8) are refused here, before a file is written.
  def check(probe)
    [probe.provider, probe.name].each do |name|
      next if name.bytesize <= MAX_NAME && NAME.match?(name)

      raise ArgumentError, "probe #{probe.label}: #{name.inspect} is not a provider or probe name " \
                           "(letters, digits and underscores, not starting with a digit, 1 to " \
                           "#{MAX_NAME} bytes)"
    end
    unknown = probe.types - TYPES
    raise ArgumentError, "probe #{probe.label}: unknown type #{unknown.first.inspect}" unless unknown.empty?
    raise ArgumentError, "probe #{probe.label}: more than #{MAX_ARGS} arguments" if probe.types.size > MAX_ARGS
  end

  # [record, probe id, arguments], its Strings cut as the writer cuts them.
  def payload(record, ids)
    id = ids[record.probe] or
      raise ArgumentError, "record #{record.seq}: its probe #{record.probe.label} is not among the probes"
    types = record.probe.types
    unless record.args.size == types.size
      raise ArgumentError, "record #{record.seq}: #{record.args.size} arguments for probe " \
                           "#{record.probe.label}(#{types.join(", ")})"
    end

    [record, id, record.args.zip(types).map { |value, type| type == "String" ? cut(value) : value }]
  end

  def cut(value)
    value.b.byteslice(0, [@fields[:max_string], MAX_STRING_LENGTH].min)
  end
end
