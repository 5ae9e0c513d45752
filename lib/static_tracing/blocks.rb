# frozen_string_literal: true

module StaticTracing
  # Probes around blocks and single methods: StaticTracing.latency and
  # StaticTracing.tracepoint. Each call site's tracepoint is declared on its
  # first call and then found again without allocating.
  module Blocks
    # Stands for "no type given" in StaticTracing.tracepoint's optional arguments.
    NONE = Object.new.freeze

    # The tracepoints of StaticTracing.tracepoint call sites, found by
    # provider, name, then each of the six types given (NONE for none), in
    # nested identity hashes: a lookup is eight Hash#[] and no method call,
    # and a call with other types than the declaration's misses and gets
    # the redeclaration error.
    CUSTOM = {} # rubocop:disable Style/MutableConstant -- a registry, filled under STATE_LOCK
    # Read on an instance of any class, BasicObject included.
    KIND_OF = Kernel.instance_method(:kind_of?)
    CLASS_OF = Kernel.instance_method(:class)
    # How often, at most, block mistakes republish the state file.
    PUBLISH_INTERVAL_NS = 1_000_000_000

    @latency = Hash.new { |hash, provider| hash[provider] = {} }
    # Whether latency blocks are traced now: tracing on, attach mode or a
    # recording. One flag their path reads, kept by #tracing_changed.
    @traced = false
    @checked = {}
    @errors = 0
    @warned = {}.compare_by_identity
    @published_at = nil

    class << self
      # Mistakes of StaticTracing.tracepoint blocks made while a tracer was
      # attached (see there), since the process started: published in the
      # state file as "block_errors", for `static-tracing list`.
      attr_reader :errors

      # A StaticTracing.tracepoint block failed (raised, or returned values
      # its tracepoint refused) while a tracer was attached: counted, said
      # once per tracepoint, never raised. Returns nil, what the call returns.
      def mistake(tracepoint, error)
        first = STATE_LOCK.synchronize do
          @errors += 1
          !@warned.key?(tracepoint) && (@warned[tracepoint] = true)
        end
        if first
          warn("static_tracing: the block computing the values of tracepoint #{tracepoint.provider.name}:" \
               "#{tracepoint.name} failed while traced, so it fired nothing: #{error.class}: " \
               "#{error.message} (not raised; counted in block_errors, said once)")
        end
        publish_errors
        nil
      end

      # What Tracepoint#fire_if_enabled does when it runs its block (the
      # native method does the rest: it runs nothing while the probe is
      # unwanted, once its block has been checked): the values the block
      # returns fired, or checked only when +wanted+ is false; a mistake
      # raised when unwanted, counted and said when wanted (see
      # StaticTracing.tracepoint). Returns the values when wanted, else nil.
      def fire_from_block(tracepoint, wanted)
        result = yield
        if tracepoint.types.empty?
          tracepoint.fire
        elsif result.is_a?(Array)
          tracepoint.fire(*result)
        else
          tracepoint.fire(result)
        end
        wanted ? result : nil
      rescue StandardError => e
        raise unless wanted

        mistake(tracepoint, e)
      end

      # Called when tracing is switched, attach mode set or a recording
      # started or stopped.
      def tracing_changed
        @traced = Switch.enabled? || Switch.attach_mode? || Recorder.recording?
      end

      # Checks the names of a latency block while tracing is off, when its
      # probe is not declared, so that a bad name fails at once rather than
      # when tracing is turned on. Once per call site, then a lookup.
      def check_latency_names(provider, name)
        return if @checked[provider]&.key?(name)

        Names.string(:provider, provider) if provider
        Names.string(:probe, name)
        STATE_LOCK.synchronize { (@checked[provider] ||= {})[name] = true }
      end

      def latency_tracepoint(provider, name)
        @latency[provider][name] ||
          STATE_LOCK.synchronize { @latency[provider][name] ||= Tracepoint.new(provider, name, Integer, latency: 0) }
      end

      # Declares a StaticTracing.tracepoint call site's tracepoint and
      # files it in CUSTOM.
      def declare_custom(provider, name, *given)
        types = given.take_while { |type| !NONE.equal?(type) }
        STATE_LOCK.synchronize do
          tracepoint = Tracepoint.new(provider, name, *types)
          root = (CUSTOM[provider] ||= {})[name] ||= {}.compare_by_identity
          leaf = given.first(5).reduce(root) { |node, type| node[type] ||= {}.compare_by_identity }
          leaf[given.last] = tracepoint
        end
      end

      # The provider name of code running with +receiver+ as self (a
      # BasicObject has neither is_a? nor class of its own).
      def provider_of(receiver)
        owner = KIND_OF.bind_call(receiver, Module) ? receiver : CLASS_OF.bind_call(receiver)
        MethodTracing.provider_name_for(owner) or
          raise ArgumentError, "cannot name a provider after #{owner.inspect}: give one with provider:"
      end

      # The tracepoint of a latency block, or nil when it is to run untraced:
      # tracing off and nothing recording (its names still checked), or a
      # non-main Ractor, where tracing state cannot be read (Ractor::Error)
      # and nothing is traced.
      # Yields for the block's receiver when there is no provider.
      # The lookups that find a call site's answer are made here, rather
      # than by a call to the method that makes it the first time: this
      # runs on every block's call.
      def latency_block_tracepoint(provider, name)
        unless @traced
          check_latency_names(provider, name) unless @checked[provider]&.key?(name)
          return nil
        end

        provider ||= provider_of(yield)
        @latency[provider][name] || latency_tracepoint(provider, name)
      rescue Ractor::Error
        nil
      end

      private

      # The count reaches the state file at once the first time, then at
      # most every PUBLISH_INTERVAL_NS: a request that fails a block does
      # not write a file each time.
      def publish_errors
        now = StaticTracing.nsec
        return if @published_at && now - @published_at < PUBLISH_INTERVAL_NS

        @published_at = now
        State.publish
      end
    end
  end

  class << self
    # Latency, in nanoseconds, as arg0 of a probe:
    #
    #   StaticTracing.latency(name: :load_users) { User.all.to_a }  # a block; provider: the caller's class
    #   StaticTracing.latency(name: :load_users, provider: :db) { ... }
    #   StaticTracing.latency(:my_func)                # in a class body: wraps that method
    #   StaticTracing.latency(MyClass, :my_func, provider: :x)       # anywhere
    #
    # The block form runs the block exactly once and returns its value; the
    # probe fires even when the block raises. Without provider: it finds the
    # caller's class through the block's binding, which costs an allocation
    # per call while tracing is on; with provider: it allocates nothing.
    def latency(target = nil, method_name = nil, name: nil, provider: nil, &block)
      return trace_method_latency(target, method_name, provider) if target
      # block_given? rather than the block itself: reading the block
      # parameter would make a Proc of it on every call.
      unless name && block_given?
        raise ArgumentError, "StaticTracing.latency needs name: and a block, or a method to trace"
      end

      # The block parameter is read only inside this block, only when there is
      # no provider: reading it makes a Proc of the block.
      tracepoint = Blocks.latency_block_tracepoint(provider, name) { block.binding.receiver } or return yield
      # Passing the block on makes no Proc of it.
      tracepoint.measure(&block)
    end

    # The probe StaticTracing.latency(name:, provider:) fires, declared now,
    # to hold in a constant where the block is hot: +measure+ times a block
    # for the cost of a call and a yield, where StaticTracing.latency finds
    # its probe on every call (docs/api.md).
    #
    #   LOAD_USERS = StaticTracing.latency_probe(:load_users, provider: :db)
    #   LOAD_USERS.measure { User.all.to_a }
    #
    # Without +provider+, the class or module whose body calls it names it.
    def latency_probe(name, provider: nil)
      Blocks.latency_tracepoint(provider || Blocks.provider_of(Native.caller_self(1)), name)
    end

    # A probe whose arguments are computed only while a tracer is attached:
    #
    #   StaticTracing.tracepoint(:my_provider, :my_probe, Float, String) do
    #     [compute_a_float, describe_something]
    #   end
    #
    # Declared on first call, with up to six types. While a tracer is
    # attached the block runs; what it returns (an Array of the values, or
    # the value itself for a one-argument probe) is checked against the
    # types, fired, and returned. Returns nil when no tracer is attached.
    #
    # The rule for mistakes (a block that raises, or returns a wrong count,
    # type or value), so that they show in development and tests and never
    # break a request someone traces in production:
    #
    # - The first call of each tracepoint made with no tracer attached runs
    #   the block once and checks its values without firing: a mistake
    #   raises there, to the caller, as any code run for the first time
    #   would. Later unattached calls do not run the block.
    # - While a tracer is attached a mistake never raises: the call returns
    #   nil, the mistake is counted (Blocks.errors, "block_errors" in the
    #   state file, shown by `static-tracing list`) and warned once per
    #   tracepoint. Only StandardError is caught; break, throw and
    #   non-standard exceptions go through as from any block.
    #
    # The call site finds its tracepoint in nested identity hashes; the rules
    # above are Tracepoint#fire_if_enabled's, which a tracepoint held in a
    # constant offers for less (docs/api.md). Flat on purpose: this is
    # every block probe's path.
    # rubocop:disable Metrics/CyclomaticComplexity, Metrics/PerceivedComplexity
    def tracepoint(provider, name, type1 = Blocks::NONE, type2 = Blocks::NONE, type3 = Blocks::NONE, # rubocop:disable Metrics/ParameterLists
                   type4 = Blocks::NONE, type5 = Blocks::NONE, type6 = Blocks::NONE, &)
      raise ArgumentError, "StaticTracing.tracepoint needs a block computing the values to fire" unless block_given?

      tracepoint = Blocks::CUSTOM[provider]&.[](name)&.[](type1)&.[](type2)&.[](type3)&.[](type4)&.[](type5)
                                               &.[](type6) ||
                   Blocks.declare_custom(provider, name, type1, type2, type3, type4, type5, type6)
      tracepoint.fire_if_enabled(&)
    end
    # rubocop:enable Metrics/CyclomaticComplexity, Metrics/PerceivedComplexity

    private

    def trace_method_latency(target, method_name, provider)
      in_class_body = method_name.nil?
      owner, method_name = in_class_body ? [Native.caller_self(2), target] : [target, method_name]
      check_latency_method(owner, method_name, in_class_body)
      MethodTracing.trace(owner, kind: LatencyTracer::KIND, provider:, only: [method_name.to_sym], inherited: false)
      nil
    end

    # A method named here must be one that can be traced: the rules that
    # quietly leave operators alone in a traced class would leave the
    # caller wondering why no probe appears.
    def check_latency_method(owner, method_name, in_class_body)
      unless method_name.is_a?(Symbol) || method_name.is_a?(String)
        raise ArgumentError, "StaticTracing.latency: method name must be a Symbol or String, got #{method_name.inspect}"
      end
      raise ArgumentError, latency_target_problem(owner, method_name.to_sym, in_class_body) unless owner.is_a?(Module)

      probe = MethodTracing.probe_name_for(method_name) or
        raise ArgumentError, "cannot trace #{owner.name || owner.inspect}##{method_name}: operator methods, and " \
                             "methods not named like identifiers, have no probe name"
      Names.string(:probe, probe)
    end

    def latency_target_problem(owner, method_name, in_class_body)
      if in_class_body
        "StaticTracing.latency(#{method_name.inspect}) goes in a class body (here self is an instance of " \
          "#{owner.class}); elsewhere use StaticTracing.latency(SomeClass, #{method_name.inspect})"
      else
        "StaticTracing.latency(target, #{method_name.inspect}): target must be a Class or Module, got #{owner.inspect}"
      end
    end
  end
end
