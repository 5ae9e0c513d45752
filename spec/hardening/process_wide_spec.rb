# frozen_string_literal: true

# Tracing is process-wide state: classes made at run time, frozen classes,
# forks racing a toggle, and providers unregistered under traced methods
# must all leave every part of it agreeing, and the process unharmed.
RSpec.describe "Process-wide consistency" do
  describe "classes made at run time", :subprocess do
    # Each child counts the live subclasses of Base after a full collection.
    # The conservative stack scan may keep a handful alive: the bound is far
    # below the count made, which a strong reference would keep whole.
    let(:count_live) do
      <<~'RUBY'
        def live_subclasses(base)
          3.times { GC.start(full_mark: true, immediate_sweep: true) }
          ObjectSpace.each_object(Class).count { |klass| klass < base }
        end
      RUBY
    end

    # Two traced parents: one named after its class, one given a provider.
    let(:parents) do
      <<~RUBY
        class Base
          include StaticTracing::LatencyTracer
          def index; end
        end
        class WithProvider
          include StaticTracing::LatencyTracer.with(provider: :run_time)
          def index; end
        end
      RUBY
    end

    it "are collected once unreferenced, whether tracing is off or on, with or without a provider" do
      app = ruby_repl(<<~RUBY)
        #{count_live}
        #{parents}
        def make(base, count) = count.times { Class.new(base) { def show; end } }
      RUBY
      app.evaluate("make(Base, 2000); make(WithProvider, 2000)")
      expect(app.evaluate("[live_subclasses(Base), live_subclasses(WithProvider)]")).to all(be < 50)

      app.evaluate("StaticTracing.enable!; make(Base, 2000); make(WithProvider, 2000)")
      expect(app.evaluate("[live_subclasses(Base), live_subclasses(WithProvider)]")).to all(be < 50)
      # Their probes went with them; those of the named classes stay.
      expect(app.evaluate("StaticTracing::MethodTracing.probes.size")).to be < 100
      expect(app.evaluate("StaticTracing::MethodTracing.probes(WithProvider).map(&:label)"))
        .to eq(["WithProvider#index"])
    end

    it "traces anonymous subclasses given a provider, and warns once per parent for those without one" do
      app = ruby_repl(parents)
      app.evaluate("StaticTracing.enable!")
      app.evaluate("3.times { Class.new(Base) { def show; end }.new.show }")
      sub = "Class.new(WithProvider) { def show = :shown }"
      expect(app.evaluate("klass = #{sub}; [klass.new.show, klass.ancestors.first.inspect]"))
        .to eq([:shown, "StaticTracing::MethodTracing::Wrappers(#{app.evaluate("klass.inspect")}, latency)"])
      expect(app.evaluate("StaticTracing.providers[:run_time].tracepoints.keys")).to match_array(%i[index show])

      warnings = app.output.lines.grep(/not tracing anonymous/)
      expect(warnings.size).to eq(1), app.output
      expect(warnings.first).to include("subclasses of Base")
    end

    it "keeps a traced class's state off its instance variables, and out of a copy of it" do
      app = ruby_repl(<<~RUBY)
        class Traced
          include StaticTracing::LatencyTracer
          def index = :index
        end
      RUBY
      expect(app.evaluate("Traced.instance_variables")).to eq([])
      app.evaluate("StaticTracing.enable!")
      copy = "Traced.dup"
      expect(app.evaluate("copy = #{copy}; [copy.new.index, StaticTracing::MethodTracing.probes(copy)]"))
        .to eq([:index, []])
    end
  end

  describe "a frozen traced class", :subprocess do
    let(:setup) do
      <<~RUBY
        class FrozenOne
          include StaticTracing::LatencyTracer
          def index = :frozen
        end
        FrozenOne.freeze
        class Thawed
          include StaticTracing::LatencyTracer
          def index = :thawed
        end
        def views
          state = JSON.parse(File.read(StaticTracing::State.path))
          { enabled: StaticTracing.enabled?, published: state["enabled"],
            wrapped: StaticTracing::MethodTracing.probes.select(&:installed?).map(&:label),
            loaded: StaticTracing.providers.select(&:loaded?).map(&:name).sort,
            calls: [FrozenOne.new.index, Thawed.new.index] }
        end
      RUBY
    end

    def expect_traced_but_frozen_one(views)
      expect(views).to eq(enabled: true, published: true, wrapped: ["Thawed#index"],
                          loaded: %i[frozen_one thawed], calls: %i[frozen thawed])
    end

    it "is skipped with one warning naming it when the mode is set to on; everything else is traced" do
      app = ruby_repl(setup)
      expect(app.evaluate("StaticTracing::Configuration.mode = :on; :set")).to eq(:set)
      expect_traced_but_frozen_one(app.evaluate("views"))
      expect(app.output.lines.grep(/FrozenOne/).size).to eq(1), app.output
      expect(app.output).to match(/not tracing FrozenOne: it is frozen/)
    end

    it "does not stop the toggle signal from turning tracing on and off, and every view agrees" do
      app = ruby_repl(setup)
      Process.kill("TRAP", app.pid)
      eventually("the toggle is applied") { app.evaluate("StaticTracing.enabled?") }
      expect_traced_but_frozen_one(app.evaluate("views"))

      Process.kill("TRAP", app.pid)
      eventually("the second toggle is applied") { !app.evaluate("StaticTracing.enabled?") }
      expect(app.evaluate("views")).to eq(enabled: false, published: false, wrapped: [], loaded: [],
                                          calls: %i[frozen thawed])
    end
  end

  describe "a fork while the toggle signal is being applied", :subprocess do
    # A toggle of many methods takes a while; children forked all along
    # each report what they started with. Before forks waited for the
    # toggle, several percent of them started half-way.
    it "gives every child tracing fully on or fully off" do
      app = ruby_repl(<<~'RUBY')
        20.times do |c|
          klass = Object.const_set("Traced#{c}", Class.new)
          klass.include(StaticTracing::LatencyTracer)
          30.times { |m| klass.define_method("m#{m}") {} }
        end
        def child_views(count)
          reader, writer = IO.pipe
          count.times do
            pid = fork do
              reader.close
              probes = StaticTracing::MethodTracing.probes
              providers = StaticTracing.providers.to_a
              writer.puts([StaticTracing.enabled?, probes.count(&:installed?), providers.count(&:loaded?)].join(" "))
              exit!(0)
            end
            Process.wait(pid)
          end
          writer.close
          reader.read.lines.map(&:split).tally
        ensure
          reader.close unless reader.closed?
        end
      RUBY
      signaller = Thread.new do
        loop do
          Process.kill("TRAP", app.pid)
          sleep 0.003
        end
      rescue Errno::ESRCH
        nil
      end
      views = app.evaluate("child_views(300)", timeout: 120)
      signaller.kill.join

      expect(views.values.sum).to eq(300)
      expect(views.keys).to all(satisfy { |view| [%w[true 600 20], %w[false 0 0]].include?(view) }), views.inspect
      expect(app.evaluate("StaticTracing::SignalToggle.received")).to be > 2
    end
  end

  describe "unregistering the provider of traced methods" do
    def probes_of(klass)
      StaticTracing::MethodTracing.probes(klass)
    end

    let(:klass) do
      stub_const("OrphanedController", Class.new do
        def index = :index
        def show = :show
      end)
      OrphanedController.include(StaticTracing::LatencyTracer)
      OrphanedController
    end

    after { StaticTracing.disable! }

    it "unwraps and forgets its methods; registering the name again traces them all again" do
      klass
      StaticTracing.enable!
      expect(klass.ancestors.first).to be_a(StaticTracing::MethodTracing::Wrappers)

      StaticTracing.providers[:orphaned_controller].unregister
      expect(probes_of(klass)).to be_empty
      expect(klass.instance_method(:index).owner).to eq(klass)

      again = StaticTracing::Provider.register(:orphaned_controller)
      expect(again.tracepoints.keys).to match_array(%i[index show])
      expect(probes_of(klass).map(&:tracepoint)).to match_array(again.tracepoints.values)
      expect(probes_of(klass)).to all(be_installed)
      expect(klass.new.index).to eq(:index)
    end

    it "treats methods defined later the same as the ones already there" do
      klass
      StaticTracing.providers[:orphaned_controller].unregister
      klass.define_method(:create) { :create }
      expect(StaticTracing.providers[:orphaned_controller].tracepoints.keys).to match_array(%i[index show create])
      expect(probes_of(klass).map(&:method_name)).to match_array(%i[index show create])
    end
  end
end
