# frozen_string_literal: true

require "monitor"
require_relative "method_wrapper"
require_relative "method_tracing/traced_class"
require_relative "method_tracing/naming"
require_relative "method_tracing/templates"
require_relative "method_tracing/class_hooks"
require_relative "method_tracing/attach_mode"

module StaticTracing
  # Method tracepoints: a Tracepoint fired by a wrapper around one method.
  #
  # A class (or module) gets *rules* (from `include LatencyTracer`,
  # `include StackTracer`, `StaticTracing.latency(:name)`, ...). Each method
  # a rule covers is declared as a probe when it is defined, or at once if
  # it already is. Its wrapper, in a module prepended to the class, exists
  # only while tracing is on (see Switch), or in attach mode while a tracer
  # is attached to its probe (see Watcher): otherwise nothing stands between
  # callers and the method.
  module MethodTracing
    @lock = StaticTracing::STATE_LOCK
    # Every traced class, weakly: class => TracedClass.
    @classes = ObjectSpace::WeakMap.new
    # Provider name => the classes (weakly) whose probes went with that
    # provider when it was unregistered: registering the name again
    # declares them anew.
    @orphaned = {}

    class << self
      # Traces the methods of +owner+ a new rule covers: the ones defined
      # already, and the ones defined later. +provider+ nil means the
      # class's name in snake case. +inherited+ extends the rule to subclasses.
      def trace(owner, kind:, provider: nil, only: nil, inherited: true)
        raise ArgumentError, "unknown tracer kind #{kind.inspect}" unless TEMPLATES.key?(kind)

        provider = Names.string(:provider, provider) if provider
        rule = Rule.new(owner:, kind:, provider:, only: only&.map(&:to_sym), inherited:)
        @lock.synchronize do
          state_for(owner).rules << rule
          install_hooks(owner)
          Switch.batch do
            defined_methods(owner).each { |name| declare(owner, name, rule) if rule.covers?(owner, name) }
          end
        end
        rule
      end

      # The probes declared for +owner+ (all classes when nil).
      def probes(owner = nil)
        @lock.synchronize do
          states = owner ? [state_of(owner)].compact : @classes.values
          states.flat_map { |state| state.probes.values }
        end
      end

      # The method probes fired through +tracepoint+.
      def probes_of(tracepoint)
        probes.select { |probe| probe.tracepoint.equal?(tracepoint) }
      end

      def arm_all
        @lock.synchronize { probes.each { |probe| want(probe, :switch) } }
      end

      def disarm_all
        @lock.synchronize { probes.each { |probe| unwant(probe, :switch) } }
      end

      # Wraps the method of +probe+ and keeps it wrapped (through
      # redefinitions) until every reason to want it is gone. Only an
      # explicit want (Tracepoint#load) raises when the wrapper cannot be
      # made: for the others, each probe is armed on its own, and one that
      # cannot be (a frozen class, say) is reported once and left out.
      def want(probe, reason)
        @lock.synchronize do
          probe.wanted_by << reason unless probe.wanted_by.include?(reason)
          install(probe)
        rescue StandardError, ScriptError => e
          raise if reason == :explicit

          warn_once([:arm, probe.owner.object_id, probe.method_name],
                    "static_tracing: not tracing #{probe.label}: #{e.class}: #{e.message}")
        end
      end

      def unwant(probe, reason)
        @lock.synchronize do
          remove(probe) if probe.wanted_by.delete(reason) && !probe.wanted?
        end
      end

      # Puts the wrapper of +probe+ in place (again, if the method changed).
      # False when it cannot be: the method is gone, or the class was frozen
      # before its wrappers module could be prepended (said once).
      def install(probe)
        @lock.synchronize do
          visibility = visibility_of(probe.owner, probe.method_name)
          unless visibility
            remove(probe)
            return false
          end
          wrappers = wrappers_for(probe.owner, probe.kind) or return false
          define_wrapper(wrappers, probe, original_method(probe.owner, probe.method_name))
          wrappers.send(visibility, probe.method_name)
          probe.installed = true
        end
      end

      # Takes the wrapper of +probe+ away.
      def remove(probe)
        @lock.synchronize do
          wrappers = state_of(probe.owner)&.wrappers&.[](probe.kind)
          wrappers.remove_wrapper(probe.method_name) if wrappers&.defines?(probe.method_name)
          probe.installed = false
        end
      end

      # Called as +provider+ is unregistered: the probes it held are
      # unwrapped and forgotten, and declared again, into a new provider,
      # if the name is registered again (as a method defined later would).
      def provider_unregistered(provider)
        @lock.synchronize do
          @classes.each_value do |state|
            state.probes.delete_if do |_, probe|
              next false unless probe.tracepoint.provider.equal?(provider)

              Watcher.forget(probe.tracepoint)
              remove(probe)
              (@orphaned[provider.name] ||= ObjectSpace::WeakMap.new)[state.owner] = true
            end
          end
          forget_claims(provider.name.to_s)
        end
      end

      # Forgets the methods whose provider was unregistered: registering its
      # name again no longer traces them again. For test suites that
      # unregister every provider between examples, whose classes may not
      # have been collected yet.
      def forget_unregistered
        @lock.synchronize { @orphaned.clear }
      end

      # Called when a provider named +name+ is created.
      def provider_registered(name)
        return if @orphaned.empty?

        @lock.synchronize do
          classes = @orphaned.delete(name) or return
          Switch.batch { classes.each_key { |klass| declare_all(klass) } }
        end
      end

      # Hooks, called by the modules prepended to traced classes' singletons.

      # A hook must never break the class being defined: every failure in
      # one is reported once and the method is left untraced.

      def method_defined(klass, name)
        @lock.synchronize do
          each_rule(klass, name) { |rule| declare(klass, name, rule) }
          reinstall(klass, name)
        end
      rescue StandardError, ScriptError => e
        warn_once([:added, klass.object_id, name],
                  "static_tracing: not tracing #{method_label(klass, name)}: #{e.class}: #{e.message}")
      end

      def method_gone(klass, name)
        @lock.synchronize { probes_named(klass, name).each { |probe| remove(probe) } }
      rescue StandardError => e
        warn_once([:gone, klass.object_id, name],
                  "static_tracing: could not unwrap #{method_label(klass, name)}: #{e.message}")
      end

      def visibility_changed(klass, names)
        names = names.flatten.map { |name| name.to_sym if name.is_a?(Symbol) || name.is_a?(String) }
        @lock.synchronize { names.each { |name| reinstall(klass, name) if name } }
      rescue StandardError, ScriptError => e
        warn_once([:visibility, klass.object_id],
                  "static_tracing: could not follow a visibility change in #{klass}: #{e.message}")
      end

      private

      # What tracing knows about +klass+, or nil. (A class copied with
      # #dup or #clone carries its original's state: that is not its own.)
      def state_of(klass)
        state = Native.class_state(klass)
        state if state.is_a?(TracedClass) && state.owner.equal?(klass)
      end

      # FrozenError for a frozen class that has none yet.
      def state_for(klass)
        state_of(klass) || TracedClass.new(klass).tap do |state|
          Native.set_class_state(klass, state)
          @classes[klass] = state
        end
      end

      def declare(klass, name, rule)
        probe_name = probe_name_for(name, klass) or return
        return if declared?(klass, name, rule.kind)

        provider = rule.provider || default_provider(klass, rule) or return
        probe_name = claim_probe_name(provider, probe_name, klass, name)
        tracepoint = StaticTracing::Provider.register(provider).add_tracepoint(probe_name, *TYPES.fetch(rule.kind),
                                                                               **ROLES.fetch(rule.kind))
        arm_new(state_for(klass).probes[[name, rule.kind]] = MethodProbe.new(klass, name, rule.kind, tracepoint))
      rescue ArgumentError, FrozenError, StaticTracing::Error => e
        warn_once([klass.object_id, name, rule.kind],
                  "static_tracing: not tracing #{method_label(klass, name)}: #{e.message}")
      end

      def declared?(klass, name, kind)
        state = state_of(klass) or return false
        state.probes.key?([name, kind])
      end

      # Declares every method of +klass+ that a rule covers.
      def declare_all(klass)
        defined_methods(klass).each { |name| each_rule(klass, name) { |rule| declare(klass, name, rule) } }
      end

      # The method changed (redefined, visibility, back after a removal):
      # a wanted wrapper is made again to fit it.
      def reinstall(klass, name)
        probes_named(klass, name).each { |probe| install(probe) if probe.wanted? }
      end

      def probes_named(klass, name)
        state_of(klass)&.probes_named(name) || []
      end

      def each_rule(klass, name, &)
        rules = klass.ancestors.flat_map { |ancestor| state_of(ancestor)&.rules || [] }
        rules.select { |rule| rule.covers?(klass, name) }.each(&)
      end

      def install_hooks(owner)
        singleton = owner.singleton_class
        singleton.prepend(ClassHooks) unless singleton <= ClassHooks
        singleton.prepend(VisibilityHooks) unless singleton <= VisibilityHooks
        owner.prepend(SingletonHooks) if owner.singleton_class? && !(owner <= SingletonHooks)
      end

      # The wrappers module of +owner+ for +kind+, prepended on first use;
      # nil, said once, when the class is frozen before that.
      def wrappers_for(owner, kind)
        state = state_for(owner)
        state.wrappers[kind] ||= Wrappers.new(owner, kind).tap { |wrappers| owner.prepend(wrappers) }
      rescue FrozenError
        warn_once([:frozen, owner.object_id],
                  "static_tracing: not tracing #{owner.name || owner.inspect}: it is frozen, so no wrapper can be " \
                  "put in front of its methods (trace it before it is frozen); everything else is traced")
        nil
      end

      def defined_methods(owner)
        owner.public_instance_methods(false) + owner.protected_instance_methods(false) +
          owner.private_instance_methods(false)
      end

      # The visibility of +name+ as +klass+ itself defines it, or nil.
      def visibility_of(klass, name)
        if klass.public_method_defined?(name, false) then :public
        elsif klass.protected_method_defined?(name, false) then :protected
        elsif klass.private_method_defined?(name, false) then :private
        end
      end

      # A C method (no source) gets a wrapper written in C: see
      # MethodWrapper.define_c for why.
      #
      # A wrapper put back for the same method (a tracer attaching again, in
      # attach mode; tracing switched on again) is the one compiled for it
      # last time, unless the method's parameters changed: compiling is the
      # slow part of wrapping, and on Ruby 3.1 and 3.2 each wrapper compiled
      # for a method with keywords left its keyword call sites' data
      # allocated for good once removed (32 bytes each; fixed in Ruby 3.3,
      # ruby/ruby#8556), which thousands of attaches added up.
      def define_wrapper(wrappers, probe, original)
        name = probe.method_name
        if original.source_location.nil?
          return MethodWrapper.define_c(wrappers, original, probe.tracepoint, probe.kind, probe.label)
        end

        values = { tracepoint: wrappers.constant(name, :tracepoint, probe.tracepoint) }
        values[:label] = wrappers.constant(name, :label, probe.label.freeze) if probe.kind == :stack
        source = [original.parameters, values]
        compiled = wrappers.compiled(name, source)
        return MethodWrapper.define_again(wrappers, name, compiled) if compiled

        MethodWrapper.define(wrappers, name, original.parameters, TEMPLATES.fetch(probe.kind), values)
        wrappers.compiled!(name, source)
      end

      # The method as the class defines it, behind any wrappers.
      def original_method(klass, name)
        method = klass.instance_method(name)
        method = method.super_method while method.owner.is_a?(Wrappers)
        method
      end

      def warn_once(key, message)
        StaticTracing.warn_once(key, message)
      end
    end
  end
end
