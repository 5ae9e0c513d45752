# frozen_string_literal: true

module StaticTracing
  module CLI
    class TraceFile
      # One entry of the probe table, checked: its sizes, its types, its
      # latency and stack arguments, its names, and that its reserved bytes
      # and its padding are zero.
      class TableEntry
        # entry_size, arg_count, provider_len, probe_len, latency_arg,
        # stack_arg, reserved, types[6], reserved[2].
        FORMAT = "S< C C C C C C C6 S<"

        def initialize(layout, bytes, offset, table_position, id)
          @layout = layout
          @bytes = bytes
          @offset = offset
          @file_offset = Layout::HEADER_SIZE + table_position
          @id = id
        end

        # [Probe, the entry's size]
        def probe
          size, arg_count, provider_len, probe_len, latency, stack, reserved, *codes, reserved_end = header
          check_length(:provider, provider_len, 3)
          check_length(:probe, probe_len, 4)
          check_size(size, provider_len, probe_len)
          invalid("reserved byte", "0", reserved, 7) unless reserved.zero?
          invalid("reserved bytes", "0", reserved_end, 14) unless reserved_end.zero?
          types = check_types(arg_count, codes)
          check_arg(:latency_arg, latency, types, "Integer", 5)
          check_arg(:stack_arg, stack, types, "String", 6)
          provider = name(:provider, Layout::TABLE_ENTRY_HEADER, provider_len)
          probe = name(:probe, Layout::TABLE_ENTRY_HEADER + provider_len, probe_len)
          check_padding(Layout::TABLE_ENTRY_HEADER + provider_len + probe_len, size)
          [Probe.new(@id, provider, probe, types, arg(latency), arg(stack)).freeze, size]
        end

        private

        def header
          remaining = @bytes.bytesize - @offset
          if remaining < Layout::TABLE_ENTRY_HEADER
            invalid("entry", "a #{Layout::TABLE_ENTRY_HEADER}-byte entry header before table_used " \
                             "(#{@layout.table_used})", "#{remaining} bytes", 0)
          end
          @bytes.unpack(FORMAT, offset: @offset)
        end

        def check_size(size, provider_len, probe_len)
          invalid("entry_size", "a multiple of 8", size, 0) unless (size % 8).zero?
          needed = Layout::TABLE_ENTRY_HEADER + provider_len + probe_len
          invalid("entry_size", "at least #{needed} (header and names)", size, 0) if size < needed
          remaining = @bytes.bytesize - @offset
          return if size <= remaining

          invalid("entry_size", "at most the #{remaining} bytes left before table_used (#{@layout.table_used})",
                  size, 0)
        end

        def check_types(arg_count, codes)
          invalid("arg_count", "0 to #{Layout::MAX_ARGS}", arg_count, 2) if arg_count > Layout::MAX_ARGS
          codes.each_with_index.map do |code, index|
            if index < arg_count
              invalid("types[#{index}]", "1 (Integer), 2 (Float) or 3 (String)", code, 8 + index) unless
                Layout::TYPES.key?(code)
            else
              invalid("types[#{index}]", "0 (past arg_count #{arg_count})", code, 8 + index) unless code.zero?
            end
            Layout::TYPES[code]
          end.compact
        end

        def check_arg(field, index, types, type, at)
          return if index == Layout::NO_ARG || types[index] == type

          invalid(field, "#{Layout::NO_ARG} (none) or the index of a#{"n" if type.start_with?("I")} #{type} " \
                         "argument (types: #{types.empty? ? "none" : types.join(", ")})", index, at)
        end

        def check_length(kind, length, at)
          invalid("#{kind}_len", "1 to #{Layout::MAX_NAME}", length, at) unless length.between?(1, Layout::MAX_NAME)
        end

        def name(kind, at, length)
          text = @bytes.byteslice(@offset + at, length)
          return text.force_encoding(Encoding::UTF_8) if Layout::NAME.match?(text)

          invalid("#{kind} name", "letters, digits and underscores, not starting with a digit", text.inspect, at)
        end

        # The names end in zeros up to entry_size.
        def check_padding(names_end, size)
          padding = @bytes.byteslice(@offset + names_end, size - names_end)
          return if padding.count("\0") == padding.bytesize

          invalid("padding", "zero bytes after the names, up to entry_size (#{size})", padding.unpack1("H*"),
                  names_end)
        end

        def arg(index)
          index unless index == Layout::NO_ARG
        end

        def invalid(what, expected, found, at)
          @layout.invalid("probe table entry #{@id} #{what}", @file_offset + at, expected, found)
        end
      end
    end
  end
end
