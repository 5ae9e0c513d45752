# frozen_string_literal: true

module StaticTracing
  module CLI
    class TraceFile
      # Follows a live ring as its process writes it: each #poll returns
      # the records committed since the one before, #finish what is left.
      #
      #   reader = TraceFile::RingReader.new(file) # opened read-write
      #   loop { reader.poll.each { |record| ... }; sleep 0.1 }
      #   reader.finish.each { |record| ... }
      #   reader.lost
      #
      # The reader keeps a position, the sequence number of the next slot to
      # read, from the header's tail. A poll advances it only through
      # records committed one after another, so that a record being written
      # is returned by a later poll, whole; without overwrite it then stores
      # the position in tail (8 bytes, IO#pwrite), which lets the writer
      # reuse the slots before it. In flight mode (overwrite) the writer does
      # not wait for the reader: what it overwrote before a poll is lost.
      class RingReader
        include Header

        # The sequence number of the next slot to read.
        attr_reader :position
        # Records returned so far.
        attr_reader :records_read

        # +io+ answers #pread, #size and (for a ring without overwrite)
        # #pwrite; +name+ names it in messages.
        def initialize(io, name: io.respond_to?(:path) ? io.path : io.inspect)
          @layout = Layout.new(io, name)
          @position = @layout.tail
          @records_read = 0
        end

        # The records committed since the last poll, in sequence order.
        def poll
          return [] if slot_count.zero?

          layout.refresh
          first, count = window(layout.head)
          return [] unless count.positive?

          records, @position = Slots.read(layout, first, count).contiguous(overwrite?)
          store_tail
          taken(records)
        end

        # Every record still valid from the position on, in sequence order,
        # whether or not the ones before it were committed: for a last read
        # (the process exited, or the reader stops). The slots read are
        # released to the writer; what could not be read counts as lost.
        def finish
          return [] if slot_count.zero?

          layout.refresh
          records = Slots.read_ring(layout).records
          records.select! { |record| record.seq >= position }
          # Slots.read read head again: records reserved before then are
          # read now or never.
          @position = [position, layout.head].max
          store_tail
          taken(records)
        end

        # Records reserved and not returned: dropped (the ring or the probe
        # table was full), overwritten (flight mode), or not read (yet).
        def lost
          dropped + records_total - records_read
        end

        private

        attr_reader :layout

        # [first, count]: the slots from the position to head, of which
        # only the last slot_count can still be there.
        def window(head)
          first = [position, head - slot_count].max
          [first, head - first]
        end

        # Nothing is stored in a trace file (complete): no writer waits.
        def store_tail
          return if overwrite? || complete? || position == layout.tail

          layout.io.pwrite([position].pack("Q<"), Layout::TAIL_OFFSET)
        rescue SystemCallError, IOError => e
          raise Error, "cannot store the read position in #{layout.name}: #{CLI.reason(e)}"
        end

        def taken(records)
          @records_read += records.size
          records
        end
      end
    end
  end
end
