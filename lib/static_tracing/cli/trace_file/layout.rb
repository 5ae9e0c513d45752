# frozen_string_literal: true

module StaticTracing
  module CLI
    class TraceFile
      # The header and the probe table of a ring or trace file, checked
      # against docs/recording.md, and every read of the file: each is
      # checked against the size the file had when it was opened, so that a
      # hostile header can neither make this read past the end nor allocate
      # more than the file holds.
      class Layout
        MAGIC = "STATRACE".b
        FORMAT_VERSION = 1
        HEADER_SIZE = 4096
        SLOT_SIZE = 32
        # A ring's slots start on a page.
        PAGE = 4096
        OVERWRITE = 1
        COMPLETE = 2
        TABLE_ENTRY_HEADER = 16
        MAX_ARGS = 6
        MAX_NAME = 128
        NO_ARG = 255
        # The gem's rule for provider and probe names (Native::NAME_RULE).
        NAME = /\A[A-Za-z_][A-Za-z0-9_]*\z/
        TYPES = { 1 => "Integer", 2 => "Float", 3 => "String" }.freeze
        HEADER_FORMAT = "a8 L< L< Q< Q< Q< Q< L< L< Q< Q< Q< q< L< L<"
        COUNTERS_FORMAT = "@128 Q< @192 Q< @256 Q< @320 Q< @384 L<"
        FIELDS = {
          magic: 0, version: 8, header_size: 12, table_offset: 16, table_capacity: 24, ring_offset: 32,
          slot_count: 40, slot_size: 48, flags: 52, pid: 56, pid_namespace: 64, anchor_monotonic_ns: 72,
          anchor_realtime_ns: 80, max_string: 88, reserved: 92
        }.freeze
        COUNTERS = { head: 128, records: 192, dropped: 256, tail: 320, table_used: 384 }.freeze
        TAIL_OFFSET = COUNTERS[:tail]

        attr_reader :name, :io, :size, :table_capacity, :ring_offset, :slot_count, :flags, :pid, :pid_namespace,
                    :anchor_monotonic_ns, :anchor_realtime_ns, :max_string, :head, :records, :dropped, :tail,
                    :table_used, :probes

        # +io+ answers #pread and #size (a File); +name+ names it in messages.
        def initialize(io, name)
          @io = io
          @name = name
          @size = io.size
          @probes = []
          @table_read = 0
          bytes = read_header
          header(bytes)
          counters(bytes)
          read_table
        end

        def overwrite?
          flags.anybits?(OVERWRITE)
        end

        def complete?
          flags.anybits?(COMPLETE)
        end

        # A time of the file's clock (CLOCK_MONOTONIC) as nanoseconds since
        # the Unix epoch, by the anchors taken together when it was created.
        def wall_time_ns(time_ns)
          anchor_realtime_ns + time_ns - anchor_monotonic_ns
        end

        # Reads the counters again, and the entries added to the probe table
        # since: a live ring's writer changes them.
        def refresh
          counters(read_at(0, HEADER_SIZE, "the header"))
          read_table
        end

        # The bytes of +count+ slots of consecutive sequence numbers from
        # +first+ (count at most slot_count), in that order: the slot of
        # sequence s is at position s mod slot_count, so they may wrap.
        def read_slots(first, count)
          start = first % slot_count
          return read_at(slot_offset(start), count * SLOT_SIZE, "the slots") if start + count <= slot_count

          before_end = slot_count - start
          read_at(slot_offset(start), before_end * SLOT_SIZE, "the slots") <<
            read_at(ring_offset, (count - before_end) * SLOT_SIZE, "the slots")
        end

        def slot_offset(position)
          ring_offset + (position * SLOT_SIZE)
        end

        # +length+ bytes from +offset+: a file that ends before them is
        # truncated, or shrank while it was read.
        def read_at(offset, length, what)
          bytes = +"".b
          return bytes if length.zero?

          if offset + length > size
            invalid_file("#{what} (bytes #{offset} to #{offset + length}) run past the end of the file " \
                         "(#{size} bytes): it is truncated")
          end

          # A read returns less than asked past 2 GiB; one that returns
          # nothing has met the end, as one that raises EOFError.
          while bytes.bytesize < length
            chunk = io.pread(length - bytes.bytesize, offset + bytes.bytesize)
            raise EOFError if chunk.nil? || chunk.empty?

            bytes << chunk
          end
          bytes
        rescue EOFError
          # pread found the end at offset + bytes.bytesize.
          invalid_file("it shrank while it was read: it had #{size} bytes, now at most #{offset + bytes.bytesize}")
        rescue SystemCallError => e
          raise Error, "cannot read #{name}: #{CLI.reason(e)}"
        end

        # Raises FormatError: +what+, at +offset+ in the file, was not what
        # was +expected+.
        def invalid(what, offset, expected, found)
          invalid_file("#{what} (offset #{offset}): expected #{expected}, found #{found}")
        end

        def invalid_file(message)
          raise FormatError, "#{name}: #{message}"
        end

        private

        def read_header
          length = [size, HEADER_SIZE].min
          bytes = read_at(0, length, "the header")
          if length < MAGIC.bytesize && MAGIC.start_with?(bytes)
            invalid_file("truncated: it has #{size} bytes, less than its #{HEADER_SIZE}-byte header")
          end
          unless bytes.start_with?(MAGIC)
            invalid_file("not a static_tracing ring or trace file: magic (offset 0): expected #{MAGIC.inspect}, " \
                         "found #{bytes.byteslice(0, MAGIC.bytesize).inspect}")
          end
          check_version(bytes)
          return bytes if length == HEADER_SIZE

          invalid_file("truncated: it has #{size} bytes, less than its #{HEADER_SIZE}-byte header")
        end

        def check_version(bytes)
          return if bytes.bytesize < 12

          version = bytes.unpack1("L<", offset: FIELDS[:version])
          return if version == FORMAT_VERSION

          invalid("format version", FIELDS[:version], "#{FORMAT_VERSION} (the version this static-tracing reads)",
                  version)
        end

        def header(bytes)
          _, _, header_size, table_offset, @table_capacity, @ring_offset, @slot_count, slot_size, @flags, @pid,
            @pid_namespace, @anchor_monotonic_ns, @anchor_realtime_ns, @max_string, reserved =
            bytes.unpack(HEADER_FORMAT)
          expect(:header_size, HEADER_SIZE, header_size)
          expect(:table_offset, HEADER_SIZE, table_offset)
          expect(:slot_size, SLOT_SIZE, slot_size)
          expect(:reserved, 0, reserved)
          field(:flags, "no bits but 0 (overwrite) and 1 (complete)", format("0x%x", flags)) unless
            (flags & ~(OVERWRITE | COMPLETE)).zero?
          check_geometry
        end

        # Where the table and the slots are, and that the file holds them.
        def check_geometry
          field(:table_capacity, "a multiple of 8", table_capacity) unless (table_capacity % 8).zero?
          expect(:ring_offset, HEADER_SIZE + table_capacity, ring_offset, "table_offset + table_capacity = ")
          check_ring_geometry unless complete?
          check_size
        end

        def check_ring_geometry
          field(:ring_offset, "a multiple of #{PAGE} in a ring file", ring_offset) unless (ring_offset % PAGE).zero?
          return if slot_count.positive? && (slot_count & (slot_count - 1)).zero?

          field(:slot_count, "a power of two in a ring file", slot_count)
        end

        def check_size
          slots_end = ring_offset + (slot_count * SLOT_SIZE)
          return if slots_end <= size

          invalid_file("truncated: its #{slot_count} slots end at byte #{slots_end}, the file has #{size} bytes")
        end

        def counters(bytes)
          @head, @records, @dropped, @tail, table_used = bytes.unpack(COUNTERS_FORMAT)
          unless table_used <= table_capacity && (table_used % 8).zero?
            counter(:table_used, "a multiple of 8 at most table_capacity (#{table_capacity})", table_used)
          end
          counter(:table_used, "at least #{@table_used}, as before (the table only grows)", table_used) if
            @table_used && table_used < @table_used
          @table_used = table_used
        end

        def expect(field, expected, found, how = "")
          field(field, "#{how}#{expected}", found) unless found == expected
        end

        def field(field, expected, found)
          invalid("header field #{field}", FIELDS.fetch(field), expected, found)
        end

        def counter(field, expected, found)
          invalid("header field #{field}", COUNTERS.fetch(field), expected, found)
        end

        # Entries are appended, complete up to table_used: only the new ones
        # are read.
        def read_table
          return if @table_read == table_used

          bytes = read_at(HEADER_SIZE + @table_read, table_used - @table_read, "the probe table")
          offset = 0
          while offset < bytes.bytesize
            probe, entry_size = TableEntry.new(self, bytes, offset, @table_read + offset, probes.size).probe
            probes << probe
            offset += entry_size
          end
          @table_read = table_used
        end
      end
    end
  end
end
