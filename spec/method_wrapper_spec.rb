# frozen_string_literal: true

# Templates have %{key} placeholders of their own; no string here is a format.
# rubocop:disable Style/FormatStringToken

require "static_tracing/method_wrapper"

module WrapperSpec
  # Stands for a Tracepoint: enabled? as told, fire records its arguments.
  class Tracepoint
    attr_reader :fired

    def initialize(enabled)
      @enabled = enabled
      @fired = []
    end

    def enabled?
      @enabled
    end

    def fire(*args)
      @fired << args
      true
    end
  end

  LATENCY = <<~'RUBY'
    return %{super} unless %{tracepoint}.enabled?
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
    begin
      %{super}
    ensure
      %{tracepoint}.fire(Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - started)
    end
  RUBY

  # Template, and whether the tracepoint is enabled.
  VARIANTS = {
    "plain forward" => ["%{super}", false],
    "latency, no tracer" => [LATENCY, false],
    "latency, tracer attached" => [LATENCY, true]
  }.freeze

  # The exact wrapper one would write by hand for def m(arg, key:).
  module HandWrittenKeywordWrapper
    TRACEPOINT = Tracepoint.new(false)

    def m(arg, key:)
      return super(arg, key:) unless TRACEPOINT.enabled?

      started = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
      begin
        super(arg, key:)
      ensure
        TRACEPOINT.fire(Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - started)
      end
    end
  end

  def self.flagged(**hash)
    Hash.ruby2_keywords_hash(hash)
  end

  # A value with its hashes' ruby2_keywords flags made visible (or erased).
  def self.describe(value, flags: true)
    case value
    when Hash
      pairs = value.map { |key, element| [describe(key, flags:), describe(element, flags:)] }
      [:hash, flags && Hash.ruby2_keywords_hash?(value), pairs]
    when Array then value.map { |element| describe(element, flags:) }
    else value
    end
  end
end

