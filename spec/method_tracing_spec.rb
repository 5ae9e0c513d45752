# frozen_string_literal: true

# Method tracing in this process: what gets declared, wrapped and unwrapped.
# Firing with a tracer attached is covered in spec/e2e/method_tracing_spec.rb.
RSpec.describe "Method tracing" do
  around do |example|
    mode = StaticTracing::Configuration.mode
    StaticTracing::Configuration.mode = :off
    example.run
  ensure
    StaticTracing::Configuration.mode = mode
  end

  include_context "traced classes"

  def tracepoints(provider)
    StaticTracing.providers[provider].tracepoints
  end

  describe StaticTracing::LatencyTracer do
    it "declares a probe for each method, defined before or after the include, with mapped names" do
      klass = define_class(:MtController) do
        def before_include; end
        include StaticTracing::LatencyTracer
        def index; end
        def valid?; end
        def save!; end
        def name=(value); end
        def [](key); end
        def +(other); end
        def ==(other); end
        protected def shielded; end
        private def hidden; end
      end
      expect(tracepoints(:mt_controller).keys)
        .to contain_exactly(:before_include, :index, :valid_p, :save_bang, :name_set, :shielded, :hidden)
      expect(tracepoints(:mt_controller).values.map(&:types).uniq).to eq([[Integer]])
      expect(StaticTracing::MethodTracing.probes(klass).size).to eq(7)
      expect(tracepoints(:mt_controller)[:index].traced_methods).to eq(["MtController#index"])
    end

    it "names the provider after the class in snake case, namespaces included" do
      outer = define_class(:MtAdmin)
      klass = Class.new { def index; end }
      outer.const_set(:UsersHTTPController, klass)
      klass.include(StaticTracing::LatencyTracer)
      expect(StaticTracing.providers[:mt_admin_users_http_controller].tracepoints.keys).to eq([:index])
    end

    it "takes an explicit provider" do
      define_class(:MtExplicit) do
        include StaticTracing::LatencyTracer.with(provider: :web)
        def index; end
      end
      expect(tracepoints(:web).keys).to eq([:index])
      expect(StaticTracing.providers.key?(:mt_explicit)).to be(false)
      expect { StaticTracing::LatencyTracer.with(provider: "bad-name") }
        .to raise_error(ArgumentError, /invalid provider name/)
    end

    it "wraps nothing until tracing is enabled, and unwraps everything when it is disabled" do
      klass = define_class(:MtSwitch) do
        include StaticTracing::LatencyTracer
        def index = :index
      end
      expect(wrapped?(klass, :index)).to be(false)
      expect(klass.ancestors.first).to eq(klass)
      expect(StaticTracing.providers[:mt_switch]).not_to be_loaded

      StaticTracing.enable!
      expect(wrapped?(klass, :index)).to be(true)
      expect(StaticTracing.providers[:mt_switch]).to be_loaded
      expect(klass.new.index).to eq(:index)

      StaticTracing.disable!
      expect(wrapped?(klass, :index)).to be(false)
      expect(StaticTracing.providers[:mt_switch]).not_to be_loaded
      expect(klass.new.index).to eq(:index)
    end

    it "wraps and loads methods declared while tracing is on" do
      StaticTracing.enable!
      klass = define_class(:MtLive) { include StaticTracing::LatencyTracer }
      klass.class_eval { def later = :later }
      expect(wrapped?(klass, :later)).to be(true)
      expect(StaticTracing.providers[:mt_live]).to be_loaded
      expect(klass.new.later).to eq(:later)
    end

    it "keeps each method's visibility, also when it changes after the definition" do
      StaticTracing.enable!
      klass = define_class(:MtVisibility) do
        include StaticTracing::LatencyTracer
        def open_one = :open
        private def closed = :closed
        def later_closed = :later
        private :later_closed
        protected def guarded = :guarded
        private

        def by_scope = :scope
      end
      object = klass.new
      expect(object.open_one).to eq(:open)
      # Ruby 3.4 quotes the method's name as 'closed', earlier Rubies as `closed'.
      expect { object.closed }.to raise_error(NoMethodError, /private method [`']closed'/)
      expect { object.later_closed }.to raise_error(NoMethodError, /private method [`']later_closed'/)
      expect { object.guarded }.to raise_error(NoMethodError, /protected method [`']guarded'/)
      expect { object.by_scope }.to raise_error(NoMethodError, /private method [`']by_scope'/)
      expect(object.send(:closed)).to eq(:closed)
      expect(%i[closed later_closed by_scope].map { |name| wrapped?(klass, name) }).to all(be(true))

      klass.send(:public, :closed)
      expect(object.closed).to eq(:closed)
    end

    it "follows a redefinition with other parameters, and a removal" do
      StaticTracing.enable!
      klass = define_class(:MtRedefine) do
        include StaticTracing::LatencyTracer
        def work(first) = [first]
      end
      expect(klass.new.work(1)).to eq([1])
      klass.class_eval { def work(first, second = 2, *rest, key: 3) = [first, second, rest, key] }
      expect(klass.new.work(1)).to eq([1, 2, [], 3])
      expect(klass.new.work(1, 5, 6, key: 7)).to eq([1, 5, [6], 7])

      klass.send(:remove_method, :work)
      expect { klass.new.work(1) }.to raise_error(NoMethodError, /undefined method [`']work'/)
      klass.class_eval { def work = :back }
      expect(klass.new.work).to eq(:back)
      expect(wrapped?(klass, :work)).to be(true)

      klass.send(:undef_method, :work)
      expect { klass.new.work }.to raise_error(NoMethodError, /undefined method [`']work'/)
    end

    it "puts back the wrapper it compiled before, and compiles another for a method whose parameters changed" do
      klass = define_class(:MtRewrap) do
        include StaticTracing::LatencyTracer
        def scale(value, by: 2, plus: 0) = (value * by) + plus
      end
      StaticTracing.enable!
      wrapper = klass.instance_method(:scale)
      StaticTracing.disable!
      expect(wrapped?(klass, :scale)).to be(false)
      StaticTracing.enable!
      # The same code (UnboundMethod#== compares it), not a copy compiled again.
      expect(klass.instance_method(:scale)).to eq(wrapper)
      expect([klass.new.scale(3), klass.new.scale(3, plus: 1, by: 3)]).to eq([6, 10])

      StaticTracing.disable!
      klass.class_eval { def scale(value, by: 2, plus: 0) = [value, by, plus] }
      StaticTracing.enable!
      expect(klass.instance_method(:scale)).to eq(wrapper)
      expect(klass.new.scale(3, plus: 1)).to eq([3, 2, 1])

      klass.class_eval { def scale(value, by: 2) = value * by }
      expect(klass.instance_method(:scale)).not_to eq(wrapper)
      expect(klass.instance_method(:scale).parameters).to eq([%i[req value], %i[key by]])
      expect(klass.new.scale(3, by: 4)).to eq(12)
    end

    it "traces subclasses under their own provider, and super chains reach every wrapper" do
      StaticTracing.enable!
      base = define_class(:MtBase) do
        include StaticTracing::LatencyTracer
        def call(value) = [:base, value]
      end
      sub = define_class(:MtSub, base) do
        def call(value) = [:sub, *super]
      end
      expect(sub.new.call(1)).to eq([:sub, :base, 1])
      expect(tracepoints(:mt_sub).keys).to eq([:call])
      expect(wrapped?(sub, :call)).to be(true)
      expect(wrapped?(base, :call)).to be(true)
    end

    it "traces an alias as its own probe, calling the original" do
      StaticTracing.enable!
      klass = define_class(:MtAlias) do
        include StaticTracing::LatencyTracer
        def original = :original
        alias_method :copy, :original
      end
      expect(tracepoints(:mt_alias).keys).to contain_exactly(:original, :copy)
      expect(klass.new.copy).to eq(:original)
    end

    it "passes arguments, blocks, return values and exceptions through, and fires even when raising" do
      StaticTracing.enable!
      error = RuntimeError.new("boom")
      klass = define_class(:MtPassThrough) do
        include StaticTracing::LatencyTracer
        define_method(:fail) { raise error }
        def echo(*args, **options, &block) = [args, options, block&.call]
        def same(object) = object
      end
      object = klass.new
      expect(object.echo(1, { a: 1 }, b: 2) { :blk }).to eq([[1, { a: 1 }], { b: 2 }, :blk])
      payload = +"payload"
      expect(object.same(payload)).to equal(payload)
      expect { object.fail }.to(raise_error { |raised| expect(raised).to equal(error) })
    end

    it "never breaks the class being defined, and says why a method is not traced" do
      long = :"#{"m" * 129}"
      expect do
        define_class(:MtHostile) do
          include StaticTracing::LatencyTracer
          define_method(long) { :long }
          def fine = :fine
        end
      end.to output(/not tracing MtHostile##{long}: .*at most 128 bytes/).to_stderr
      expect(MtHostile.new.fine).to eq(:fine)
      expect(MtHostile.new.public_send(long)).to eq(:long)
      expect(tracepoints(:mt_hostile).keys).to eq([:fine])
    end

    it "leaves anonymous classes alone, saying so once" do
      expect do
        Class.new do
          include StaticTracing::LatencyTracer
          def one; end
          def two; end
        end
      end.to output(/not tracing anonymous .*give it a provider/).to_stderr
    end
  end

  describe StaticTracing::StackTracer do
    it "declares String probes under <class>_stack, next to LatencyTracer" do
      StaticTracing.enable!
      klass = define_class(:MtStacked) do
        include StaticTracing::LatencyTracer
        include StaticTracing::StackTracer
        def index = :index
      end
      expect(tracepoints(:mt_stacked_stack)[:index].types).to eq([String])
      expect(tracepoints(:mt_stacked)[:index].types).to eq([Integer])
      expect(klass.new.index).to eq(:index)
      expect(StaticTracing::StackTracer.max_bytes).to eq(200)
      expect { StaticTracing::StackTracer.max_bytes = 0 }.to raise_error(ArgumentError, /at least 1/)
    end

    # A frame of a folded stack is the method's label; a class may define
    # its own name and inspect, and a ";" there would split the frame.
    it "labels a frame with the class's own name, whatever its name or inspect method says" do
      klass = define_class(:MtSelfNamed) do
        def self.name = "main;forged"
        def self.inspect = "forged;too"
        def self.to_s = "forged;three"
      end
      anonymous = Class.new { def self.name = "a;b" }
      expect(StaticTracing::MethodTracing.method_label(klass, :index)).to eq("MtSelfNamed#index")
      expect(StaticTracing::MethodTracing.method_label(klass.singleton_class, :index)).to eq("MtSelfNamed.index")
      expect(StaticTracing::MethodTracing.method_label(anonymous, :go)).to match(/\A#<Class:0x\h+>#go\z/)
    end
  end

  describe "StaticTracing.latency" do
    it "runs the block exactly once and returns its value, on or off" do
      [false, true].each do |on|
        on ? StaticTracing.enable! : StaticTracing.disable!
        runs = 0
        expect(StaticTracing.latency(name: :block, provider: :mt_blocks) { runs += 1 }).to eq(1)
        expect(runs).to eq(1)
        error = RuntimeError.new("inside")
        expect { StaticTracing.latency(name: :block, provider: :mt_blocks) { raise error } }
          .to(raise_error { |raised| expect(raised).to equal(error) })
      end
      expect(StaticTracing.providers[:mt_blocks].tracepoints[:block].types).to eq([Integer])
    end

    it "names the provider after the caller's class" do
      StaticTracing.enable!
      klass = define_class(:MtCaller) do
        def run = StaticTracing.latency(name: :inner) { :ran }
      end
      expect(klass.new.run).to eq(:ran)
      expect(StaticTracing.providers[:mt_caller].tracepoints.keys).to eq([:inner])
    end

    it "wraps one method, from a class body or from anywhere" do
      StaticTracing.enable!
      klass = define_class(:MtOne) do
        def traced = :traced
        def untraced = :untraced
        StaticTracing.latency(:traced)
        StaticTracing.latency(:later)
        def later = :later
      end
      expect(tracepoints(:mt_one).keys).to eq(%i[traced later])
      expect(wrapped?(klass, :untraced)).to be(false)
      expect(klass.new.later).to eq(:later)
      StaticTracing.latency(klass, :untraced, provider: :mt_elsewhere)
      expect(tracepoints(:mt_elsewhere).keys).to eq([:untraced])
      expect(wrapped?(klass, :untraced)).to be(true)
    end

    it "explains its misuse" do
      expect { StaticTracing.latency(name: :x) }.to raise_error(ArgumentError, /needs name: and a block/)
      expect { StaticTracing.latency(:x) }.to raise_error(ArgumentError, /goes in a class body/)
    end
  end

  describe "StaticTracing.tracepoint" do
    it "runs the block once while no tracer is attached, to check it, and declares the probe once" do
      StaticTracing.enable!
      runs = 0
      2.times do
        expect(StaticTracing.tracepoint(:mt_custom, :probe, Integer, String) { [runs += 1, "run"] }).to be_nil
      end
      expect(runs).to eq(1)
      tracepoint = StaticTracing.providers[:mt_custom].tracepoints[:probe]
      expect(tracepoint.types).to eq([Integer, String])
      expect(StaticTracing.providers[:mt_custom]).to be_loaded
      expect { StaticTracing.tracepoint(:mt_custom, :probe, Float) { 1.0 } }
        .to raise_error(ArgumentError, /already declared with \(Integer, String\)/)
      expect { StaticTracing.tracepoint(:mt_custom, :no_block) }.to raise_error(ArgumentError, /needs a block/)
    end
  end

  describe "StaticTracing.nsec" do
    it "is a monotonic clock in nanoseconds" do
      first = StaticTracing.nsec
      expect(first).to be_an(Integer)
      expect(StaticTracing.nsec).to be >= first
      clock = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
      expect((StaticTracing.nsec - clock).abs).to be < 1_000_000_000
    end
  end

  describe "providers and the switch" do
    it "unloads on disable! only what enable! loaded" do
      explicit = StaticTracing::Provider.register(:mt_explicit_load)
      explicit.add_tracepoint(:probe)
      explicit.load
      automatic = StaticTracing::Provider.register(:mt_automatic_load)
      automatic.add_tracepoint(:probe)
      StaticTracing.enable!
      expect([explicit, automatic]).to all(be_loaded)
      StaticTracing.disable!
      expect(explicit).to be_loaded
      expect(automatic).not_to be_loaded
    end

    it "lets a method tracepoint be wrapped and unwrapped on its own" do
      klass = define_class(:MtSingle) do
        include StaticTracing::LatencyTracer
        def one = 1
        def two = 2
      end
      tracepoint = StaticTracing.providers[:mt_single].tracepoints[:one]
      tracepoint.load
      expect(wrapped?(klass, :one)).to be(true)
      expect(wrapped?(klass, :two)).to be(false)
      expect(tracepoint.provider).to be_loaded
      StaticTracing.enable!
      StaticTracing.disable!
      expect(wrapped?(klass, :one)).to be(true)
      tracepoint.unload
      expect(wrapped?(klass, :one)).to be(false)
      expect(tracepoint.provider).to be_loaded
    end
  end
end
