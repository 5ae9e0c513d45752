# frozen_string_literal: true

module StaticTracing
  module CLI
    # Reads the probes out of a stub's `.note.stapsdt` section, in plain Ruby
    # so that `list` works without either native library (it reads no
    # recorder file) and against processes running another Ruby. What it
    # reads is what ext/stapsdt's ELF writer writes: spec/contracts_spec.rb
    # holds the two equal on stubs the extension wrote.
    #
    # Only what the stub writer emits is accepted: a 64-bit little-endian ELF
    # file. Everything is bounds-checked, since the bytes come from another
    # process's files.
    class StubFile
      # The bytes are not a stub this executable can read.
      class FormatError < StandardError; end

      # The instruction at a probe site while no breakpoint is planted on it.
      # x86-64: the 5-byte NOP (nopl 0x0(%rax,%rax,1)), see stapsdt's Arch::nop.
      NOPS = { 62 => "\x0f\x1f\x44\x00\x00".b, 183 => "\x1f\x20\x03\xd5".b }.freeze
      MACHINES = { 62 => "x86_64", 183 => "aarch64" }.freeze

      NT_STAPSDT = 3
      NOTE_OWNER = "stapsdt\0".b
      EHDR_SIZE = 64
      SHDR_FORMAT = "L<L<Q<Q<Q<Q<L<L<Q<Q<"
      SHDR_MIN_SIZE = 64

      # One probe note. +pc+ and +semaphore+ are addresses relative to the
      # stub's load bias (0 means no semaphore).
      Probe = Struct.new(:provider, :name, :pc, :semaphore, :arg_spec, keyword_init: true) do
        def args
          Arguments.parse(arg_spec)
        end
      end

      attr_reader :machine, :probes

      def self.read(path)
        parse(File.binread(path))
      end

      def self.parse(bytes)
        new(bytes.b)
      end

      def initialize(bytes)
        @bytes = bytes
        check_header
        @machine = u16(18)
        @sections = read_sections
        @probes = read_probes.freeze
      end

      def arch
        MACHINES.fetch(@machine, "machine #{@machine}")
      end

      # The bytes of an untouched probe site, or nil for an unknown machine.
      def nop
        NOPS[@machine]
      end

      def providers
        @probes.map(&:provider).uniq
      end

      private

      def check_header
        raise FormatError, "not an ELF file" unless @bytes.start_with?("\x7FELF".b)
        raise FormatError, "truncated ELF header (#{@bytes.bytesize} bytes)" if @bytes.bytesize < EHDR_SIZE
        raise FormatError, "not a 64-bit ELF file" unless @bytes.getbyte(4) == 2
        raise FormatError, "not a little-endian ELF file" unless @bytes.getbyte(5) == 1
      end

      Section = Struct.new(:name, :address, :offset, :bytes)

      def read_sections
        shoff = u64(40)
        entsize = u16(58)
        count = u16(60)
        names_index = u16(62)
        raise FormatError, "no section headers" if shoff.zero? || count.zero?
        raise FormatError, "section header size #{entsize} is too small" if entsize < SHDR_MIN_SIZE
        raise FormatError, "section name table index #{names_index} is out of range" if names_index >= count

        raw = Array.new(count) { |index| slice(shoff + (index * entsize), SHDR_MIN_SIZE).unpack(SHDR_FORMAT) }
        names = raw[names_index]
        names = slice(names[4], names[5])
        raw.map do |header|
          Section.new(c_string(names, header[0]), header[3], header[4], header[5])
        end
      end

      def read_probes
        notes = @sections.find { |section| section.name == ".note.stapsdt" }
        raise FormatError, "no .note.stapsdt section" unless notes

        # The note's base is the link-time address of .stapsdt.base; the gap
        # to where that section really is moves the probe site (prelink).
        base = @sections.find { |section| section.name == ".stapsdt.base" }
        each_note(slice(notes.offset, notes.bytes)).map do |desc|
          probe_from(desc, base)
        end
      end

      def each_note(bytes)
        return enum_for(:each_note, bytes) unless block_given?

        at = 0
        while at + 12 <= bytes.bytesize
          name_size, desc_size, type = bytes.unpack("L<L<L<", offset: at)
          name_at = at + 12
          desc_at = name_at + align4(name_size)
          raise FormatError, "truncated note at offset #{name_at - 12}" if desc_at + desc_size > bytes.bytesize

          at = desc_at + align4(desc_size)
          next unless type == NT_STAPSDT && bytes.byteslice(name_at, name_size) == NOTE_OWNER

          yield bytes.byteslice(desc_at, desc_size)
        end
      end

      def probe_from(desc, base)
        raise FormatError, "stapsdt note of #{desc.bytesize} bytes is too short" if desc.bytesize < 24

        pc, note_base, semaphore = desc.unpack("Q<Q<Q<")
        strings = desc.byteslice(24..).split("\0", -1)
        raise FormatError, "stapsdt note without provider, name and arguments" if strings.size < 3

        pc += base.address - note_base if base
        Probe.new(provider: text(strings[0]), name: text(strings[1]), pc:, semaphore:,
                  arg_spec: text(strings[2]))
      end

      def text(string)
        string.dup.force_encoding(Encoding::UTF_8).scrub
      end

      def c_string(table, offset)
        raise FormatError, "section name offset #{offset} is out of range" if offset >= table.bytesize

        table.byteslice(offset..).split("\0", 2).first.to_s
      end

      def slice(offset, size)
        if offset + size > @bytes.bytesize
          raise FormatError, "truncated file: needs #{size} bytes at offset #{offset}, has #{@bytes.bytesize} in all"
        end

        @bytes.byteslice(offset, size)
      end

      def u16(offset)
        @bytes.unpack1("S<", offset:)
      end

      def u64(offset)
        @bytes.unpack1("Q<", offset:)
      end

      def align4(size)
        (size + 3) & ~3
      end
    end

    # Argument specs (`-8@%rdi 8@%rsi`) as the Ruby types they stand for.
    # The stub records only size and sign: a signed 8-byte slot is an
    # Integer; an unsigned one carries a String pointer or a Float's bits,
    # and only the process knows which.
    module Arguments
      POINTER_OR_BITS = "String/Float"

      module_function

      def parse(arg_spec)
        arg_spec.split.map { |spec| type(spec) }
      end

      def type(spec)
        case spec
        when /\A-8@/ then "Integer"
        when /\A8@/ then POINTER_OR_BITS
        else spec
        end
      end

      def integer_first?(arg_spec)
        arg_spec.split.first.to_s.start_with?("-8@")
      end
    end
  end
end
