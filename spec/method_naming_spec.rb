# frozen_string_literal: true

# rubocop:disable Naming/VariableNumber, Naming/AsciiIdentifiers -- these names are what is under test

# How traced methods are named as probes: distinct methods never share one,
# class methods are traced like instance methods, any identifier is traced.
RSpec.describe "Method probe names" do
  around do |example|
    mode = StaticTracing::Configuration.mode
    StaticTracing::Configuration.mode = :on
    example.run
  ensure
    StaticTracing::Configuration.mode = mode
  end

  before { @defined = [] }
  after { @defined.each { |name| Object.send(:remove_const, name) } }

  def define(name, value)
    Object.const_set(name, value)
    @defined << name
    value
  end

  def probes_of(provider)
    StaticTracing::MethodTracing.probes.select { |probe| probe.tracepoint.provider.name == provider }
                                .to_h { |probe| [probe.label, probe.tracepoint.name] }
  end

  it "gives the later of two methods whose names map alike the next free name, warning with both named" do
    define(:NamingBase, Class.new { include StaticTracing::LatencyTracer })
    expect do
      NamingBase.class_eval do
        def valid? = true
        def valid_p = true
        def save! = true
        def save_bang = true
        def name=(_value); end
        def name_set = true
        def name_set_2 = true
      end
    end.to output(
      a_string_including(
        "NamingBase#valid_p and NamingBase#valid? would both fire naming_base:valid_p; " \
        "NamingBase#valid_p fires naming_base:valid_p_2",
        "NamingBase#save_bang and NamingBase#save! would both fire naming_base:save_bang",
        "NamingBase#name_set_2 and NamingBase#name_set would both fire naming_base:name_set_2; " \
        "NamingBase#name_set_2 fires naming_base:name_set_2_2"
      )
    ).to_stderr
    expect(probes_of(:naming_base)).to eq(
      "NamingBase#valid?" => :valid_p, "NamingBase#valid_p" => :valid_p_2,
      "NamingBase#save!" => :save_bang, "NamingBase#save_bang" => :save_bang_2,
      "NamingBase#name=" => :name_set, "NamingBase#name_set" => :name_set_2,
      "NamingBase#name_set_2" => :name_set_2_2
    )
  end

  it "keeps Foo::Bar#index and FooBar#index apart in provider foo_bar, and keeps a name for its method" do
    define(:NamingFooBar, Class.new { include StaticTracing::LatencyTracer })
    define(:Naming, Module.new)
    Naming.const_set(:FooBar, Class.new { include StaticTracing::LatencyTracer })
    expect do
      NamingFooBar.class_eval { def index = 1 }
      Naming::FooBar.class_eval { def index = 2 }
    end.to output(/Naming::FooBar#index and NamingFooBar#index would both fire naming_foo_bar:index/).to_stderr
    expect(probes_of(:naming_foo_bar)).to eq("NamingFooBar#index" => :index, "Naming::FooBar#index" => :index_2)

    # Redefined (or reloaded under the same name), a method keeps its probe, silently.
    expect { Naming::FooBar.class_eval { def index = 3 } }.not_to output.to_stderr
    expect(probes_of(:naming_foo_bar)["Naming::FooBar#index"]).to eq(:index_2)
  end

  it "traces a non-ASCII method name under an escaped probe name" do
    define(:NamingGreeter, Class.new { include StaticTracing::LatencyTracer })
    expect { NamingGreeter.class_eval { def grüßen = :hallo } }.not_to output.to_stderr
    expect(probes_of(:naming_greeter)).to eq("NamingGreeter#grüßen" => :gr_u00fc_u00dfen)
    expect(NamingGreeter.new.grüßen).to eq(:hallo)
    expect(NamingGreeter.instance_method(:grüßen).owner).not_to eq(NamingGreeter)
  end

  describe "class methods" do
    it "traces them as self_<name> in the class's provider, also those defined after the rule" do
      define(:NamingService, Class.new { def self.early = :early })
      StaticTracing.latency(NamingService.singleton_class, :early)
      expect { StaticTracing.latency(NamingService.singleton_class, :later) }.not_to output.to_stderr
      NamingService.define_singleton_method(:later) { :later }
      expect(probes_of(:naming_service)).to eq("NamingService.early" => :self_early,
                                               "NamingService.later" => :self_later)
      expect([NamingService.early, NamingService.later]).to eq(%i[early later])
      expect(NamingService.method(:later).owner).not_to eq(NamingService.singleton_class)

      NamingService.singleton_class.send(:remove_method, :later)
      expect(NamingService.singleton_class.ancestors.first.instance_methods(false)).not_to include(:later)
    end

    it "traces every class method of a class that includes a tracer in class << self, with no warning" do
      define(:NamingReport, Class.new)
      expect do
        NamingReport.class_eval do
          class << self
            include StaticTracing::LatencyTracer
          end
          def self.build = :built
          def self.render = :rendered
        end
      end.not_to output.to_stderr
      expect(probes_of(:naming_report)).to eq("NamingReport.build" => :self_build,
                                              "NamingReport.render" => :self_render)
      expect(NamingReport.build).to eq(:built)
    end
  end
end
# rubocop:enable Naming/VariableNumber, Naming/AsciiIdentifiers
