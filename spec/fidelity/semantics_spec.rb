# frozen_string_literal: true

# Seen from Ruby, a traced method is its untraced self, in every state
# tracing puts it in: tracing off (no wrapper), on with nothing attached
# (the wrapper in place), armed (the wrapper fires: the recorder here, the
# real bpftrace below), and off again. __method__, block_given?,
# binding.local_variables, return from procs and blocks, method_missing and
# respond_to_missing? are the same, whatever the method's parameters and
# whether its wrapper is Ruby or C; Method#source_location, super_method
# and backtraces' frames differ exactly as docs/limits.md says, and the
# examples assert that. The subjects and what is observed of them:
# spec/fidelity/fixtures/semantics.rb.
RSpec.describe "Traced methods' Ruby semantics" do
  after do
    StaticTracing::Recorder.stop
    StaticTracing.disable!
  end

  def fixture = File.expand_path("fixtures/semantics.rb", __dir__)
  def wrapper_file = StaticTracing::MethodWrapper::SOURCE_FILE

  def tracer_of(kind)
    { latency: "StaticTracing::LatencyTracer", stack: "StaticTracing::StackTracer" }.fetch(kind)
  end

  # Ruby that defines the subjects in module +name+, traced by +kind+'s tracer.
  def subjects_source(name, kind)
    <<~RUBY
      FidelityNamespace = Object.const_get(#{name.dump})
      FidelityNamespace.const_set(:Tracer, #{tracer_of(kind)})
      FidelityNamespace.module_eval(File.read(#{fixture.dump}), #{fixture.dump}, 1)
    RUBY
  end

  def load_subjects(kind)
    namespace = stub_const("FidelitySemantics#{kind.capitalize}", Module.new)
    namespace.const_set(:Tracer, Object.const_get(tracer_of(kind)))
    namespace.module_eval(File.read(fixture), fixture, 1)
    namespace
  end

  # The traced method each case of Observe.backtraces raises in.
  def raised_in(name)
    { raised: "fail_here", raised_in_block: "fail_in_block", argument_error: "two",
      argument_error_in_method: "method_name_reserved_keyword", missing: "method_missing",
      c_raised: "fetch", c_raised_in_block: "each_pair", c_argument_error: "fetch",
      c_missing: "method_missing" }.fetch(name)
  end

  # What a traced method shows of +behaviour+ (a key of Observe.all) in
  # +state+, given what it showed untraced: the same, but for what
  # docs/limits.md says differs.
  def expected(behaviour, untraced, kind:, state:)
    return untraced if state == :off_again

    case behaviour
    when :method_name, :local_variables then untraced.merge(c: traced_frame_readers(behaviour, untraced[:c]))
    when :source_location then wrapper_source_locations(untraced)
    when :super_method then wrapper_first(untraced)
    when :backtrace_locations
      untraced.to_h { |name, (error, frames)| [name, [error, traced_frames(name, frames, kind:, state:)]] }
    else untraced
    end
  end

  # What the traced C methods that read their caller's frame show of
  # +behaviour+. Kernel#__method__ reads the frame before its own: the C
  # wrapper's. Kernel#binding refuses a C caller since Ruby 3.2, and the
  # wrapper is one: the RuntimeError Ruby raises, whose message says why.
  def traced_frame_readers(behaviour, untraced)
    return [untraced.first, :caller_method_name] if behaviour == :method_name
    return untraced if Gem::Version.new(RUBY_VERSION) < Gem::Version.new("3.2")

    local, _, local_variables = untraced
    [local, [:raised, RuntimeError, a_string_matching(/binding/i).and(a_string_matching(/caller/i))], local_variables]
  end

  # The wrapper's [file, line] for Ruby methods, C methods' nil as untraced.
  def wrapper_source_locations(untraced)
    wrapper = [wrapper_file, 1]
    { ruby: untraced[:ruby].map { [wrapper, wrapper] }, singleton: wrapper, c: untraced[:c] }
  end

  # The wrapper, then the untraced super_method chain.
  def wrapper_first(untraced)
    untraced.to_h do |language, chains|
      wrapper_location = language == :ruby ? [wrapper_file, 1] : nil
      [language, chains.map { |chain| [["wrappers", chain.first[1], wrapper_location], *chain] }]
    end
  end

  # The frames of +name+'s exception traced, from +frames+ untraced.
  def traced_frames(name, frames, kind:, state:)
    method = raised_in(name)
    own = frames.rindex { |(_, _, label)| label == method }
    if name.start_with?("c_")
      # The C wrapper's frame, under the C method's own (if any), at its caller's line.
      at = own ? own + 1 : 0
      frames.dup.insert(at, [frames[at][0], frames[at][1], method])
    elsif name == :argument_error
      # Raised by the wrapper, which checks the arguments: its frame instead of the method's.
      [[wrapper_file, 1, method], *frames.drop(1)]
    elsif name == :argument_error_in_method || (kind == :latency && state == :armed)
      # The wrapper's frame under the method's own: a timed call's, or one
      # taking (...) (keywords that cannot be locals), whose method checks
      # the arguments before the wrapper's frame is handed over to it.
      frames.dup.insert(own + 1, [wrapper_file, kind_of(Integer), method])
    else
      frames
    end
  end

  def tracepoints
    StaticTracing.providers.to_a.select { |provider| provider.name.to_s.start_with?("fidelity_semantics") }
                 .flat_map { |provider| provider.tracepoints.values }
  end

  # Observes +behaviour+ of +kind+'s subjects untraced, then in each state
  # tracing can put them in, and expects each time what #expected says.
  def compare(kind, behaviour)
    namespace = load_subjects(kind)
    observe = -> { namespace::Observe.all.fetch(behaviour) }
    expect(namespace::Subject.ancestors.grep(StaticTracing::MethodTracing::Wrappers)).to be_empty
    untraced = observe.call
    wrap(namespace)
    expect(observe.call).to match(expected(behaviour, untraced, kind:, state: :wrapped)), "nothing attached"
    arm
    expect(observe.call).to match(expected(behaviour, untraced, kind:, state: :armed)), "armed"
    StaticTracing::Recorder.stop
    StaticTracing.disable!
    expect(observe.call).to eq(expected(behaviour, untraced, kind:, state: :off_again)), "switched off again"
  end

  # Tracing on, nothing attached: the wrappers in place.
  def wrap(namespace)
    StaticTracing.enable!
    expect(namespace::Subject.instance_method(:two).owner).to be_a(StaticTracing::MethodTracing::Wrappers)
    expect(tracepoints).not_to be_empty
  end

  # The recorder arms every probe, as an attached tracer does: the wrappers fire.
  def arm
    StaticTracing::Recorder.start(flight: true, size: "64K")
    expect(tracepoints).to all(be_enabled)
  end

  %i[latency stack].each do |kind|
    describe "traced by #{kind == :latency ? "LatencyTracer" : "StackTracer"}" do
      it "keep __method__: their own name, whatever their parameters, aliased, from define_method, as class " \
         "methods; C methods enumerate as themselves; Kernel#__method__ traced reads its wrapper's (limits.md)" do
        compare(kind, :method_name)
      end

      it "keep block_given? and yield, with a block and without; C methods see the block they are given, " \
         "and Kernel#block_given? traced reads its caller's" do
        compare(kind, :block_given)
      end

      it "keep binding.local_variables and local_variables their own, with none of the wrapper's; " \
         "Kernel#binding and #local_variables traced read their caller's" do
        compare(kind, :local_variables)
      end

      it "show the wrapper's Method#source_location and UnboundMethod#source_location while wrapped, " \
         "C methods nil as untraced, and their own again once unwrapped (limits.md)" do
        compare(kind, :source_location)
      end

      it "put the wrapper first in super_method chains, the traced method second, then the untraced chain, " \
         "while wrapped (limits.md)" do
        compare(kind, :super_method)
      end

      it "keep the labels of backtrace_locations; frames are added only where limits.md says: a timed call's " \
         "wrapper, a C method's wrapper, and an argument check in the wrapper" do
        compare(kind, :backtrace_locations)
      end

      it "return from procs and blocks made inside, through traced C methods too; break and next as untraced; " \
         "a proc that escaped raises the same LocalJumpError" do
        compare(kind, :proc_return)
      end

      it "keep method_missing and respond_to_missing?: dispatch, keywords through a ruby2_keywords " \
         "delegator, respond_to?, method objects, conversions, NameError and NoMethodError as untraced" do
        compare(kind, :method_missing)
      end
    end
  end

  it "give a method with a keyword that cannot be a local a wrapper taking (...), whose parameters and arity " \
     "say so while wrapped (limits.md)" do
    klass = stub_const("FidelityKeywords", Class.new do
      def tag(name, class: nil) = [name, binding.local_variable_get(:class)]
    end)
    StaticTracing.latency(klass, :tag)
    untraced = klass.instance_method(:tag)
    StaticTracing.enable!
    traced = klass.instance_method(:tag)
    expect(traced.owner).to be_a(StaticTracing::MethodTracing::Wrappers)
    expect([untraced.parameters, untraced.arity]).to eq([[%i[req name], %i[key class]], -2])
    expect([traced.parameters, traced.arity]).to eq([[%i[rest *], %i[keyrest **], %i[block &]], -1])
    expect(klass.new.tag(:p, class: "x")).to eq([:p, "x"])
  end

  describe "with bpftrace attached", :e2e do
    # A core class's C method, traced in the child: what it shows, as
    # Observe.all's behaviours.
    def core_observations
      "{ backtrace: FidelityNamespace::Observe.locations { [1].fetch(5) }, " \
        "block: [1].fetch(5) { |index| [:default, index] }, " \
        "chain: FidelityNamespace::Observe.chain([].method(:fetch)), " \
        "source_location: Array.instance_method(:fetch).source_location }"
    end

    def observe(app)
      app.evaluate("[FidelityNamespace::Observe.all, #{core_observations}]")
    end

    %i[latency stack].each do |kind|
      it "fire, and keep every behaviour as armed by the recorder, traced by #{kind} tracers, a core " \
         "class's C method (Array#fetch) too" do
        namespace = "FidelitySemantics#{kind.capitalize}"
        app = ruby_repl("#{namespace} = Module.new\n#{subjects_source(namespace, kind)}" \
                        "StaticTracing::MethodTracing.trace(Array, kind: :#{kind}, only: [:fetch], inherited: false)")
        untraced, untraced_core = observe(app)
        expect(untraced_core[:source_location]).to be_nil # a C method here
        app.evaluate("StaticTracing.enable!; nil")
        wrapped = observe(app)
        declared = app.evaluate("StaticTracing.providers.to_a.select { |provider| provider.name.start_with?(" \
                                "'fidelity_semantics') }.sum { |provider| provider.tracepoints.size }")
        array = kind == :latency ? "array" : "array_stack" # Array#fetch's provider
        wait_until_listed(app.pid, "usdt:*:fidelity_semantics_*:*", count: declared)
        wait_until_listed(app.pid, "usdt:*:#{array}:fetch")
        tracer = attach_bpftrace(app.pid, "usdt:*:fidelity_semantics_*:*, usdt:*:#{array}:fetch " \
                                          "{ @hits[probe] = count(); }", timeout: 60)
        attached, attached_core = observe(app)
        hits = tracer.finish.scan(/^@hits\[usdt:.*:(\w+):(\w+)\]: (\d+)$/).to_h { |(p, probe, n)| [[p, probe], n.to_i] }

        { wrapped: wrapped.first, armed: attached }.each do |state, observed|
          untraced.each do |behaviour, seen|
            expect(observed[behaviour]).to match(expected(behaviour, seen, kind:, state:)), "#{state}: #{behaviour}"
          end
        end
        expect(attached_core).to match(
          backtrace: [untraced_core[:backtrace][0], traced_core_frames(untraced_core[:backtrace][1])],
          block: untraced_core[:block],
          chain: [["wrappers", :fetch, nil], *untraced_core[:chain]],
          source_location: nil
        )
        expect(wrapped.last).to eq(attached_core)

        subject = kind == :latency ? "fidelity_semantics_latency_subject" : "fidelity_semantics_stack_subject_stack"
        expect(hits).to include([subject, "name_of"] => 1, [subject, "fail_here"] => 1,
                                [subject, "proc_return_forwarding"] => 2, [subject, "method_missing"] => be_positive,
                                [subject, "respond_to_missing_p"] => be_positive, [array, "fetch"] => be >= 2)
        expect(hits.keys.map(&:first)).to include(a_string_ending_with("table#{"_stack" if kind == :stack}"),
                                                  a_string_ending_with("frames#{"_stack" if kind == :stack}"))
        # A call its wrapper rejects for its arguments never fires.
        expect(hits).not_to include([subject, "two"])
      end
    end

    def traced_core_frames(frames)
      at = frames.rindex { |(_, _, label)| label == "fetch" } + 1
      frames.dup.insert(at, [frames[at][0], frames[at][1], "fetch"])
    end
  end
end
