# frozen_string_literal: true

# A traced method looks, from inside and from outside, as it does untraced:
# its parameters and arity, its caller, the depth recursion reaches.
RSpec.describe "Traced methods' introspection" do
  include FidelityHelpers

  after { StaticTracing.disable! }

  # A class with the method +source+ defines (the first def), traced once
  # tracing is on.
  def traced_class(source)
    klass = Class.new { class_eval(source, __FILE__, __LINE__) }
    stub_const("FidelityIntrospection", klass)
    StaticTracing.latency(klass, source[/def (\w+)/, 1].to_sym)
    klass
  end

  it "keeps the original's parameters, with their names, and its arity" do
    sources = [
      "def call(env, status = 200, *rest, key:, flag: false, **options, &block) = nil",
      "def fetch(id, default = nil) = nil",
      "def each_row(*rows) = nil",
      "def forward(first, ...) = nil"
    ]
    sources.each do |source|
      klass = traced_class(source)
      name = source[/def (\w+)/, 1].to_sym
      untraced = klass.instance_method(name)
      enable_and_check_wrapped(klass, name)
      traced = klass.instance_method(name)
      expect([traced.parameters, traced.arity]).to eq([untraced.parameters, untraced.arity]), source
      StaticTracing.disable!
    end
  end

  describe "without a tracer attached" do
    it "lets caller_locations and warn(uplevel:) see the real caller" do
      klass = traced_class(<<~RUBY)
        def where = [caller_locations(1, 1).first.path, caller_locations(1, 1).first.lineno, warn("here", uplevel: 1)]
      RUBY
      enable_and_check_wrapped(klass, :where)
      line = __LINE__ + 1
      expect { expect(klass.new.where.first(2)).to eq([__FILE__, line]) }
        .to output(/\A#{Regexp.escape(__FILE__)}:#{line}: warning: here$/).to_stderr
    end

    it "leaves out the wrapper from the backtrace of the method's exception" do
      klass = traced_class("def fail_here = raise(ArgumentError, 'no')")
      enable_and_check_wrapped(klass, :fail_here)
      expect { klass.new.fail_here }.to raise_error(ArgumentError) { |error|
        expect(error.backtrace.grep(/#{Regexp.escape(StaticTracing::MethodWrapper::SOURCE_FILE)}/)).to be_empty
      }
    end

    it "lets recursion go at least 80% as deep as untraced" do
      klass = traced_class("attr_reader :depth\ndef down(depth) = (@depth = depth) && down(depth + 1)")
      reached = lambda do
        receiver = klass.new
        receiver.down(0)
      rescue SystemStackError
        receiver.depth
      end
      untraced = reached.call
      enable_and_check_wrapped(klass, :down)
      expect(reached.call).to be >= untraced * 0.8
    end
  end

  describe "with a tracer attached", :e2e do
    let(:app) do
      ruby_repl(<<~RUBY)
        class Checkout
          def total(a, b) = a + b
          def sum(first, *rest) = rest.sum(first)
          def where = warn("here", uplevel: 1)
        end
        %i[total sum where].each { |name| StaticTracing.latency(Checkout, name) }
        StaticTracing.enable!
      RUBY
    end

    # The ArgumentError is raised as the wrapper is called, before it runs:
    # the same for fixed-arity and *rest methods. (A C method taking any
    # number of arguments checks them itself, inside the timed call.)
    it "never fires for a call rejected for its arguments" do
      wait_until_listed(app.pid, "usdt:*:checkout:*", count: 3)
      tracer = attach_bpftrace(app.pid, "usdt:*:checkout:* { @hits[probe] = count(); }")
      errors = app.evaluate(<<~RUBY)
        [-> { Checkout.new.total(1) }, -> { Checkout.new.sum }].map do |call|
          call.call
        rescue ArgumentError => e
          e.message
        end
      RUBY
      expect(errors).to eq(["wrong number of arguments (given 1, expected 2)",
                            "wrong number of arguments (given 0, expected 1+)"])
      expect(app.evaluate("[Checkout.new.total(1, 2), Checkout.new.sum(1, 2)]")).to eq([3, 3])
      output = tracer.finish
      expect(output).to match(/checkout:total\]: 1$/).and match(/checkout:sum\]: 1$/)
    end

    it "points warn(uplevel:) at the caller while the call is timed" do
      wait_until_listed(app.pid, "usdt:*:checkout:where")
      tracer = attach_bpftrace(app.pid, "usdt:*:checkout:where { @hits = count(); }")
      app.evaluate("Checkout.new.where")
      expect(tracer.finish).to match(/@hits: 1$/)
      # The evaluated line that called it: "(eval):1" up to Ruby 3.2, "(eval at FILE:LINE):1" from 3.3.
      expect(app.wait_for(/^(.*): warning: here$/)[1]).to match(/\A\(eval(?: at [^)]+)?\):1\z/)
    end
  end
end
