# frozen_string_literal: true

module StaticTracing
  module CLI
    class TraceFile
      # A record's arguments from its payload: packed in order, an Integer
      # as i64, a Float as f64, a String as a u16 length then its bytes. The
      # payload ends in the record's last slot, zeros after it.
      class Payload
        PACKED = { "Integer" => "q<", "Float" => "E" }.freeze
        # A probe's plan: [unpack format, size] for arguments of a fixed
        # size, STRINGS for those with a String among them.
        INTEGER = ["q<", 8].freeze
        STRINGS = :strings
        STRING_LENGTH = 2

        # How the payload of a record of +probe+ is read.
        def self.plan(probe)
          types = probe.types
          return STRINGS if types.include?("String")
          return INTEGER if types == ["Integer"]

          [types.map { |type| PACKED.fetch(type) }.join.freeze, types.size * 8].freeze
        end

        # The record of +probe+ whose +slots+ slots start at +index+ in
        # +reading+ (Slots), with sequence number +seq+.
        def initialize(reading, index, seq, slots, probe)
          @reading = reading
          @index = index
          @seq = seq
          @slots = slots
          @probe = probe
          @bytes = reading.payload(index, slots)
        end

        def arguments(plan)
          return strings if plan == STRINGS

          format, size = plan
          check_end(size)
          @bytes.unpack(format)
        end

        private

        def strings
          offset = 0
          args = @probe.types.each_with_index.map do |type, index|
            value, offset = argument(type, index, offset)
            value
          end
          check_end(offset)
          args
        end

        def argument(type, index, offset)
          return [take(index, offset, 8).unpack1(PACKED.fetch(type)), offset + 8] unless type == "String"

          length = take(index, offset, STRING_LENGTH).unpack1("S<")
          max = @reading.max_string
          error("argument #{index} (String) length", "at most max_string (#{max})", length) if length > max
          [take(index, offset + STRING_LENGTH, length).force_encoding(Encoding::UTF_8),
           offset + STRING_LENGTH + length]
        end

        def take(index, offset, length)
          return @bytes.byteslice(offset, length) if offset + length <= @bytes.bytesize

          room = "#{@bytes.bytesize} payload bytes of its #{@slots} slot#{"s" unless @slots == 1}"
          error("argument #{index} of #{described}", "to end within the #{room}", "it ends at byte #{offset + length}")
        end

        # The arguments end in the last slot, and zeros follow them.
        def check_end(size)
          needed = Slots.slots_for(size)
          unless needed == @slots
            error("slot count for #{described}", "#{needed} (its arguments take #{size} bytes)", @slots)
          end
          rest = @bytes.byteslice(size, @bytes.bytesize - size)
          return if rest.count("\0") == rest.bytesize

          error("padding for #{described}", "zero bytes after its #{size} bytes of arguments", rest.unpack1("H*"))
        end

        def described
          "probe #{@probe.label}(#{@probe.types.join(", ")})"
        end

        def error(what, expected, found)
          @reading.record_error(@index, @seq, what, expected, found)
        end
      end
    end
  end
end
