# frozen_string_literal: true

# The bounds of a recording's settings: what the command refuses before it
# sends anything, and the process refuses again as it reads them, with
# the setting, what was given and what is allowed.
RSpec.describe StaticTracing::RecordingOptions do
  def trigger(text)
    described_class.settings(dump_when: text).dump_when
  end

  describe "a trigger's threshold" do
    it "is refused past a day, which the process could not hold in 64 bits of nanoseconds anyway" do
      expect { trigger("shop:buy > 99999999999s") }.to raise_error(
        ArgumentError,
        'trigger threshold "99999999999s" in "shop:buy > 99999999999s" is out of range: give at least 1ns ' \
        "and at most 86400s (a day)"
      )
      expect { trigger("shop:buy > 86400.000000001s") }.to raise_error(ArgumentError, /out of range/)
      expect { trigger("shop:buy > 18446744073709551616ns") }.to raise_error(ArgumentError, /out of range/)
    end

    it "is refused when it is 0, or rounds to 0 nanoseconds: every call would be a snapshot" do
      ["shop:buy > 0ms", "shop:buy > 0s", "shop:buy > 0.4ns"].each do |text|
        expect { trigger(text) }.to raise_error(ArgumentError, /\Atrigger threshold .* give at least 1ns/)
      end
    end

    it "takes anything from 1ns to a day" do
      expect(trigger("shop:buy > 1ns")).to have_attributes(pattern: "shop:buy", threshold_ns: 1)
      expect(trigger("shop:buy > 0.5ns").threshold_ns).to eq(1)
      expect(trigger("shop:buy > 86400s").threshold_ns).to eq(86_400 * 1_000_000_000)
      expect(trigger("shop:buy > 250ms").to_s).to eq("shop:buy > 250ms")
    end

    it "is checked the same in a Trigger made elsewhere and in the settings a command sent" do
      made = described_class::Trigger.new("shop:buy", 10**20)
      expect { described_class.settings(dump_when: made) }.to raise_error(ArgumentError, /out of range/)
      expect { described_class.from_h("dump_when" => "shop:buy > 99999999999s") }
        .to raise_error(ArgumentError, /trigger threshold "99999999999s"/)
      expect(described_class.settings(dump_when: described_class::Trigger.new("shop:buy", 5)).dump_when.threshold_ns)
        .to eq(5)
    end
  end

  describe "the ring's size" do
    it "is refused outside 64K..4G, whatever way it is given" do
      ["1K", 65_535, described_class::MAX_SIZE + 1, "5G", 10**30, -1, 0].each do |size|
        expect { described_class.settings(size:) }.to raise_error(ArgumentError, /\Aring size .* from 64K to 4G\z/)
      end
    end

    it "is refused when it is no size at all" do
      [1.5, [65_536], { "size" => 1 }, "16X", true, Float::INFINITY].each do |size|
        expect { described_class.settings(size:) }.to raise_error(ArgumentError, /\Ainvalid ring size/)
      end
    end

    it "takes its bounds" do
      expect(described_class.settings(size: "64K").ring_size).to eq(65_536)
      expect(described_class.settings(size: "4G").ring_size).to eq(4 * described_class::GIB)
    end
  end

  it "bounds the interval and the number of snapshots" do
    [-1, 86_401, "soon", [], Float::INFINITY].each do |seconds|
      expect { described_class.settings(dump_interval: seconds) }
        .to raise_error(ArgumentError, /\Ainvalid dump interval .*: give seconds from 0 to 86400\z/)
    end
    [0, 1001, "many", {}, 1.5].each do |count|
      expect { described_class.settings(max_dumps: count) }
        .to raise_error(ArgumentError, /\Ainvalid maximum of dumps .*: give a number from 1 to 1000\z/)
    end
  end

  it "bounds what a snapshot holds and what a dump directory's snapshots take" do
    [-1, 86_401, "soon", nil].each do |seconds|
      expect { described_class.settings(dump_window: seconds) }
        .to raise_error(ArgumentError, /\Ainvalid dump window .*: give seconds from 0 to 86400\z/)
    end
    [0, (2**32) + 1, "all", 1.5].each do |count|
      expect { described_class.settings(dump_records: count) }
        .to raise_error(ArgumentError, /\Ainvalid number of records a snapshot holds .*: give a number from 1/)
    end
    ["1K", "lots", -1, 2**51].each do |bytes|
      expect { described_class.settings(max_dump_bytes: bytes) }
        .to raise_error(ArgumentError, /\Ainvalid maximum of snapshot bytes .*from 64K/)
    end
    expect { described_class.settings(dump_windows: 1) }.to raise_error(ArgumentError, /unknown .*dump_windows/)
    settings = described_class.parse_arguments("--dump-when 'a:b > 1ms' --dump-window 0.5 --dump-records 7 " \
                                               "--max-dump-bytes 1G")
    expect(settings).to have_attributes(dump_window: 0.5, dump_records: 7, max_dump_bytes: described_class::GIB,
                                        max_dumps: 10)
    expect(described_class.from_h(settings.to_h)).to eq(settings)
    expect(described_class.settings).to have_attributes(dump_window: 5.0, dump_records: 100_000,
                                                        max_dump_bytes: 256 * described_class::MIB)
  end
end
