# frozen_string_literal: true

module StaticTracing
  module CLI
    class TraceFile
      # One read of consecutive slots, from slot sequence number +first+,
      # and the records in them that validate (docs/recording.md, "Slots
      # and records"). A live ring is read in three passes, each a read of
      # the whole region and one unpack: the stamps (A), the slots (B), the
      # stamps again (C); a record is taken only if each of its slots has in
      # A and C the stamp its first slot implies, and is then whole in B. A
      # complete file is read once.
      #
      # A record that fails that was being written, or overwritten, while it
      # was read: it is not returned (it counts as lost). A stamp that is
      # the same in A and C but cannot be, a record that names no probe or
      # whose payload does not fit its slots, are a broken file: FormatError.
      #
      # Slots are addressed by their index in the read (0 for +first+).
      class Slots
        FIRST = 0x8000
        INDEX = 0x7fff
        STAMP_SHIFT = 16
        # A stamp keeps the low 48 bits of a sequence number.
        SEQUENCE_MASK = (1 << 48) - 1
        SLOT_SIZE = Layout::SLOT_SIZE
        FIRST_PAYLOAD = 8
        LATER_PAYLOAD = 24
        # Every slot unpacked as a first one: stamp, time, probe id, thread
        # id, and payload bytes 0 to 7 as the Integer a one-Integer record holds.
        SLOT_FORMAT = "Q<Q<L<L<q<"
        VALUES = 5
        STAMP_FORMAT = "Q<x24"
        # The low 16 bits of the stamp of a one-slot record's slot.
        QUICK_STAMP = FIRST | 1

        # Reads +count+ slots (at most slot_count) from sequence +first+, then
        # (for a live ring) the counters and the probe table again, which
        # then cover every record committed before pass C.
        def self.read(layout, first, count)
          return new(layout, first, count, layout.read_slots(first, count)) if layout.complete?

          # The passes back to back, unpacked after: a writer that laps the
          # ring while they run leaves no record of it whole.
          before = layout.read_slots(first, count)
          bytes = layout.read_slots(first, count)
          after = layout.read_slots(first, count)
          layout.refresh
          new(layout, first, count, bytes, [before, after].map { |stamps| stamps.unpack(STAMP_FORMAT * count) })
        end

        # Reads the whole ring, from the oldest sequence number it can hold
        # (a lap before head, or 0), so that its records come out in order
        # but for those written while it was read.
        def self.read_ring(layout)
          count = layout.slot_count
          read(layout, [layout.head - count, 0].max, count)
        end

        # How many slots a payload of +size+ bytes fills.
        def self.slots_for(size)
          size <= FIRST_PAYLOAD ? 1 : 1 + ((size - FIRST_PAYLOAD + LATER_PAYLOAD - 1) / LATER_PAYLOAD)
        end

        # +stamps+: for a live ring, those of passes A and C.
        def initialize(layout, first, count, bytes, stamps = nil)
          @layout = layout
          @first = first
          @count = count
          @bytes = bytes
          @values = bytes.unpack(SLOT_FORMAT * count)
          @before, @after = stamps
          @slot_count = layout.slot_count
          @head = layout.head
          @wide = @head > SEQUENCE_MASK
          @probes = layout.probes
          @plans = @probes.map { |probe| Payload.plan(probe) }
        end

        # Every record that validates, in sequence order. The read must be
        # of the whole ring (count == slot_count): a record may wrap.
        def records
          records = []
          index = 0
          while index < @count
            index = take_common(index, records)
            index += take(index, records) if index < @count
          end
          @out_of_order ? records.sort_by!(&:seq) : records
        end

        # The records one after another from +first+, up to the first slot
        # that does not hold the next committed record: [records, the
        # sequence number after the last]. In flight mode (+overwrite+) the
        # later slots of a record whose first slot was overwritten are
        # passed over.
        def contiguous(overwrite)
          records = []
          index = 0
          while index < @count && (step = step(index, overwrite, records))
            index += step
          end
          [records, @first + index]
        end

        # The payload bytes of the +slots+ slots from +index+.
        def payload(index, slots)
          payload = @bytes.byteslice((index * SLOT_SIZE) + SLOT_SIZE - FIRST_PAYLOAD, FIRST_PAYLOAD)
          (1...slots).each do |offset|
            later = (index + offset) % @count
            payload << @bytes.byteslice((later * SLOT_SIZE) + SLOT_SIZE - LATER_PAYLOAD, LATER_PAYLOAD)
          end
          payload
        end

        def max_string
          @layout.max_string
        end

        def record_error(index, seq, what, expected, found)
          @layout.invalid("record #{seq} in slot #{position(index)}: #{what}", @layout.slot_offset(position(index)),
                          expected, found)
        end

        private

        # Takes into +records+ the common records from slot +index+ on, one
        # after another: one slot, one Integer, of sequence number first +
        # index below head, the stamp the same in passes A and C. Returns
        # the index of the first slot that holds no such record, for #take.
        # A trace is mostly these: they are checked here, in one loop, at a
        # fraction of what #record costs.
        def take_common(index, records)
          values = @values
          # A trace file's stamps are among the slots' values.
          stamps, stride = @after ? [@after, 1] : [values, VALUES]
          seq = @first + index
          stop = [@count, @head - @first].min
          while index < stop
            stamp = stamps[index * stride]
            break unless stamp == ((seq << STAMP_SHIFT) | QUICK_STAMP) && stable?(index, stamp)

            base = index * VALUES
            probe_id = values[base + 2]
            break unless @plans[probe_id].equal?(Payload::INTEGER)

            records << Record.new(seq, values[base + 1], @probes[probe_id], values[base + 3], [values[base + 4]])
            index += 1
            seq += 1
          end
          index
        end

        # How many slots to move past from +index+: those of the record that
        # starts there, taken into +records+, when it validates; else 1.
        def take(index, records)
          stamp = first_stamp(index)
          record = stamp && record(index, stamp, true)
          return 1 unless record

          records << record
          stamp & INDEX
        end

        def stamp_at(index)
          @after ? @after[index] : @values[index * VALUES]
        end

        # Slot +index+'s stamp when it is a first slot's, the same in passes
        # A and C; nil otherwise (after checking a later slot's).
        def first_stamp(index)
          stamp = stable_stamp(index)
          return stamp if stamp.nil? || stamp.anybits?(FIRST)

          continuation(index, stamp)
          nil
        end

        # Slot +index+'s stamp, or nil when it is 0 or changed between passes.
        def stable_stamp(index)
          stamp = stamp_at(index)
          stamp if !stamp.zero? && stable?(index, stamp)
        end

        # Whether slot +index+ had +stamp+ (that of pass C) in pass A too.
        def stable?(index, stamp)
          @before.nil? || @before[index] == stamp
        end

        # How many slots the walk from +first+ moves past slot +index+: a
        # record's, taken into +records+, or a slot of an overwritten one;
        # nil to stop there.
        def step(index, overwrite, records)
          stamp = stable_stamp(index)
          return unless stamp

          if stamp.nobits?(FIRST)
            continuation(index, stamp)
            return stamp >> STAMP_SHIFT == ((@first + index) & SEQUENCE_MASK) ? 1 : nil if overwrite

            return
          end
          return unless sequence(stamp, index) == @first + index && (record = record(index, stamp, false))

          records << record
          stamp & INDEX
        end

        # The record whose first slot is +index+, or nil when one of its
        # later slots does not hold it (yet, or any more). +wrap+: whether its
        # later slots may wrap to the read's start.
        def record(index, stamp, wrap)
          seq = sequence(stamp, index)
          # Overwritten while the ring was read, or by a writer that lost
          # the race for a slot it had reserved a lap before.
          @out_of_order = true unless seq == @first + index
          slots = stamp & INDEX
          check_slots(index, seq, slots, stamp)
          return if slots > 1 && !continued?(index, seq, slots, wrap)

          base = index * VALUES
          probe_id = @values[base + 2]
          plan = @plans[probe_id] || unknown_probe(index, seq, probe_id)
          probe = @probes[probe_id]
          args = if slots == 1 && plan.equal?(Payload::INTEGER)
                   [@values[base + 4]]
                 else
                   Payload.new(self, index, seq, slots, probe).arguments(plan)
                 end
          Record.new(seq, @values[base + 1], probe, @values[base + 3], args)
        end

        # The sequence number of slot +index+'s stamp: below head, and
        # congruent to the slot's position modulo slot_count.
        def sequence(stamp, index)
          seq = stamp >> STAMP_SHIFT
          seq = @head - ((@head - seq) & SEQUENCE_MASK) if @wide
          return seq if seq < @head && (seq == @first + index || ((seq - @first - index) % @slot_count).zero?)
          return bad_stamp(index, stamp, "a sequence number below head (#{@head})", seq) if seq >= @head

          bad_stamp(index, stamp, "a sequence number congruent to its position #{position(index)} modulo " \
                                  "slot_count (#{@slot_count})", seq)
        end

        # A later slot's stamp that no record has claimed.
        def continuation(index, stamp)
          return sequence(stamp, index) unless (stamp & INDEX).zero?

          bad_stamp(index, stamp, "0, a first slot's stamp (bit 15 set) or a later slot's (index 1 to #{INDEX})",
                    "index 0 with bit 15 clear")
        end

        def check_slots(index, seq, slots, stamp)
          bad_stamp(index, stamp, "a first slot's count of slots from 1 to #{INDEX}", 0) if slots.zero?
          if slots > @slot_count
            bad_stamp(index, stamp, "a record of at most slot_count (#{@slot_count}) slots", "#{slots} slots")
          end
          return if seq + slots <= @head

          bad_stamp(index, stamp, "a record that ends by head (#{@head})", "#{slots} slots from #{seq}")
        end

        def continued?(index, seq, slots, wrap)
          (1...slots).all? do |offset|
            later = index + offset
            if later >= @count
              return false unless wrap

              later -= @count
            end
            expected = (((seq + offset) & SEQUENCE_MASK) << STAMP_SHIFT) | offset
            stable_stamp(later) == expected
          end
        end

        def unknown_probe(index, seq, probe_id)
          record_error(index, seq, "probe id", "below #{@probes.size} (the probe table's entries)", probe_id)
        end

        def bad_stamp(index, stamp, expected, found)
          @layout.invalid("stamp of slot #{position(index)} (0x#{stamp.to_s(16)})",
                          @layout.slot_offset(position(index)), expected, found)
        end

        def position(index)
          (@first + index) % @slot_count
        end
      end
    end
  end
end
