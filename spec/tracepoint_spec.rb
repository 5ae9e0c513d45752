# frozen_string_literal: true

RSpec.describe StaticTracing::Tracepoint do
  describe ".new" do
    it "declares the tracepoint, registering the provider if needed" do
      tracepoint = described_class.new(:my_app, :hello, Integer, String)
      expect(tracepoint.provider).to equal(StaticTracing.providers[:my_app])
      expect(tracepoint.name).to eq(:hello)
      expect(tracepoint.types).to eq([Integer, String])
      expect(described_class.new("my_app", "hello", Integer, String)).to equal(tracepoint)
      expect(tracepoint.inspect).to eq("#<StaticTracing::Tracepoint my_app:hello(Integer, String)>")
    end

    it "accepts a Provider" do
      provider = StaticTracing::Provider.register(:my_app)
      expect(described_class.new(provider, :hello).provider).to equal(provider)
    end
  end

  describe "#fire" do
    let(:tracepoint) { described_class.new(:my_app, :hello, Integer, String, Float) }

    it "does nothing and returns false while not loaded or not attached" do
      expect(tracepoint.fire(1, "a", 1.5)).to be(false)
      tracepoint.load
      expect(tracepoint).to be_loaded
      expect(tracepoint.enabled?).to be(false)
      expect(tracepoint.fire(1, "a", 1.5)).to be(false)
      tracepoint.unload
      expect(tracepoint.fire(1, "a", 1.5)).to be(false)
    end

    it "checks the number of arguments, loaded or not" do
      [false, true].each do |loaded|
        tracepoint.provider.load if loaded
        expect { tracepoint.fire(1, "a") }.to raise_error(
          ArgumentError, "tracepoint my_app:hello takes 3 arguments (Integer, String, Float), 2 given"
        )
        expect { tracepoint.fire(1, "a", 1.0, 2) }.to raise_error(ArgumentError, /takes 3 arguments .*, 4 given/)
      end
      expect { described_class.new(:my_app, :one, Integer).fire }
        .to raise_error(ArgumentError, "tracepoint my_app:one takes 1 argument (Integer), 0 given")
    end

    it "checks types, naming the position, the expected and the given" do
      tracepoint.load
      expect { tracepoint.fire("1", "a", 1.0) }
        .to raise_error(TypeError, 'tracepoint my_app:hello argument 1 must be an Integer, got String ("1")')
      expect { tracepoint.fire(1, :a, 1.0) }
        .to raise_error(TypeError, "tracepoint my_app:hello argument 2 must be a String, got Symbol (:a)")
      expect { tracepoint.fire(1, "a", "1.0") }
        .to raise_error(TypeError, /argument 3 must be a Float, got String/)
      expect { tracepoint.fire(nil, "a", 1.0) }.to raise_error(TypeError, /argument 1 must be an Integer, got NilClass/)
      expect do
        tracepoint.fire(1.0, "a", 1.0)
      end.to raise_error(TypeError, /argument 1 must be an Integer, got Float \(1.0\)/)
      expect { tracepoint.fire(1, "a" * 1000, 1.0) }.not_to raise_error
    end

    it "accepts every signed 64-bit Integer and refuses the others with a RangeError" do
      [0, -1, (2**63) - 1, -2**63, 2**40].each do |value|
        expect(tracepoint.fire(value, "a", 0.0)).to be(false)
      end
      [2**63, -(2**63) - 1, 2**200].each do |value|
        expect { tracepoint.fire(value, "a", 0.0) }
          .to raise_error(RangeError, /my_app:hello argument 1: .* is outside the signed 64-bit range/)
      end
    end

    it "accepts Integers for Float arguments, and any Float" do
      [1, 2**70, Float::NAN, Float::INFINITY, -0.0].each do |value|
        expect(tracepoint.fire(1, "a", value)).to be(false)
      end
    end

    it "accepts frozen, binary and NUL-containing Strings" do
      ["frozen", "\xff\xfe".b, "before\0after", "", "x" * 100_000, "abc"[1..]].each do |value|
        expect(tracepoint.fire(1, value, 0.0)).to be(false)
      end
    end
  end

  describe "#latency_start and #fire_latency" do
    it "start nothing and fire nothing without a tracer, loaded or not" do
      tracepoint = described_class.new(:tracepoint_spec_latency, :timed, Integer)
      expect(tracepoint.latency_start).to be_nil
      tracepoint.provider.load
      expect(tracepoint.latency_start).to be_nil
      expect(tracepoint.fire_latency(StaticTracing.nsec)).to be(false)
    end

    it "refuse a start that is not an Integer and a tracepoint not declared (Integer)" do
      timed = described_class.new(:tracepoint_spec_latency, :timed, Integer)
      expect { timed.fire_latency("12") }.to raise_error(TypeError, /tracepoint_spec_latency:timed.*Integer.*String/)
      named = described_class.new(:tracepoint_spec_latency, :named, String)
      expect { named.fire_latency(1) }
        .to raise_error(ArgumentError, /tracepoint_spec_latency:named.*\(String\).*\(Integer\)/)
    end
  end

  describe "#load and #unload" do
    it "load makes sure the provider is loaded; unload unloads it" do
      tracepoint = described_class.new(:my_app, :hello)
      expect(tracepoint.load).to equal(tracepoint)
      expect(tracepoint.provider).to be_loaded
      expect(tracepoint.unload).to equal(tracepoint)
      expect(tracepoint.provider).not_to be_loaded
    end
  end

  it "cannot be instantiated without a provider" do
    expect { described_class.allocate }.to raise_error(TypeError)
  end

  it "is named by #label as its messages name it, words the extension owns" do
    tracepoint = described_class.new(:my_app, :labelled, Integer)
    expect(tracepoint.label).to eq("tracepoint my_app:labelled")
    expect { tracepoint.fire }.to raise_error(ArgumentError, /\A#{tracepoint.label} takes 1 argument/)
    # The class's own method, behind any module a test run prepends.
    label = described_class.instance_method(:label)
    label = label.super_method until label.owner == described_class
    expect(label.source_location).to be_nil
  end
end