RSpec.describe StaticTracing::MethodWrapper do
  def original_class(shape)
    Class.new(shape.fetch(:base, Object)) { class_eval(shape[:source], __FILE__, __LINE__) }
  end

  def instance(klass, shape)
    klass.new(*shape.fetch(:new_args, []))
  end

  # +klass+ with a prepended wrapper of +name+ that uses +tracepoint+.
  def wrap(klass, name, template, tracepoint = WrapperSpec::Tracepoint.new(false), **values)
    mod = Module.new
    mod.const_set(:TRACEPOINT, tracepoint)
    parameters = klass.instance_method(name).parameters
    expect(described_class.define(mod, name, parameters, template, tracepoint: "TRACEPOINT", **values)).to eq(name)
    klass.prepend(mod)
    mod
  end

  def outcome(receiver, code, flags: true)
    [:returned, WrapperSpec.describe(receiver.instance_eval(code, __FILE__, __LINE__), flags:)]
  rescue StandardError => e
    [:raised, e.class, e.message]
  end

  # Per call, over 100 calls. Measured twice, the second time only: the
  # first fills the inline caches of every call site, which allocates.
  def allocations
    Array.new(2) do
      calls = 0
      before = GC.stat(:total_allocated_objects)
      while calls < 100
        yield
        calls += 1
      end
      Rational(GC.stat(:total_allocated_objects) - before, calls)
    end.last
  end

  describe "wrapping" do
    # Each shape: the class body defining the original method (+name+, :m by
    # default, on +base+), and calls to make on an instance (+new_args+), as code
    # evaluated in the instance. +flag_differs+: calls whose hash only differs in
    # its ruby2_keywords flag (see "keywords given to a plain *rest method").
    shapes = [
      { label: "no parameters",
        source: "def m = [:none, (yield if block_given?)]",
        calls: ["m", "m { :block }", "m(1)", "m(k: 1)", "m({})", "m(**{})", "m(*[])",
                "m(*[WrapperSpec.flagged])", "m(*[WrapperSpec.flagged(k: 1)])"] },
      { label: "required positionals",
        source: "def m(a, b) = [a, b, (yield if block_given?)]",
        calls: ["m(1, 2)", "m(1, 2) { :block }", "m(1)", "m(1, 2, 3)", "m(1, k: 2)", "m({ k: 1 }, { k: 2 })",
                "m(1, **{})", "m(*[1, WrapperSpec.flagged(k: 2)])", "m(1, nil)", "m"] },
      { label: "unnamed, duplicated and destructured positionals",
        source: "def m(_, _, (c, d)) = [_, c, d]",
        calls: ["m(1, 2, [3, 4])", "m(1, 2, 3)", "m(1, 2)", "m(1, 2, [3, 4], 5)"] },
      { label: "optional positionals whose defaults use other parameters",
        source: "def m(a, b = a.to_s, c = :default_c) = [a, b, c, (yield if block_given?)]",
        calls: ["m(1)", "m(1, 2)", "m(1, 2, 3)", "m(1, nil)", "m(1, nil, nil) { :block }", "m", "m(1, 2, 3, 4)",
                "m(1, k: 2)", "m(1, { k: 2 })", "m(*[1, WrapperSpec.flagged(k: 2)])", "m(1, 2, k: 3)"] },
      { label: "post-required positionals",
        source: "def m(a, b = :default_b, c) = [a, b, c]",
        calls: ["m(1, 2)", "m(1, 2, 3)", "m(1)", "m(1, 2, 3, 4)", "m(1, k: 2)", "m(1, 2, k: 3)"] },
      { label: "rest",
        source: "def m(a, *rest) = [a, rest, (yield if block_given?)]",
        calls: ["m(1)", "m(1, 2, 3) { :block }", "m", "m(1, { k: 2 })", "m(1, k: 2)", "m(k: 2)",
                "m(*[1, WrapperSpec.flagged(k: 2)])", "m(1, **{})", "m(*[1, 2, 3])"],
        flag_differs: ["m(1, k: 2)", "m(k: 2)"] },
      { label: "ruby2_keywords rest",
        source: "ruby2_keywords def m(*args) = [args, (yield if block_given?)]",
        calls: ["m(1, k: 2)", "m(1, { k: 2 })", "m(*[1, WrapperSpec.flagged(k: 2)])", "m", "m(k: 1) { :block }"] },
      { label: "rest and post-required",
        source: "def m(a, *rest, z) = [a, rest, z]",
        calls: ["m(1, 2)", "m(1, 2, 3, 4)", "m(1)", "m(1, k: 2)", "m(1, { k: 2 })"],
        flag_differs: ["m(1, k: 2)"] },
      { label: "required keywords",
        source: "def m(a, k:, j:) = [a, k, j]",
        calls: ["m(1, k: 2, j: 3)", "m(1, j: 3, k: 2)", "m(1, k: 2)", "m(1)", "m(k: 2, j: 3)", "m(1, k: 2, j: 3, x: 4)",
                "m(1, { k: 2, j: 3 })", "m(1, **{ k: 2, j: 3 })", "m(*[1, WrapperSpec.flagged(k: 2, j: 3)])",
                "m(1, 'k' => 2, j: 3)", "m(1, 2, k: 2, j: 3)"] },
      { label: "optional keywords whose defaults use other parameters",
        source: "def m(a, k: a * 2, j: :default_j) = [a, k, j]",
        calls: ["m(1)", "m(1, k: nil)", "m(1, j: 3)", "m(1, j: 3, k: 2)", "m(1, x: 2)", "m(1, { k: 2 })", "m({ k: 2 })",
                "m(*[1, WrapperSpec.flagged(j: 2)])", "m"] },
      { label: "optional positional hash and optional keyword",
        source: "def m(a = {}, k: 1) = [a, k]",
        calls: ["m({ k: 2 })", "m(k: 2)", "m({ k: 2 }, k: 3)", "m(*[WrapperSpec.flagged(k: 2)])", "m",
                "m({ k: 2 }, { k: 3 })"] },
      { label: "more optional keywords than the exact form takes",
        source: "def m(a = 0, k1: 1, k2: 2, k3: 3, k4: 4) = [a, k1, k2, k3, k4]",
        calls: ["m", "m(k4: 5)", "m(9, k1: 5, k3: 6)", "m(x: 1)", "m({ k1: 2 })", "m(1, 2)", "m('k1' => 2)",
                "m(k4: 1, k1: 2, k2: 3, k3: 4)"] },
      { label: "keyword rest",
        source: "def m(a, k: 1, **opts) = [a, k, opts]",
        calls: ["m(1)", "m(1, k: 2, x: 3)", "m(1, x: 3, k: 2)", "m(1, 's' => 1)", "m({ x: 1 })", "m(1, { x: 1 })",
                "m(x: 1)", "m(*[1, WrapperSpec.flagged(x: 2)])"] },
      { label: "required keyword and keyword rest",
        source: "def m(a, k:, **opts) = [a, k, opts]",
        calls: ["m(1, k: 2)", "m(1, x: 2)", "m(k: 1)", "m", "m(1, x: 3, k: 2, y: 4)", "m(1, 2, k: 3)"] },
      { label: "**nil",
        source: "def m(a, b = :default_b, **nil) = [a, b]",
        calls: ["m(1)", "m(1, k: 2)", "m(1, { k: 2 })", "m(1, **{})", "m(*[1, WrapperSpec.flagged(k: 2)])", "m"] },
      { label: "every kind of parameter",
        source: "def m(a, b = :default_b, *rest, z, k:, j: :default_j, **opts, &blk) = " \
                "[a, b, rest, z, k, j, opts, blk&.call]",
        calls: ["m(1, 2, k: 3)", "m(1, 2, 3, 4, 5, k: 6, j: 7, x: 8) { :block }", "m(1, k: 2)", "m(1, 2)",
                "m(1, 2, { k: 3 })", "m(*[1, 2, WrapperSpec.flagged(k: 3)])"] },
      { label: "a block parameter",
        source: "def m(&blk) = [blk&.call, blk&.lambda?]",
        calls: ["m", "m { :block }", "m(&-> { :lambda })", "m(&:itself)", "m(1)"] },
      { label: "yield",
        source: "def m(a) = yield(a)",
        calls: ["m(1) { |x| x + 1 }", "m(1)", "m(1) { |x| next x * 3 }", "m(1) { |_x| break :broke }"] },
      { label: "... forwarding",
        source: "def m(...) = target(...)\ndef target(*rest, **kw, &blk) = [rest, kw, blk&.call]",
        calls: ["m", "m(1, k: 2) { :block }", "m(1, { k: 2 })", "m(*[1, WrapperSpec.flagged(k: 2)])", "m(**{})"] },
      { label: "leading argument and ... forwarding",
        source: "def m(a, ...) = target(a, ...)\ndef target(*rest, k: 0, &blk) = [rest, k, blk&.call]",
        calls: ["m(1)", "m(1, 2, k: 3) { :block }", "m", "m(1, x: 2)", "m(1, { k: 2 })"] },
      { label: "ruby2_keywords delegation",
        source: "ruby2_keywords def m(*args, &blk) = target(*args, &blk)\n" \
                "def target(*rest, k: 0, **opts, &blk) = [rest, k, opts, blk&.call]",
        calls: ["m(1, k: 2)", "m(1, { k: 2 })", "m(1, x: 2) { :block }", "m(*[WrapperSpec.flagged(k: 5)])"] },
      { label: "define_method",
        source: "define_method(:m) { |a, b = :default_b, k: 1, &blk| [a, b, k, blk&.call] }",
        calls: ["m(1)", "m(1, 2, k: 3) { :block }", "m", "m(1, 2, 3)", "m(1, x: 2)", "m(1, { k: 2 })"] },
      { label: "define_method from a proc",
        source: "define_method(:m, proc { |a, b| [a, b] })",
        calls: ["m(1, 2)", "m(1)", "m([1, 2])", "m(1, 2, 3)"] },
      { label: "attr_reader",
        source: "attr_reader :m\ndef initialize = (@m = :value)",
        calls: ["m", "m { :block }", "m(1)"] },
      { label: "attr_writer", name: :m=,
        source: "attr_writer :m",
        calls: ["[send(:m=, 1), @m]", "[(self.m = 2), @m]", "send(:m=)", "send(:m=, 1, 2)", "send(:m=, k: 1)"] },
      { label: "Array#push (C, any number of arguments)", base: Array, name: :push, source: "",
        calls: ["push(1, 2)", "push", "push(k: 1)", "push({ k: 1 })", "push(*[1, WrapperSpec.flagged(k: 1)])",
                "push(1) { :ignored }"] },
      { label: "Array#at (C, one argument)", base: Array, name: :at, source: "", new_args: [%i[a b]],
        calls: ["at(1)", "at", "at(1, 2)", "at(k: 1)", "at('x')"] },
      { label: "String#sub (C)", base: String, name: :sub, source: "", new_args: ["abcb"],
        calls: ["sub('b', 'x')", "sub(/b/) { |match| match.upcase }", "sub('b')", "sub", "sub('b', 'x', 1)",
                "sub('b', { 'b' => 'y' })"] },
      { label: "String#encode (C, with keywords)", base: String, name: :encode, source: "", new_args: ["a\xFF"],
        calls: ["encode('UTF-16LE', invalid: :replace)", "encode('UTF-16LE', { invalid: :replace })",
                "encode('UTF-16LE')", "args = ['UTF-16LE', WrapperSpec.flagged(invalid: :replace)]; encode(*args)"] },
      { label: "keywords named like the template's locals and methods",
        source: "def m(started:, fire: :default_fire, clock_gettime: 3) = [started, fire, clock_gettime]",
        calls: ["m(started: 1)", "m(started: 1, fire: 2)", "m", "m(fire: 1, started: 2, clock_gettime: 0)"] },
      { label: "keywords that are reserved words",
        source: "def m(if:, unless: 2) = [binding.local_variable_get(:if), binding.local_variable_get(:unless)]",
        calls: ["m(if: 1)", "m(if: 1, unless: 3)", "m(unless: 1)", "m(1, if: 1)"] },
      { label: "a name define_method gave, that def cannot spell", name: :"two words",
        source: "define_method(:'two words') { |a, k: 1, &blk| [a, k, blk&.call] }",
        calls: ["send(:'two words', 1)", "send(:'two words', 1, k: 2) { :block }", "send(:'two words')",
                "send(:'two words', 1, x: 1)", "send(:'two words', { k: 2 })",
                "args = [1, WrapperSpec.flagged(k: 2)]; send(:'two words', *args)"] },
      { label: "an operator", name: :+,
        source: "def +(other) = [:plus, other]",
        calls: ["self + 1", "send(:+)", "send(:+, k: 1)", "send(:+, 1, 2)"] }
    ].freeze

    shapes.each do |shape|
      name = shape.fetch(:name, :m)
      context shape[:label] do
        WrapperSpec::VARIANTS.each do |variant, (template, enabled)|
          shape[:calls].each do |code|
            it "#{variant}: #{code} behaves as without the wrapper" do
              tracepoint = WrapperSpec::Tracepoint.new(enabled)
              wrapped = instance(original_class(shape).tap { |klass| wrap(klass, name, template, tracepoint) }, shape)
              plain = instance(original_class(shape), shape)
              flags = !shape.fetch(:flag_differs, []).include?(code)
              expected = outcome(plain, code, flags:)
              expect(outcome(wrapped, code, flags:)).to eq(expected)
              next unless enabled && expected.first == :returned

              expect(tracepoint.fired).to match([[a_kind_of(Integer).and(be >= 0)]])
            end
          end
        end
      end
    end
  end

  describe "forms" do
    def wrapper_parameters(source, name = :m)
      klass = Class.new { class_eval(source, __FILE__, __LINE__) }
      wrap(klass, name, WrapperSpec::LATENCY).instance_method(name).parameters
    end

    it "has the original's parameters, names included, and its arity" do
      [
        "def m = nil", "def m(a, b) = nil", "def m(a, b = 1, c = 2, d, &blk) = nil", "def m(a, k:, j: 1) = nil",
        "def m(a, **nil) = nil", "def m(a = 1, k:, **opts) = nil", "define_method(:m) { |a, k: 1| }",
        "def m(a, b = 1, *rest, z, k:, j: 2, **opts, &blk) = nil", "def m(*args) = nil",
        "ruby2_keywords def m(a, *args) = nil", "def m(...) = nil", "def m(a, ...) = nil", "def m(&) = nil",
        "def m(k1: 1, k2: 2, k3: 3, k4: 4, **) = nil", "def m(fire, enabled, latency_start: 1) = nil"
      ].each do |source|
        klass = Class.new { class_eval(source, __FILE__, __LINE__) }
        original = klass.instance_method(:m)
        # Ruby 3.1 reports its anonymous * and ** unnamed, and the wrapper
        # has to name them; Ruby 3.2+ reports them as :* and :**, which the
        # wrapper forwards as they are.
        expected = original.parameters.map do |kind, name|
          name.nil? && %i[rest keyrest].include?(kind) ? [kind] : [kind, name]
        end
        wrapper = wrap(klass, :m, WrapperSpec::LATENCY).instance_method(:m)
        actual = wrapper.parameters.map { |kind, name| name.to_s.start_with?("__w") ? [kind] : [kind, name] }
        expect([actual, wrapper.arity]).to eq([expected, original.arity]), source
      end
    end

    it "renames only the parameters a wrapper cannot have as locals" do
      # Unnamed (destructured), repeated, and a local of the template.
      parameters = wrapper_parameters("def m((a, b), _, _, started, k: 1) = nil")
      expect(parameters.map(&:first)).to eq(%i[req req req req key])
      expect(parameters.map(&:last)).to match([/\A__w/, :_, /\A__w/, /\A__w/, :k])
      attr_writer = wrapper_parameters("attr_writer :m", :m=)
      expect(attr_writer.map(&:first)).to eq(%i[req])
    end

    it "forwards with ... keywords it cannot name" do
      forward = [%i[rest *], %i[keyrest **], %i[block &]]
      expect(wrapper_parameters("def m(if:) = nil")).to eq(forward)
      expect(wrapper_parameters("def m(started: 1) = nil")).to eq(forward)
    end

    it "passes keywords on to a C method that takes any number of arguments" do
      klass = Class.new(Array)
      wrap(klass, :push, "%{super}")
      expect(klass.new.push(1, k: 2)).to eq([1, { k: 2 }])
    end
  end

  describe "allocations on the armed path without a tracer" do
    {
      "no parameters" => ["def m = nil", ->(o) { o.m }],
      "required positionals" => ["def m(a, b, c) = nil", ->(o) { o.m(1, 2, 3) }],
      "optional positional omitted" => ["def m(a, b = 1) = nil", ->(o) { o.m(1) }],
      "optional positional given" => ["def m(a, b = 1) = nil", ->(o) { o.m(1, 2) }],
      "optional keyword omitted" => ["def m(a, k: 1) = nil", ->(o) { o.m(1) }],
      "**nil" => ["def m(a, **nil) = nil", ->(o) { o.m(1) }],
      "a block, yielded to" => ["def m(a) = yield(a)", ->(o) { o.m(1) { |x| x } }],
      "a block parameter, unused" => ["def m(&blk) = nil", ->(o) { o.m { nil } }],
      "attr_reader" => ["attr_reader :m", ->(o) { o.m }]
    }.each do |label, (source, call)|
      it "are none for #{label}" do
        plain = Class.new { class_eval(source, __FILE__, __LINE__) }.new
        klass = Class.new { class_eval(source, __FILE__, __LINE__) }
        wrap(klass, :m, WrapperSpec::LATENCY)
        wrapped = klass.new
        expect(allocations { call.call(plain) }).to eq(0)
        expect(allocations { call.call(wrapped) }).to eq(0)
        expect(wrapped.method(:m).owner).not_to eq(klass)
      end
    end

    it "are the original's own again for optional and post-required positionals" do
      source = "def m(a, b = 1, c) = nil"
      plain = Class.new { class_eval(source, __FILE__, __LINE__) }.new
      klass = Class.new { class_eval(source, __FILE__, __LINE__) }
      wrap(klass, :m, WrapperSpec::LATENCY)
      wrapped = klass.new
      # CRuby 3.1 builds an argument array to bind this shape, the wrapper's
      # parameters included; nothing else is allocated.
      [->(o) { o.m(1, 2) }, ->(o) { o.m(1, 2, 3) }].each do |call|
        expect(allocations { call.call(wrapped) }).to eq(2 * allocations { call.call(plain) })
      end
    end

    it "are none for a C method taking one argument" do
      klass = Class.new(Array)
      wrap(klass, :at, WrapperSpec::LATENCY)
      receiver = klass.new([1])
      expect(allocations { receiver.at(0) }).to eq(0)
    end

    it "are those of a hand-written super(k: k) for required keywords" do
      original = Class.new { def m(_arg, key:) = key }
      generated = Class.new(original)
      wrap(generated, :m, WrapperSpec::LATENCY)
      hand_written = Class.new(original) { prepend WrapperSpec::HandWrittenKeywordWrapper }
      receivers = [original, generated, hand_written].map(&:new)
      direct, wrapped, by_hand = receivers.map { |receiver| allocations { receiver.m(1, key: 2) } }
      expect(direct).to eq(0)
      # CRuby 3.1 allocates call info for each super that passes keywords.
      expect(wrapped).to eq(by_hand)
      expect(wrapped).to be <= 1
    end
  end

  describe "values and exceptions" do
    let(:result) { Object.new }
    let(:error) { RuntimeError.new("boom") }

    it "returns the very object the method returns" do
      result = self.result
      WrapperSpec::VARIANTS.each_value do |template, enabled|
        klass = Class.new { define_method(:m) { |_arg = nil, **_opts| result } }
        wrap(klass, :m, template, WrapperSpec::Tracepoint.new(enabled))
        expect(klass.new.m).to equal(result)
        expect(klass.new.m(1, key: 2)).to equal(result)
      end
    end

    it "lets the very exception the method raises through, firing when attached" do
      error = self.error
      WrapperSpec::VARIANTS.each_value do |template, enabled|
        tracepoint = WrapperSpec::Tracepoint.new(enabled)
        klass = Class.new { define_method(:m) { |a| raise error if a } }
        wrap(klass, :m, template, tracepoint)
        expect { klass.new.m(true) }.to(raise_error { |raised| expect(raised).to equal(error) })
        expect(tracepoint.fired.size).to eq(enabled ? 1 : 0)
      end
    end

    it "does not fire when the tracepoint is not enabled, fires once per call when it is" do
      idle = WrapperSpec::Tracepoint.new(false)
      klass = Class.new { def m(arg) = arg }
      wrap(klass, :m, WrapperSpec::LATENCY, idle)
      3.times { |i| expect(klass.new.m(i)).to eq(i) }
      expect(idle.fired).to be_empty

      attached = WrapperSpec::Tracepoint.new(true)
      klass = Class.new { def m(seconds) = sleep(seconds) }
      wrap(klass, :m, WrapperSpec::LATENCY, attached)
      klass.new.m(0.01)
      expect(attached.fired.size).to eq(1)
      expect(attached.fired.first.first).to be_between(10_000_000, 5_000_000_000)
    end

    it "ends the call the block was given to when the block breaks" do
      tracepoint = WrapperSpec::Tracepoint.new(true)
      klass = Class.new { def m = [yield, :after] }
      wrap(klass, :m, WrapperSpec::LATENCY, tracepoint)
      expect(klass.new.m { break :broke }).to eq(:broke)
      expect(tracepoint.fired.size).to eq(1)
    end
  end

  describe "class hierarchies" do
    let(:log) { [] }

    def logging_template(tag)
      "%{log} << :enter_#{tag}\nbegin\n  %{super}\nensure\n  %{log} << :leave_#{tag}\nend"
    end

    def wrap_logging(klass, tag)
      mod = Module.new
      mod.const_set(:LOG, log)
      described_class.define(mod, :m, klass.instance_method(:m).parameters, logging_template(tag), log: "LOG")
      klass.prepend(mod)
    end

    it "chains through super: wrappers on a subclass and on its superclass" do
      base = Class.new { def m(arg, key: 1) = [:base, arg, key] }
      sub = Class.new(base) { def m(arg, key: 1) = [:sub, *super(arg + 1, key: key + 1)] }
      zsuper = Class.new(base) { def m(arg, key: 1) = [:zsuper, *super] }
      wrap_logging(base, :base)
      wrap_logging(sub, :sub)
      wrap_logging(zsuper, :zsuper)
      expect(sub.new.m(1)).to eq([:sub, :base, 2, 2])
      expect(log).to eq(%i[enter_sub enter_base leave_base leave_sub])
      log.clear
      expect(zsuper.new.m(1, key: 5)).to eq([:zsuper, :base, 1, 5])
      expect(log).to eq(%i[enter_zsuper enter_base leave_base leave_zsuper])
    end

    it "wraps an inherited call once, in the class that was wrapped" do
      base = Class.new { def m(arg) = [:base, arg] }
      sub = Class.new(base)
      wrap_logging(base, :base)
      expect(sub.new.m(1)).to eq([:base, 1])
      expect(log).to eq(%i[enter_base leave_base])
    end

    def define_verbosely(mod, name, parameters)
      verbose = $VERBOSE
      $VERBOSE = true
      described_class.define(mod, name, parameters, WrapperSpec::LATENCY, tracepoint: "TRACEPOINT")
    ensure
      $VERBOSE = verbose
    end

    it "fits a method redefined later when defined again, without a redefinition warning" do
      klass = Class.new { def m(arg) = [arg] }
      tracepoint = WrapperSpec::Tracepoint.new(true)
      mod = wrap(klass, :m, WrapperSpec::LATENCY, tracepoint)
      expect(klass.new.m(1)).to eq([1])
      klass.send(:remove_method, :m)
      klass.class_eval { def m(arg, opt = :default, key:) = [arg, opt, key] }
      expect { klass.new.m(1, key: 2) }.to raise_error(ArgumentError, "wrong number of arguments (given 2, expected 1)")
      parameters = klass.instance_method(:m).super_method.parameters
      expect { define_verbosely(mod, :m, parameters) }.not_to output.to_stderr
      expect(klass.new.m(1, key: 2)).to eq([1, :default, 2])
      expect(klass.new.m(1, 3, key: 2)).to eq([1, 3, 2])
      # The call the old wrapper rejected did not reach the template.
      expect(tracepoint.fired.size).to eq(3)
    end
  end

  describe "names" do
    it "wraps names ending in ?, ! and =" do
      klass = Class.new do
        attr_reader :value

        def ok?(arg = nil) = [:ok?, arg]
        def save!(key: 1) = [:save!, key]
        # A setter's own return value shows only through send.
        define_method(:value=) do |value|
          @value = value
          :ignored
        end
      end
      tracepoint = WrapperSpec::Tracepoint.new(true)
      %i[ok? save! value=].each { |name| wrap(klass, name, WrapperSpec::LATENCY, tracepoint) }
      object = klass.new
      expect(object.ok?).to eq([:ok?, nil])
      expect(object.save!(key: 2)).to eq([:save!, 2])
      expect(object.value = 5).to eq(5)
      expect(object.value).to eq(5)
      expect(object.send(:value=, 6)).to eq(:ignored)
      expect(tracepoint.fired.size).to eq(4)
    end

    it "wraps operators" do
      klass = Class.new do
        def [](*keys) = [:get, keys]

        def []=(key, value)
          @set = [key, value]
        end

        def ==(other) = other == :same
        def -@ = :negated
      end
      tracepoint = WrapperSpec::Tracepoint.new(true)
      %i[[] []= == -@].each { |name| wrap(klass, name, WrapperSpec::LATENCY, tracepoint) }
      object = klass.new
      expect(object[1, 2]).to eq([:get, [1, 2]])
      expect(object[1] = 2).to eq(2)
      expect(object.instance_variable_get(:@set)).to eq([1, 2])
      expect(object == :same).to be(true)
      expect(-object).to eq(:negated)
      expect(tracepoint.fired.size).to eq(4)
    end

    it "wraps a name def cannot spell, with return and template constants working" do
      klass = Class.new { define_method(:"what ever") { |a, k: 1| [a, k] } }
      tracepoint = WrapperSpec::Tracepoint.new(false)
      mod = wrap(klass, :"what ever", WrapperSpec::LATENCY, tracepoint)
      expect(mod.instance_method(:"what ever").parameters.map(&:first)).to eq(%i[rest keyrest block])
      expect(klass.new.send(:"what ever", 1, k: 2)).to eq([1, 2])
      expect(tracepoint.fired).to be_empty
      klass = Class.new { define_method(:"what ever") { :original } }
      wrap(klass, :"what ever", "return :early if %{tracepoint}.enabled?\n%{super}", WrapperSpec::Tracepoint.new(true))
      expect(klass.new.send(:"what ever")).to eq(:early)
    end

    it "returns the name as a Symbol" do
      mod = Module.new
      expect(described_class.define(mod, "m", [], "%{super}")).to eq(:m)
      expect(mod.instance_methods(false)).to eq([:m])
    end
  end

  describe "templates" do
    def define(template, values = {}, name: :m, parameters: [%i[req a]])
      described_class.define(Module.new, name, parameters, template, values)
    end

    it "resolves the template's constants lexically in the module" do
      klass = Class.new { def m = :original }
      klass.const_set(:TRACEPOINT, WrapperSpec::Tracepoint.new(true))
      own = WrapperSpec::Tracepoint.new(true)
      wrap(klass, :m, WrapperSpec::LATENCY, own)
      expect(klass.new.m).to eq(:original)
      expect(own.fired.size).to eq(1)
      expect(klass::TRACEPOINT.fired).to be_empty
    end

    it "passes other %{keys} through from values, and %% as %" do
      klass = Class.new { def m(arg) = arg }
      wrap(klass, :m, "%{super} %% %{modulus}", modulus: 7)
      expect(klass.new.m(23)).to eq(2)
    end

    it "rejects unknown keys, a reserved key, no %{super} and code that does not compile" do
      expect { define("%{super}.%{nope}") }.to raise_error(ArgumentError, /%\{nope\}, which has no value/)
      expect { define("%{super}", { super: "x" }) }.to raise_error(ArgumentError, /reserved/)
      expect { define("nil") }.to raise_error(ArgumentError, /never calls %\{super\}/)
      expect { define("%{super} +") }.to raise_error(ArgumentError, /wrapper of m does not compile/)
      expect { define("(%{super}", name: :"not a def name") }.to raise_error(ArgumentError, /does not compile/)
      expect { define("%{super}", parameters: [[:weird]]) }.to raise_error(ArgumentError, /unknown parameter kind/)
    end

    it "lengthens its locals' prefix past the template's words" do
      klass = Class.new { def m(arg, opt = 2) = [arg, opt] }
      template = "__warg0 = __wwarg0 = :clobbered\n%{super}"
      wrap(klass, :m, template)
      expect(klass.new.m(1)).to eq([1, 2])
      expect(klass.new.m(1, 3)).to eq([1, 3])
    end
  end

  describe "keywords" do
    # Ruby 3.1 says which methods are ruby2_keywords (Method#parameters),
    # so a plain *rest method gets a plain wrapper. Ruby 3.3 and 3.4 do not
    # say, and every *rest wrapper is ruby2_keywords, but they collect the
    # keywords into a new, unflagged hash (3.2 is not tested).
    it "keywords given to a plain *rest method arrive in an unflagged hash, as without the wrapper" do
      klass = Class.new { def m(*args) = args.last }
      plain = klass.new.m(k: 1)
      wrap(klass, :m, "%{super}")
      wrapped = klass.new.m(k: 1)
      expect(wrapped).to eq(plain)
      expect([Hash.ruby2_keywords_hash?(plain), Hash.ruby2_keywords_hash?(wrapped)]).to eq([false, false])
    end
  end

  describe "defining again" do
    it "puts back a removed wrapper as it was compiled: its parameters, its super, its visibility given anew" do
      klass = Class.new { def m(arg, key: 1, &block) = [arg, key, block&.call] }
      tracepoint = WrapperSpec::Tracepoint.new(true)
      mod = wrap(klass, :m, WrapperSpec::LATENCY, tracepoint)
      wrapper = mod.instance_method(:m)
      mod.send(:remove_method, :m)
      expect(klass.instance_method(:m).owner).to eq(klass)

      expect(described_class.define_again(mod, "m", wrapper)).to eq(:m)
      expect(mod.instance_method(:m)).to eq(wrapper)
      expect(klass.instance_method(:m).parameters).to eq([%i[req arg], %i[key key], %i[block block]])
      expect(klass.new.m(2, key: 3) { 4 }).to eq([2, 3, 4])
      expect(tracepoint.fired.size).to eq(1)
      mod.send(:private, :m)
      expect { klass.new.m(2) }.to raise_error(NoMethodError, /private method/)
    end

    it "refuses a method of another module" do
      wrapper = wrap(Class.new { def m = 1 }, :m, "%{super}").instance_method(:m)
      expect { described_class.define_again(Module.new, :m, wrapper) }
        .to raise_error(ArgumentError, /is not a wrapper of/)
      expect { described_class.define_again(Object.new, :m, wrapper) }.to raise_error(TypeError, /not a module/)
    end
  end

  describe "known differences" do
    it "a flagged hash in a literal splat reaches a wrapped C method as keywords" do
      # CRuby 3.1 and 3.3 take it as keywords from *variable, but not from
      # *[literal], when calling a C method; the wrapper always passes a
      # variable. Ruby 3.4 takes it from both, so the difference is gone there.
      # rubocop:disable Lint/RedundantSplatExpansion
      call = ->(string) { string.encode("UTF-16LE", *[WrapperSpec.flagged(invalid: :replace)]) }
      # rubocop:enable Lint/RedundantSplatExpansion
      klass = Class.new(String)
      if Gem::Version.new(RUBY_VERSION) < Gem::Version.new("3.4")
        expect { call.call(klass.new("a\xFF")) }.to raise_error(TypeError)
      else
        expect(call.call(klass.new("a\xFF"))).to eq("a\uFFFD".encode("UTF-16LE"))
      end
      wrap(klass, :encode, "%{super}")
      expect(call.call(klass.new("a\xFF"))).to eq("a\uFFFD".encode("UTF-16LE"))
    end

    it "a C method's $~ is set in the wrapper's frame, not the caller's" do
      klass = Class.new(String)
      wrap(klass, :sub, "%{super}")
      expect(klass.new("abc").sub(/(b)/) { "[#{Regexp.last_match(1)}]" }).to eq("a[]c")
      expect(Regexp.last_match).to be_nil
      expect(String.new("abc").sub(/(b)/) { "[#{Regexp.last_match(1)}]" }).to eq("a[b]c")
    end
  end
end
# rubocop:enable Style/FormatStringToken
