# frozen_string_literal: true

require "tmpdir"

# Every public entry point fed what it must refuse: wrong names, wrong
# types, wrong counts, values out of range, misspelled or reserved modes and
# signals. Each gets its documented error class and a message naming what
# was wrong, and leaves the registry, the loaded stubs and the
# configuration as they were. Values that are valid data (NUL bytes, NaN,
# huge strings) are accepted, and shown to reach a real bpftrace intact.
module BadInput
  RULE = /names must match .* and be at most 128 bytes\z/

  # [description, name, what the message says about it]
  NAMES = [
    ["an empty String", "", /name "" \(empty\)/],
    ["an empty Symbol", :"", /name "" \(empty\)/],
    ["a 129-byte name", "a" * 129, /name "a{129}" \(too long\)/],
    ["a 1 MB name", "a" * (1 << 20), /name "a{128}"\.\.\. \(1048576 bytes\) \(too long\)/],
    ["a 1 MB non-ASCII name", "é" * (1 << 19), /name "é+\.\.\. \(1048576 bytes\) \(only letters, digits and/],
    ["punctuation", "my-app", /name "my-app" \(only letters, digits and underscores are allowed\)/],
    ["a Symbol with punctuation", :"my.app", /name "my\.app" \(only letters, digits and underscores/],
    ["a path that climbs", "../x", %r{name "\.\./x" \(must start with a letter or underscore\)}],
    ["a path separator", "a/b", %r{name "a/b" \(only letters, digits and underscores}],
    ["an absolute path", "/etc/passwd", %r{name "/etc/passwd" \(must start with a letter}],
    ["a NUL byte", "a\0b", /name "a\\(0|u0000)b" \(only letters, digits and underscores/],
    ["a leading digit", "9lives", /name "9lives" \(must start with a letter or underscore\)/],
    ["whitespace", "a b", /name "a b" \(only letters/],
    ["a newline", "a\nb", /name "a\\nb" \(only letters/],
    ["non-ASCII", "café", /name "café" \(only letters, digits and underscores/],
    ["a non-ASCII Symbol", :café, /name "café" \(only letters, digits and underscores/],
    ["invalid UTF-8", "a\xFF", /name "a\\xFF" \(only letters, digits and underscores/],
    ["a UTF-16 String", "ab".encode("UTF-16LE"), /name "ab" \(encoded in UTF-16LE, not ASCII\)/],
    ["nil", nil, /name must be a Symbol or String, got nil/],
    ["an Integer", 42, /name must be a Symbol or String, got 42/],
    ["a Float", 1.5, /name must be a Symbol or String, got 1\.5/],
    ["a Class", String, /name must be a Symbol or String, got String/],
    ["an instance", Object.new, /name must be a Symbol or String, got #<Object:0x\h+>/],
    # As this Ruby inspects a Hash: {:name=>:x} up to 3.3, {name: :x} from 3.4 on.
    ["a Hash", { name: :x }, /name must be a Symbol or String, got #{Regexp.escape({ name: :x }.inspect)}/],
    ["an Array", [:x], /name must be a Symbol or String, got \[:x\]/]
  ].freeze

  # [description, argument types, what the message says about them]
  TYPES = [
    ["a Symbol", [Symbol], /argument 1 type must be Integer, String or Float, got Symbol\z/],
    ["nil", [nil], /argument 1 type must be Integer, String or Float, got NilClass \(nil\)\z/],
    ["a Hash", [{}], /argument 1 type must be Integer, String or Float, got Hash\z/],
    ["an instance of Integer", [42], /argument 1 type must be Integer, String or Float, got Integer \(42\)\z/],
    ["a class name as a String", ["Integer"],
     /argument 1 type must be Integer, String or Float, got String \("Integer"\)\z/],
    ["a superclass of Integer", [Numeric], /argument 1 type must be Integer, String or Float, got Numeric\z/],
    ["an anonymous class", [Class.new], /argument 1 type must be Integer, String or Float, got #<Class:0x\h+>\z/],
    ["a bad third type", [Integer, String, Object],
     /argument 3 type must be Integer, String or Float, got Object\z/],
    ["seven types", [Integer] * 7,
     /declares 7 argument types; at most 6 are supported \(older bpftrace reads only arg0\.\.arg5\)/]
  ].freeze

  # fire(Integer, String, Float) with one argument wrong:
  # [description, arguments, error, what the message says]
  FIRE = [
    ["2**63", [2**63, "s", 1.0], RangeError, /argument 1: 9223372036854775808 is outside the signed 64-bit range/],
    ["-2**63 - 1", [-(2**63) - 1, "s", 1.0], RangeError,
     /argument 1: -9223372036854775809 is outside the signed 64-bit range/],
    ["a 201-bit Bignum", [2**200, "s", 1.0], RangeError, /argument 1: .* is outside the signed 64-bit range/],
    ["a Float for an Integer", [1.0, "s", 1.0], TypeError, /argument 1 must be an Integer, got Float \(1\.0\)/],
    ["NaN for an Integer", [Float::NAN, "s", 1.0], TypeError, /argument 1 must be an Integer, got Float \(NaN\)/],
    ["a Rational for an Integer", [3r, "s", 1.0], TypeError, /argument 1 must be an Integer, got Rational\z/],
    ["nil for an Integer", [nil, "s", 1.0], TypeError, /argument 1 must be an Integer, got NilClass \(nil\)/],
    ["a String for an Integer", ["1", "s", 1.0], TypeError, /argument 1 must be an Integer, got String \("1"\)/],
    ["a Class for an Integer", [Integer, "s", 1.0], TypeError, /argument 1 must be an Integer, got Class\z/],
    ["a Hash for an Integer", [{}, "s", 1.0], TypeError, /argument 1 must be an Integer, got Hash\z/],
    ["a Symbol for a String", [1, :s, 1.0], TypeError, /argument 2 must be a String, got Symbol \(:s\)/],
    ["nil for a String", [1, nil, 1.0], TypeError, /argument 2 must be a String, got NilClass \(nil\)/],
    ["an Integer for a String", [1, 2, 1.0], TypeError, /argument 2 must be a String, got Integer \(2\)/],
    ["an Array for a String", [1, ["s"], 1.0], TypeError, /argument 2 must be a String, got Array\z/],
    ["a String for a Float", [1, "s", "1.0"], TypeError, /argument 3 must be a Float, got String \("1\.0"\)/],
    ["nil for a Float", [1, "s", nil], TypeError, /argument 3 must be a Float, got NilClass \(nil\)/],
    ["a Rational for a Float", [1, "s", 1r], TypeError, /argument 3 must be a Float, got Rational/],
    ["a Complex for a Float", [1, "s", Complex(1, 0)], TypeError, /argument 3 must be a Float, got Complex/]
  ].freeze

  # Valid data that fire accepts: [description, arguments].
  ACCEPTED = [
    ["the signed 64-bit extremes", [-(2**63), "s", 1.0]],
    ["the largest Integer, a Bignum", [(2**63) - 1, "s", 1.0]],
    ["NaN", [1, "s", Float::NAN]],
    ["Infinity", [1, "s", Float::INFINITY]],
    ["-Infinity", [1, "s", -Float::INFINITY]],
    ["-0.0", [1, "s", -0.0]],
    ["an Integer for a Float", [1, "s", 3]],
    ["a Bignum for a Float", [1, "s", 2**70]],
    ["a String with NUL bytes", [1, "a\0b\0c", 1.0]],
    ["an empty String", [1, "", 1.0]],
    ["a frozen String", [1, "frozen", 1.0]],
    ["a binary String", [1, "\xFF\xFE\x00\x01".b, 1.0]],
    ["invalid UTF-8", [1, "\xFF", 1.0]],
    ["a UTF-16 String", [1, "utf-16".encode("UTF-16LE"), 1.0]],
    ["a String subclass", [1, Class.new(String).new("sub"), 1.0]],
    ["a 1 MB String", [1, "x" * (1 << 20), 1.0]]
  ].freeze

  SIGNAL_LIST = /valid signals are SIGTRAP, SIGUSR1, SIGUSR2/

  # [value, what the message says about it]
  MODES = [
    [:onn, /invalid mode :onn: valid modes are :on, :off, :signal and :attach/],
    ["of", /invalid mode "of": valid modes are :on, :off, :signal and :attach/],
    ["signal ", /invalid mode "signal ": valid modes are/],
    [nil, /invalid mode nil: valid modes are/],
    [1, /invalid mode 1: valid modes are/],
    ["TRAP", /invalid mode "TRAP": valid modes are/],
    [:SIGNALS, /invalid mode :SIGNALS: valid modes are/]
  ].freeze

  RESERVED = ["KILL", :SIGKILL, 9, "STOP", "sigstop", 19, "SEGV", 11, "BUS", "ILL", "FPE", "VTALRM", :SIGVTALRM].freeze

  # Signals the kernel, a terminal or a service manager sends by itself.
  SENT_BY_SYSTEM = ["CHLD", "CLD", :SIGPIPE, 13, "TERM", "int", "HUP", "CONT", "TSTP", "WINCH", "ALRM", "IOT",
                    "POLL", :XCPU, "PWR"].freeze

  MISSPELLED_SIGNALS = ["TRAPP", "SIGTRAPP", :USR3, "", "SIG", nil, 0, -1, 999, 2**70, 5.0, "EXIT", :EXIT, "TR\0AP",
                        "USR 2", {}].freeze

  MAX_BYTES = [0, -1, 1.5, nil, "10", Float::INFINITY, 2**70].freeze

  # As spec/support/e2e.rb starts bpftrace.
  BPFTRACE_STRLEN = E2E::Bpftrace::STRLEN
end

RSpec.describe "Bad input to the public API" do
  around do |example|
    Dir.mktmpdir("static_tracing_bad_input") do |dir|
      StubDirEnv.restoring(dir) do
        ENV["STATIC_TRACING_DIR"] = File.join(dir, "stubs")
        example.run
      end
    end
  end

  let(:target) do
    Class.new do
      def self.name = "BadInputTarget"
      def work = :worked
      def +(other) = other
      define_method(:"a-b") { :odd }
      define_method(("a" * 200).to_sym) { :long }
    end
  end

  let!(:fixture) do
    StaticTracing::Provider.register(:fixture).tap do |provider|
      provider.add_tracepoint(:values, Integer, String, Float)
      provider.add_tracepoint(:none)
      provider.load
    end
  end
  let!(:idle) { StaticTracing::Provider.register(:idle).tap { |provider| provider.add_tracepoint(:tick, Integer) } }
  let(:values) { fixture.tracepoints[:values] }

  # Everything a refused call must leave as it was.
  def snapshot
    {
      providers: StaticTracing.providers.map do |provider|
        stub = provider.path && File.stat(provider.path)
        [provider.name, provider.tracepoints.transform_values(&:types), provider.loaded?, provider.path,
         stub && [stub.ino, stub.size, stub.mtime]]
      end,
      method_probes: StaticTracing::MethodTracing.probes.map(&:inspect),
      tracing: StaticTracing.enabled?,
      mode: StaticTracing::Configuration.mode,
      signal: StaticTracing::Configuration.signal,
      armed_signal: StaticTracing::Native.armed_signal,
      max_bytes: StaticTracing::StackTracer.max_bytes
    }
  end

  # The call raises +error+ with +message+, short even for huge input,
  # and changes nothing.
  def expect_refused(error, message, &)
    before = snapshot
    expect(&).to raise_error(error, message) { |raised| expect(raised.message.bytesize).to be < 4096 }
    expect(snapshot).to eq(before)
  end

  # Entry points that take a provider name: [description, call, whether nil means "the default"].
  provider_entries = [
    ["Provider.register", ->(name) { StaticTracing::Provider.register(name) }],
    ["Provider.load", ->(name) { StaticTracing::Provider.load(name) }],
    ["Tracepoint.new", ->(name) { StaticTracing::Tracepoint.new(name, :probe, Integer) }],
    ["StaticTracing.tracepoint", ->(name) { StaticTracing.tracepoint(name, :probe, Integer) { 1 } }],
    ["StaticTracing.latency with a block",
     ->(name) { StaticTracing.latency(name: :probe, provider: name) { 1 } }, true],
    ["StaticTracing.latency of a method", ->(name) { StaticTracing.latency(target, :work, provider: name) }, true],
    ["LatencyTracer.with", ->(name) { StaticTracing::LatencyTracer.with(provider: name) }, true],
    ["StackTracer.with", ->(name) { StaticTracing::StackTracer.with(provider: name) }, true]
  ]

  # Entry points that take a probe name, on a registered provider or on a new one.
  probe_entries = [
    ["Provider#add_tracepoint", ->(name) { fixture.add_tracepoint(name, Integer) }],
    ["Tracepoint.new", ->(name) { StaticTracing::Tracepoint.new(:fixture, name) }],
    ["Tracepoint.new with a new provider", ->(name) { StaticTracing::Tracepoint.new(:brand_new, name, String) }],
    ["StaticTracing.tracepoint", ->(name) { StaticTracing.tracepoint(:fixture, name) { nil } }],
    ["StaticTracing.tracepoint with a new provider",
     ->(name) { StaticTracing.tracepoint(:brand_new, name, Float) { 1.0 } }],
    ["StaticTracing.latency", ->(name) { StaticTracing.latency(name:, provider: :fixture) { 1 } }, :needs_name],
    ["StaticTracing.latency with a new provider", ->(name) { StaticTracing.latency(name:, provider: :brand_new) { 1 } },
     :needs_name]
  ]

  shared_examples "name checks" do
    provider_entries.each do |entry, call, nil_is_default|
      describe "#{entry}, given a bad provider name" do
        BadInput::NAMES.each do |description, name, shown|
          next if name.nil? && nil_is_default

          it "refuses #{description}, stating the rule" do
            expect_refused(ArgumentError, /provider #{shown}.*: provider #{BadInput::RULE}/m) do
              instance_exec(name, &call)
            end
          end
        end
      end
    end

    probe_entries.each do |entry, call, nil_special|
      describe "#{entry}, given a bad probe name" do
        BadInput::NAMES.each do |description, name, shown|
          it "refuses #{description}, stating the rule" do
            message = /probe #{shown}.*: probe #{BadInput::RULE}/m
            message = /needs name: and a block/ if name.nil? && nil_special
            expect_refused(ArgumentError, message) { instance_exec(name, &call) }
          end
        end
      end
    end
  end

  context "while tracing is off" do
    include_examples "name checks"
  end

  context "while tracing is on" do
    before { StaticTracing.enable! }
    after { StaticTracing.disable! }

    include_examples "name checks"
  end

  describe "StaticTracing.latency of a method, given a bad method" do
    it "refuses a target that is not a class or module, naming it" do
      expect_refused(ArgumentError, /target must be a Class or Module, got 42/) { StaticTracing.latency(42, :work) }
    end

    it "refuses a method name that is not a Symbol or String" do
      expect_refused(ArgumentError, /method name must be a Symbol or String, got 42/) do
        StaticTracing.latency(target, 42)
      end
    end

    it "refuses the class-body form outside a class body, naming self" do
      message = /StaticTracing\.latency\(:work\) goes in a class body \(here self is an instance of .*\); elsewhere use/
      expect_refused(ArgumentError, message) do
        StaticTracing.latency(:work)
      end
    end

    it "refuses methods that have no probe name: operators, and names that are not identifiers" do
      expect_refused(ArgumentError, /cannot trace BadInputTarget#\+: .*no probe name/) do
        StaticTracing.latency(target, :+)
      end
      expect_refused(ArgumentError, /cannot trace BadInputTarget#a-b: .*no probe name/) do
        StaticTracing.latency(target, :"a-b")
      end
    end

    it "refuses a method whose probe name would be too long" do
      expect_refused(ArgumentError, /invalid probe name "a{200}" \(too long\)/) do
        StaticTracing.latency(target, ("a" * 200).to_sym)
      end
    end

    it "refuses them inside a class body as well" do
      expect_refused(ArgumentError, /cannot trace BadInputTarget#\+: .*no probe name/) do
        target.class_eval { StaticTracing.latency(:+) }
      end
    end
  end

  describe "argument types" do
    entries = [
      ["Provider#add_tracepoint", ->(types) { fixture.add_tracepoint(:typed, *types) }],
      ["Tracepoint.new", ->(types) { StaticTracing::Tracepoint.new(:fixture, :typed, *types) }],
      ["Tracepoint.new with a new provider", ->(types) { StaticTracing::Tracepoint.new(:brand_new, :typed, *types) }],
      ["StaticTracing.tracepoint", ->(types) { StaticTracing.tracepoint(:fixture, :typed, *types) { nil } }]
    ]
    entries.each do |entry, call|
      provider = entry.include?("new provider") ? "brand_new" : "fixture"
      BadInput::TYPES.each do |description, types, shown|
        it "#{entry} refuses #{description}, naming the probe and the position" do
          expected = if types.size > 6 && entry == "StaticTracing.tracepoint"
                       /given 9, expected 2\.\.8/ # six optional type arguments
                     else
                       /\Atracepoint #{provider}:typed #{shown.source}/
                     end
          expect_refused(ArgumentError, expected) { instance_exec(types, &call) }
        end
      end
    end

    it "Provider#add_tracepoint refuses types given as keywords" do
      expect_refused(ArgumentError, /tracepoint fixture:typed argument 1 type must be .*, got Hash/) do
        fixture.add_tracepoint(:typed, type: Integer)
      end
    end

    it "refuses to redeclare a probe with other types, naming both declarations, on a loaded provider" do
      message = "tracepoint fixture:values is already declared with (Integer, String, Float); " \
                "cannot redeclare it with (Integer)"
      expect_refused(ArgumentError, message) { fixture.add_tracepoint(:values, Integer) }
      expect_refused(ArgumentError, message) { StaticTracing::Tracepoint.new(:fixture, :values, Integer) }
      expect_refused(ArgumentError, message) { StaticTracing.tracepoint(:fixture, :values, Integer) { 1 } }
    end
  end

  describe "argument counts" do
    rows = [
      ["Provider.register()", -> { StaticTracing::Provider.register }, /given 0, expected 1\)/],
      ["Provider.register(a, b)", -> { StaticTracing::Provider.register(:a, :b) }, /given 2, expected 1\)/],
      ["Provider.load()", -> { StaticTracing::Provider.load }, /given 0, expected 1\)/],
      ["provider.load(x)", -> { fixture.load(:x) }, /given 1, expected 0\)/],
      ["provider.unload(x)", -> { fixture.unload(:x) }, /given 1, expected 0\)/],
      ["provider.unregister(x)", -> { fixture.unregister(:x) }, /given 1, expected 0\)/],
      ["provider.add_tracepoint()", -> { fixture.add_tracepoint }, /given 0, expected 1\+\)/],
      ["providers[]", -> { StaticTracing.providers[] }, /given 0, expected 1\)/],
      ["providers[a, b]", -> { StaticTracing.providers[:fixture, :idle] }, /given 2, expected 1\)/],
      ["Tracepoint.new()", -> { StaticTracing::Tracepoint.new }, /given 0, expected 2\+\)/],
      ["Tracepoint.new(provider)", -> { StaticTracing::Tracepoint.new(:fixture) }, /given 1, expected 2\+\)/],
      ["tracepoint.load(x)", -> { values.load(:x) }, /given 1, expected 0\)/],
      ["tracepoint.unload(x)", -> { values.unload(:x) }, /given 1, expected 0\)/],
      ["fire()", -> { values.fire },
       /\Atracepoint fixture:values takes 3 arguments \(Integer, String, Float\), 0 given\z/],
      ["fire with one too many", -> { values.fire(1, "s", 1.0, 2) }, /takes 3 arguments .*, 4 given\z/],
      ["fire with keywords", -> { values.fire(1, "s", 1.0, extra: 1) }, /takes 3 arguments .*, 4 given\z/],
      ["fire(x) of a probe without arguments", -> { fixture.tracepoints[:none].fire(1) },
       /\Atracepoint fixture:none takes 0 arguments \(\), 1 given\z/],
      ["latency(target, method, extra)", lambda {
                                           StaticTracing.latency(target, :work, :extra)
                                         }, /given 3, expected 0\.\.2/],
      ["latency without a block", -> { StaticTracing.latency(name: :probe) }, /needs name: and a block/],
      ["latency without a name", -> { StaticTracing.latency { 1 } }, /needs name: and a block/],
      ["latency with an unknown keyword", lambda {
                                            StaticTracing.latency(name: :x, extra: 1) do
                                              1
                                            end
                                          }, /unknown keyword: :extra/],
      ["tracepoint without a block", -> { StaticTracing.tracepoint(:fixture, :probe, Integer) }, /needs a block/],
      ["tracepoint with seven types", -> { StaticTracing.tracepoint(:fixture, :probe, *[Integer] * 7) { 1 } },
       /given 9, expected 2\.\.8/],
      ["LatencyTracer.with(x)", -> { StaticTracing::LatencyTracer.with(:web) }, /given 1, expected 0\)/],
      ["StackTracer.with(unknown:)", lambda {
                                       StaticTracing::StackTracer.with(providr: :web)
                                     }, /unknown keyword: :providr/],
      ["StaticTracing.configure(x)", -> { StaticTracing.configure(:on) }, /given 1, expected 0\)/]
    ]
    rows.each do |description, call, message|
      it "refuses #{description}" do
        expect_refused(ArgumentError, message) { instance_exec(&call) }
      end
    end
  end

  describe "Tracepoint#fire, given a wrong value" do
    BadInput::FIRE.each do |description, args, error, shown|
      it "refuses #{description} with #{error}, naming the probe, the position, the expected and the given" do
        expect_refused(error, /\Atracepoint fixture:values #{shown.source}/) { values.fire(*args) }
      end
    end

    it "refuses the same values while a provider is not loaded" do
      tick = idle.tracepoints[:tick]
      expect_refused(RangeError, /tracepoint idle:tick argument 1: 9223372036854775808 is outside/) { tick.fire(2**63) }
      expect_refused(TypeError, /tracepoint idle:tick argument 1 must be an Integer, got NilClass/) { tick.fire(nil) }
    end
  end

  describe "Tracepoint#fire, given valid data" do
    BadInput::ACCEPTED.each do |description, args|
      it "accepts #{description}" do
        before = snapshot
        expect(values.fire(*args)).to be(false)
        expect(snapshot).to eq(before)
      end
    end

    it "accepts a frozen String and leaves it as it was" do
      string = "frozen and shared"
      expect(values.fire(1, string, 1.0)).to be(false)
      expect(string).to eq("frozen and shared").and be_frozen
    end
  end

  describe "StaticTracing.providers[]" do
    BadInput::NAMES.each do |description, name, _shown|
      it "raises ProviderMissingError, a KeyError, for #{description}, naming it" do
        inspected = name.inspect
        shown = if inspected.bytesize > 256
                  /#{Regexp.escape(inspected.byteslice(0, 100).scrub(""))}.*\.\.\. \(\d+ bytes\)/
                else
                  Regexp.escape(inspected)
                end
        expect_refused(StaticTracing::ProviderMissingError, /\Ano provider named #{shown} /) do
          StaticTracing.providers[name]
        end
        expect { StaticTracing.providers[name] }.to raise_error(KeyError) { |error| expect(error.key).to eq(name) }
      end
    end
  end

  describe "Configuration" do
    BadInput::MODES.each do |value, message|
      it "refuses mode = #{value.inspect}, listing the valid modes" do
        expect_refused(ArgumentError, message) { StaticTracing::Configuration.mode = value }
        expect_refused(ArgumentError, message) { StaticTracing.configure { |config| config.mode = value } }
      end
    end

    # A typo in the environment must not stop the application from booting.
    def expect_default_applied(variable, value)
      before = snapshot
      expect { StaticTracing::Configuration.configure_from_environment(variable => value) }
        .to output(/\A[^\n]*#{variable} #{Regexp.escape(value.inspect)}: [^\n]*valid [^\n]*default[^\n]*\n\z/)
        .to_stderr
      expect(snapshot).to eq(before.merge(mode: :signal, signal: "TRAP", armed_signal: Signal.list["TRAP"]))
    end

    it "warns about a bad STATIC_TRACING_MODE, naming the variable, and applies the default" do
      expect_default_applied("STATIC_TRACING_MODE", "bogus")
    end

    BadInput::RESERVED.each do |value|
      it "refuses signal = #{value.inspect}, reserved, saying why" do
        name = value.is_a?(Integer) ? Signal.signame(value) : value.to_s.upcase.delete_prefix("SIG")
        message = /\Ainvalid signal #{Regexp.escape(value.inspect)}: SIG#{name} cannot toggle tracing .*valid signals/
        expect_refused(ArgumentError, message) { StaticTracing::Configuration.signal = value }
        expect_refused(ArgumentError, message) { StaticTracing.configure { |config| config.signal = value } }
      end
    end

    BadInput::SENT_BY_SYSTEM.each do |value|
      it "refuses signal = #{value.inspect}, which the system sends by itself, saying why" do
        name = Signal.signame(value.is_a?(Integer) ? value : Signal.list[value.to_s.upcase.delete_prefix("SIG")])
        message = /\Ainvalid signal #{Regexp.escape(value.inspect)}: SIG#{name} cannot toggle tracing \(.+\); /
        message = /#{message}#{BadInput::SIGNAL_LIST}\z/
        expect_refused(ArgumentError, message) { StaticTracing::Configuration.signal = value }
        expect_refused(ArgumentError, message) { StaticTracing.configure { |config| config.signal = value } }
      end
    end

    BadInput::MISSPELLED_SIGNALS.each do |value|
      it "refuses signal = #{value.inspect}, listing the valid signals" do
        message = /\Ainvalid signal #{Regexp.escape(value.inspect)}: #{BadInput::SIGNAL_LIST}/
        expect_refused(ArgumentError, message) { StaticTracing::Configuration.signal = value }
      end
    end

    %w[KILL CHLD 99 nonsense].each do |value|
      it "warns about STATIC_TRACING_SIGNAL=#{value}, naming the variable, and applies the default" do
        expect_default_applied("STATIC_TRACING_SIGNAL", value)
      end
    end
  end

  describe "StackTracer.max_bytes=" do
    BadInput::MAX_BYTES.each do |value|
      it "refuses #{value.inspect}" do
        message = /\Amax_bytes must be an Integer of at least 1 and at most \d+, got #{Regexp.escape(value.inspect)}\z/
        expect_refused(ArgumentError, message) do
          StaticTracing::StackTracer.max_bytes = value
        end
      end
    end
  end
end

# The values fire accepts as valid data, read back by a real bpftrace.
RSpec.describe "Awkward but valid data, as bpftrace reads it", :e2e do
  let(:app) do
    ruby_repl(<<~RUBY)
      provider = StaticTracing::Provider.register(:awkward)
      text = provider.add_tracepoint(:text, String)
      float = provider.add_tracepoint(:float, Float)
      both = provider.add_tracepoint(:both, Integer, String)
      provider.load
    RUBY
  end

  it "reads a String up to its first NUL byte" do
    tracer = attach_bpftrace(app.pid, 'usdt:*:awkward:text { printf("<%s>\n", str(arg0)); }')
    strings = ["before\0after", "\0leading", "a\0b\0c", "trailing\0", "plain"]
    expect(app.evaluate("#{strings.inspect}.map { |string| text.fire(string) }")).to all(be(true))
    tracer.wait_for(/^<plain>$/)
    expect(tracer.finish.lines.map(&:chomp).grep(/\A</)).to eq(%w[<before> <> <a> <trailing> <plain>])
  end

  it "reads Floats as their IEEE-754 bits, NaN and the infinities included" do
    tracer = attach_bpftrace(app.pid, 'usdt:*:awkward:float { printf("bits %lu\n", arg0); }')
    floats = %w[Float::NAN Float::INFINITY -Float::INFINITY -0.0 Float::MAX Float::MIN 5e-324 3 2**70]
    expect(app.evaluate("[#{floats.join(", ")}].map { |value| float.fire(value) }")).to all(be(true))
    expected = [Float::NAN, Float::INFINITY, -Float::INFINITY, -0.0, Float::MAX, Float::MIN, 5e-324, 3.0, (2**70).to_f]
               .map { |float| "bits #{[float].pack("D").unpack1("Q")}" }
    tracer.wait_for(/^#{expected.last}$/)
    expect(tracer.finish.lines.map(&:chomp).grep(/\Abits /)).to eq(expected)
  end

  it "fires a 1 MB String, of which bpftrace reads the first BPFTRACE_STRLEN bytes, its NUL included" do
    tracer = attach_bpftrace(app.pid, 'usdt:*:awkward:text { printf("<%s>\n", str(arg0)); }')
    expect(app.evaluate("huge = (0...(1 << 20)).map { |i| (97 + (i % 26)).chr }.join; text.fire(huge)")).to be(true)
    tracer.wait_for(/^<abcdef.*>$/)
    read = tracer.finish.lines.map(&:chomp).grep(/\A</).map { |line| line[1...-1] }
    alphabet = ("a".."z").to_a.join
    expect(read.size).to eq(1)
    # bpftrace 0.17 reads BPFTRACE_STRLEN bytes, its NUL included, and cuts
    # silently; 0.27 reads that many characters and marks the cut with "..".
    text = read.first.delete_suffix("..")
    cut_marked = text.size < read.first.size
    expect(text.size).to eq(cut_marked ? BadInput::BPFTRACE_STRLEN : BadInput::BPFTRACE_STRLEN - 1)
    expect(text).to eq((alphabet * 10)[0, text.size])
  end

  it "refuses wrong values while a tracer is attached, and no probe fires for them" do
    tracer = attach_bpftrace(app.pid, "usdt:*:awkward:both { @hits = count(); }")
    expect(app.evaluate("both.fire(1, 'one')")).to be(true)
    ["both.fire(2**63, 'x')", "both.fire(nil, 'x')", "both.fire(1, :x)", "both.fire(1)", "both.fire(1, 'x', 2)"]
      .each { |call| expect { app.evaluate(call) }.to raise_error(E2E::RemoteError, /tracepoint awkward:both /) }
    expect(app.evaluate("both.fire(2, 'two')")).to be(true)
    expect(tracer.finish).to match(/^@hits: 2$/)
  end

  # A mistake surfaces at the first unattached call (spec/fidelity/blocks_spec.rb);
  # while traced it is counted, never raised into the caller, and fires nothing.
  it "checks what a StaticTracing.tracepoint block returns while a tracer is attached" do
    app.evaluate("def computed(value) = StaticTracing.tracepoint(:awkward, :computed, Integer, String) { value }")
    expect(app.evaluate("computed([0, 'declared, not attached'])")).to be_nil
    wait_until_listed(app.pid, "usdt:*:awkward:computed")
    tracer = attach_bpftrace(app.pid, "usdt:*:awkward:computed { @hits = count(); }")
    expect(app.evaluate("computed([1, 'x'])")).to eq([1, "x"])
    expect(app.evaluate("computed(['x', 1])")).to be_nil
    expect(app.evaluate("computed([1])")).to be_nil
    expect(app.evaluate("StaticTracing::Blocks.errors")).to eq(2)
    expect(tracer.finish).to match(/^@hits: 1$/)
  end
end
