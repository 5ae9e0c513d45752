# frozen_string_literal: true

RSpec.describe StaticTracing::Provider do
  def maps_lines(path)
    File.readlines("/proc/self/maps").grep(/#{Regexp.escape(path)}/)
  end

  def notes(path)
    `readelf -n #{path} 2>&1`.scan(/Provider: (\w+)\s+Name: (\w+)/)
  end

  describe ".register" do
    it "returns one provider per name, Symbols and Strings alike" do
      provider = described_class.register(:my_app)
      expect(described_class.register("my_app")).to equal(provider)
      expect(StaticTracing.providers[:my_app]).to equal(provider)
      expect(StaticTracing.providers["my_app"]).to equal(provider)
      expect(provider.name).to eq(:my_app)
      expect(StaticTracing.providers.names).to eq([:my_app])
    end

    it "refuses names that break the rule, stating it, and registers nothing" do
      ["", "9lives", "my-app", "a b", "café", "a" * 129, "a:b", "../etc"].each do |name|
        expect { described_class.register(name) }
          .to raise_error(ArgumentError, /provider name .*must match .*at most 128 bytes/)
      end
      [nil, 42, Object.new, String].each do |name|
        expect { described_class.register(name) }.to raise_error(ArgumentError, /must be a Symbol or String/)
      end
      expect(StaticTracing.providers.size).to eq(0)
    end

    it "accepts a 128-byte name" do
      expect(described_class.register("a" * 128).name.length).to eq(128)
    end
  end

  describe "StaticTracing.providers" do
    it "raises ProviderMissingError, a KeyError, for unknown names" do
      described_class.register(:known)
      expect { StaticTracing.providers[:unknown] }.to raise_error(StaticTracing::ProviderMissingError) { |error|
        expect(error).to be_a(KeyError)
        expect(error.message).to include(":unknown", "known")
        expect(error.key).to eq(:unknown)
      }
      expect(StaticTracing.providers.key?("known")).to be(true)
      expect(StaticTracing.providers.key?(:unknown)).to be(false)
    end
  end

  describe "#add_tracepoint" do
    let(:provider) { described_class.register(:my_app) }

    it "returns the existing tracepoint for the same name and types" do
      tracepoint = provider.add_tracepoint(:hello, Integer, String)
      expect(provider.add_tracepoint("hello", Integer, String)).to equal(tracepoint)
      expect(provider.tracepoints).to eq(hello: tracepoint)
      expect(tracepoint.types).to eq([Integer, String])
      expect(tracepoint.types).to be_frozen
    end

    it "refuses the same name with other types, naming both declarations" do
      provider.add_tracepoint(:hello, Integer, String)
      expect { provider.add_tracepoint(:hello, Integer) }.to raise_error(
        ArgumentError, "tracepoint my_app:hello is already declared with (Integer, String); " \
                       "cannot redeclare it with (Integer)"
      )
    end

    it "refuses more than six types and types other than Integer, String and Float" do
      expect { provider.add_tracepoint(:seven, *[Integer] * 7) }
        .to raise_error(ArgumentError, /my_app:seven declares 7 argument types; at most 6 are supported/)
      expect { provider.add_tracepoint(:sym, Integer, Symbol) }
        .to raise_error(ArgumentError,
                        "tracepoint my_app:sym argument 2 type must be Integer, String or Float, got Symbol")
      expect { provider.add_tracepoint(:inst, "String") }
        .to raise_error(ArgumentError, /argument 1 type must be Integer, String or Float, got String \("String"\)/)
      expect { provider.add_tracepoint(:"bad-name") }.to raise_error(ArgumentError, /invalid probe name "bad-name"/)
      expect(provider.tracepoints).to be_empty
    end

    it "accepts six arguments of every type" do
      tracepoint = provider.add_tracepoint(:six, Integer, String, Float, Integer, String, Float)
      expect(tracepoint.types.size).to eq(6)
    end

    it "judges a name as Names.string does, whatever form it comes in, before its types" do
      renamed = Class.new(String) { def to_s = "renamed" }
      expect(provider.add_tracepoint(renamed.new("given"), Integer).name).to eq(:renamed)
      expect(provider.add_tracepoint("binary".b, Integer).name).to eq(:binary)
      [:"bad-name", "bad-name", "", "9lives", "a" * 129, "a\0", "café", :café, "ab".encode("UTF-16LE"),
       "\xff".dup.force_encoding("UTF-8"), 42, nil].each do |name|
        message = begin
          StaticTracing::Names.string(:probe, name)
        rescue ArgumentError => e
          e.message
        end
        expect { provider.add_tracepoint(name, Hash) }.to raise_error(ArgumentError, message)
      end
      expect(provider.tracepoints.keys).to eq(%i[renamed binary])
    end
  end

  describe "#load and #unload" do
    let(:provider) { described_class.register(:my_app) }

    it "loads a real file from a private directory and removes it on unload" do
      provider.add_tracepoint(:hello, Integer)
      expect(provider.loaded?).to be(false)
      expect(provider.path).to be_nil
      expect(provider.load).to equal(provider)
      path = provider.path

      expect(provider.loaded?).to be(true)
      expect(File.file?(path)).to be(true)
      expect(File.basename(path)).to match(StubNames.stub_file_pattern("my_app"))
      dir = File.stat(File.dirname(path))
      expect(dir.mode & 0o777).to eq(0o700)
      expect(dir.uid).to eq(Process.euid)
      expect(maps_lines(path)).not_to be_empty
      expect(maps_lines(path).join).not_to include("(deleted)")
      expect(notes(path)).to eq([%w[my_app hello]])

      provider.unload
      expect(provider.loaded?).to be(false)
      expect(provider.path).to be_nil
      expect(File.exist?(path)).to be(false)
      expect(maps_lines(path)).to be_empty
    end

    it "reloads in place, on #load, when a tracepoint was added to a loaded provider" do
      provider.add_tracepoint(:first, Integer)
      provider.load
      path = provider.path
      inode = File.stat(path).ino
      provider.add_tracepoint(:second, String)
      provider.load
      expect(provider.path).to eq(path)
      expect(File.stat(path).ino).to eq(inode)
      expect(notes(path)).to eq([%w[my_app first], %w[my_app second]])
      expect(provider.tracepoints[:second].fire("x")).to be(false)
    end

    it "is idempotent, and the provider can be loaded again after an unload" do
      provider.add_tracepoint(:hello)
      provider.load.load
      first = provider.path
      provider.unload.unload
      provider.load
      expect(provider.path).not_to eq(first)
      expect(File.exist?(provider.path)).to be(true)
    end

    it "loads through Provider.load, registering the name" do
      expect(described_class.load(:by_name)).to be_loaded
      expect(StaticTracing.providers[:by_name]).to be_loaded
    end

    it "loads a provider without probes" do
      expect(provider.load).to be_loaded
    end
  end

  describe "stub directory" do
    around do |example|
      Dir.mktmpdir do |tmp|
        @tmp = tmp
        StubDirEnv.restoring(tmp) { example.run }
      end
    end

    # $STATIC_TRACING_DIR is open to others; $XDG_RUNTIME_DIR can be used.
    def first_directory_unusable
      ENV["STATIC_TRACING_DIR"] = File.join(@tmp, "open")
      Dir.mkdir(ENV.fetch("STATIC_TRACING_DIR"), 0o755)
      File.chmod(0o755, ENV.fetch("STATIC_TRACING_DIR"))
      ENV["XDG_RUNTIME_DIR"] = @tmp
    end

    it "uses $STATIC_TRACING_DIR, created 0700" do
      ENV["STATIC_TRACING_DIR"] = File.join(@tmp, "stubs")
      provider = described_class.register(:in_env_dir)
      provider.load
      expect(File.dirname(provider.path)).to eq(File.join(@tmp, "stubs"))
      expect(File.stat(File.join(@tmp, "stubs")).mode & 0o777).to eq(0o700)
    end

    it "falls back past an unusable directory and says so once" do
      first_directory_unusable
      provider = described_class.register(:fallback)
      expect { provider.load }.to output(/stub directory skipped: .*open \(\$STATIC_TRACING_DIR\): its mode is 0755/)
        .to_stderr
      expect(File.dirname(provider.path)).to eq(File.join(@tmp, "static_tracing"))
      other = described_class.register(:fallback_again)
      expect { other.load }.not_to output.to_stderr
    end

    it "is told by the native side which directories it passed over, and why; the gem warns" do
      first_directory_unusable
      provider = described_class.register(:fallback_reported)
      allow(StaticTracing).to receive(:warn_stub_fallback)
      expect(provider.send(:_load)).to contain_exactly(/open \(\$STATIC_TRACING_DIR\): its mode is 0755/)
      expect(StaticTracing).not_to have_received(:warn_stub_fallback)
    end
  end

  describe "the probe table" do
    let(:provider) { described_class.register(:one_table) }

    it "is one: the probes in the stub are #tracepoints, in order, however they were declared" do
      first = provider.add_tracepoint(:first, Integer)
      second, declared = provider.send(:_declare, "second", [String])
      expect(declared).to be(true)
      expect(provider.send(:_declare, "first", [Integer])).to eq([first, false])
      expect(provider.tracepoints).to eq(first:, second:)
      provider.load
      expect(notes(provider.path)).to eq([%w[one_table first], %w[one_table second]])
      expect(provider.tracepoints).to be_frozen
    end

    it "gives concurrent declarations of one name the same Tracepoint" do
      tracepoints = Array.new(4) { Thread.new { Array.new(50) { |i| provider.add_tracepoint(:"p#{i}", Integer) } } }
                         .map(&:value)
      expect(tracepoints.uniq { |list| list.map(&:object_id) }.size).to eq(1)
      expect(provider.tracepoints.size).to eq(50)
    end
  end

  describe "#unregister" do
    it "unloads and forgets the provider; the name can be registered again" do
      provider = described_class.register(:gone)
      provider.add_tracepoint(:hello)
      provider.load
      path = provider.path
      provider.unregister
      expect(File.exist?(path)).to be(false)
      expect(provider).not_to be_registered
      expect(StaticTracing.providers.key?(:gone)).to be(false)
      fresh = described_class.register(:gone)
      expect(fresh).not_to equal(provider)
      expect(fresh.tracepoints).to be_empty
    end
  end

  it "refuses to be loaded or grown once unregistered, saying how to get it back" do
    provider = described_class.register(:gone_for_good)
    provider.unregister
    message = /provider gone_for_good was unregistered; register it again with .*register\(:gone_for_good\)/
    expect { provider.load }.to raise_error(StaticTracing::Error, message)
    expect { provider.add_tracepoint(:late) }.to raise_error(StaticTracing::Error, message)
    expect(provider).not_to be_loaded
    expect(StaticTracing.providers.key?(:gone_for_good)).to be(false)
  end

  it "cannot be instantiated directly" do
    expect { described_class.new }.to raise_error(NoMethodError)
    expect { described_class.allocate }.to raise_error(TypeError)
    expect { described_class._new("x") }.to raise_error(NoMethodError)
  end

  it "is built whole by .new, which runs #initialize: no second step" do
    provider = described_class.send(:new, "built_whole")
    expect(provider.name).to eq(:built_whole)
    expect(provider.inspect).to include("built_whole (0 tracepoints, not loaded)")
    expect(provider.send(:load_declared)).to be_nil
  end

  it "refuses a declaration on a new provider without building one" do
    GC.disable
    before = ObjectSpace.each_object(described_class).count
    expect { StaticTracing::Tracepoint.new(:never_built, :probe, Symbol) }
      .to raise_error(ArgumentError, /never_built:probe argument 1 type must be Integer, String or Float/)
    expect(ObjectSpace.each_object(described_class).count).to eq(before)
    expect(StaticTracing.providers.key?(:never_built)).to be(false)
  ensure
    GC.enable
  end
end
