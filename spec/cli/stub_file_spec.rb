# frozen_string_literal: true

require "static_tracing/cli"
require "tempfile"

RSpec.describe StaticTracing::CLI::StubFile do
  let(:format_error) { StaticTracing::CLI::StubFile::FormatError }

  context "with a stub loaded in this process" do
    before { skip "USDT probes are not supported on #{RUBY_PLATFORM}" unless StaticTracing.supported? }

    let(:provider) do
      StaticTracing::Provider.register(:cli_notes).tap do |provider|
        provider.add_tracepoint(:hello, Integer, String, Float)
        provider.add_tracepoint(:bare)
        provider.add_tracepoint(:six, *[Integer] * 6)
        provider.load
      end
    end
    let(:bytes) { File.binread(provider.path) }
    let(:stub) { described_class.read(provider.path) }

    it "reads every probe's provider, name and argument spec, in declaration order" do
      expect(stub.probes.map { |probe| [probe.provider, probe.name, probe.arg_spec] }).to eq(
        [
          ["cli_notes", "hello", "-8@%rdi 8@%rsi 8@%rdx"],
          ["cli_notes", "bare", ""],
          ["cli_notes", "six", "-8@%rdi -8@%rsi -8@%rdx -8@%rcx -8@%r8 -8@%r9"]
        ]
      )
      expect(stub.providers).to eq(["cli_notes"])
    end

    it "maps argument specs to the types they can stand for" do
      expect(stub.probes.map(&:args)).to eq([%w[Integer String/Float String/Float], [], ["Integer"] * 6])
    end

    it "gives each probe a nop stub and a zeroed two-byte semaphore of its own in the file" do
      stub.probes.each do |probe|
        expect(bytes.byteslice(probe.pc, stub.nop.bytesize)).to eq(stub.nop)
        expect(bytes.byteslice(probe.semaphore, 2)).to eq("\0\0".b)
      end
      expect(stub.probes.map(&:pc).uniq.size).to eq(3)
      expect(stub.probes.map(&:semaphore).uniq.size).to eq(3)
      expect(stub.probes.map(&:semaphore)).to all(be_positive)
    end

    it "names the machine it was built for" do
      expect(stub.arch).to eq(RbConfig::CONFIG["host_cpu"] == "aarch64" ? "aarch64" : "x86_64")
    end

    it "refuses the file cut short anywhere, with a FormatError" do
      lengths = [0, 3, 40, 63, 64, 100, bytes.bytesize / 2, bytes.bytesize - 64, bytes.bytesize - 1]
      lengths.each do |length|
        expect { described_class.parse(bytes.byteslice(0, length)) }
          .to raise_error(format_error, /truncated|not an ELF file/), "cut at #{length} bytes"
      end
    end

    it "refuses a note whose size runs past its section" do
      owner = bytes.index("stapsdt\0".b)
      corrupt = bytes.dup
      corrupt[owner - 8, 4] = [0xffff].pack("L<")
      expect { described_class.parse(corrupt) }.to raise_error(format_error, /truncated note/)
    end

    it "refuses an ELF file without stapsdt notes" do
      renamed = bytes.sub(".note.stapsdt\0".b, ".note.renamed\0".b)
      expect(renamed).not_to eq(bytes)
      expect { described_class.parse(renamed) }.to raise_error(format_error, "no .note.stapsdt section")
    end

    it "refuses 32-bit and big-endian files" do
      expect { described_class.parse(bytes.dup.tap { |b| b.setbyte(4, 1) }) }
        .to raise_error(format_error, /not a 64-bit ELF file/)
      expect { described_class.parse(bytes.dup.tap { |b| b.setbyte(5, 2) }) }
        .to raise_error(format_error, /not a little-endian ELF file/)
    end
  end

  it "refuses a file that is not ELF" do
    Tempfile.create("not_elf") do |file|
      file.write("#!/bin/sh\necho hello\n" * 10)
      file.close
      expect { described_class.read(file.path) }.to raise_error(format_error, "not an ELF file")
    end
  end
end

RSpec.describe StaticTracing::CLI::Arguments do
  it "calls signed 8-byte slots Integer and unsigned ones String/Float, and leaves others as they are" do
    expect(described_class.parse("-8@%rdi 8@%rsi 8@x2 -4@%eax")).to eq(%w[Integer String/Float String/Float -4@%eax])
    expect(described_class.parse("")).to eq([])
  end

  it "tells latency probes by an Integer first argument" do
    expect(described_class.integer_first?("-8@%rdi 8@%rsi")).to be(true)
    expect(described_class.integer_first?("8@%rdi -8@%rsi")).to be(false)
    expect(described_class.integer_first?("")).to be(false)
  end
end
