# frozen_string_literal: true

require "monitor"
require_relative "method_wrapper"

module StaticTracing
  # Method tracepoints: a Tracepoint fired by a wrapper around one method.
  #
  # A class (or module) gets *rules* (from `include LatencyTracer`,
  # `include StackTracer`, `StaticTracing.latency(:name)`, ...). Each method
  # a rule covers is declared as a probe when it is defined, or at once if
  # it already is. Its wrapper, in a module prepended to the class, exists
  # only while tracing is on (see Switch): when it is off, nothing stands
  # between callers and the method.
  module MethodTracing
    # What a rule traces and how.
    Rule = Struct.new(:owner, :kind, :provider, :only, :inherited, keyword_init: true) do
      def covers?(klass, name)
        (klass.equal?(owner) || (inherited && klass < owner)) && (only.nil? || only.include?(name))
      end
    end

    # One traced method: its probe, whether its wrapper is wanted (while
    # tracing is on, or after Tracepoint#load) and whether it is in place.
    class MethodProbe
      attr_reader :owner, :method_name, :kind, :tracepoint
      attr_accessor :wanted_by_switch, :wanted_explicitly, :installed

      def initialize(owner, method_name, kind, tracepoint)
        @owner = owner
        @method_name = method_name
        @kind = kind
        @tracepoint = tracepoint
        @wanted_by_switch = @wanted_explicitly = @installed = false
      end

      def wanted?
        @wanted_by_switch || @wanted_explicitly
      end

      def installed?
        @installed
      end

      def label
        "#{owner.name || owner.inspect}##{method_name}"
      end

      def inspect
        "#<#{self.class} #{label} -> #{tracepoint.provider.name}:#{tracepoint.name}#{" (wrapped)" if installed?}>"
      end
    end

    # The module prepended to a class to hold its wrappers of one kind.
    # Named under StaticTracing::Wrappers (MyController_latency), which
    # shows in `ancestors` and lets folded stacks leave wrapper frames out.
    class Wrappers < Module
      def initialize(owner, kind)
        super()
        @owner = owner
        @kind = kind
        @constants = {}
        StaticTracing::Wrappers.const_set(self.class.constant_name(owner, kind), self)
      end

      # Admin::UsersController, :latency => "Admin_UsersController_latency",
      # with a number added if that is taken (by a reloaded class).
      def self.constant_name(owner, kind)
        base = "#{(owner.name || "Anonymous").gsub("::", "_").delete("^A-Za-z0-9_")}_#{kind}"
        base = "W#{base}" unless base.match?(/\A[A-Z]/)
        names = Enumerator.produce(2) { |n| n + 1 }.lazy.map { |n| "#{base}_#{n}" }
        [base].chain(names).find { |name| !StaticTracing::Wrappers.const_defined?(name, false) }
      end

      # A constant of this module holding +value+ for +method_name+, by name:
      # wrapper code reads it through an inline-cached constant lookup.
      def constant(method_name, role, value)
        name = (@constants[[method_name, role]] ||= "#{role.upcase}_#{@constants.size}")
        remove_const(name) if const_defined?(name, false)
        const_set(name, value)
        name
      end

      def defines?(method_name)
        method_defined?(method_name, false) || private_method_defined?(method_name, false)
      end
    end

    # Wrapper bodies, by kind. %{super} calls the original method with the
    # arguments this call received. When no tracer is attached a wrapper
    # costs the is-enabled check and the return through it, nothing else.
    TEMPLATES = {
      latency: <<~'RUBY',
        return %{super} unless %{tracepoint}.enabled?
        __static_tracing_started = StaticTracing.nsec
        begin
          %{super}
        ensure
          %{tracepoint}.fire(StaticTracing.nsec - __static_tracing_started)
        end
      RUBY
      stack: <<~'RUBY'
        return %{super} unless %{tracepoint}.enabled?
        %{tracepoint}.fire(StaticTracing::Native.folded_stack(%{label}, 1, StaticTracing::StackTracer.max_bytes))
        %{super}
      RUBY
    }.freeze

    # Argument types of each kind's probes.
    TYPES = { latency: [Integer], stack: [String] }.freeze

    OPERATOR = /\A(?![A-Za-z_][A-Za-z0-9_]*[?!=]?\z)/

    @lock = StaticTracing::STATE_LOCK
    @rules = Hash.new { |hash, key| hash[key] = [] }.compare_by_identity
    @probes = {} # [owner, method_name, kind] => MethodProbe
    @wrappers = {} # [owner, kind] => Wrappers
    @warned = {}

    class << self
      # Traces the methods of +owner+ a new rule covers: the ones defined
      # already, and the ones defined later. +provider+ nil means the
      # class's name in snake case. +inherited+ extends the rule to subclasses.
      def trace(owner, kind:, provider: nil, only: nil, inherited: true)
        raise ArgumentError, "unknown tracer kind #{kind.inspect}" unless TEMPLATES.key?(kind)

        provider = Names.string(:provider, provider) if provider
        rule = Rule.new(owner:, kind:, provider:, only: only&.map(&:to_sym), inherited:)
        @lock.synchronize do
          @rules[owner] << rule
          install_hooks(owner)
          Switch.batch do
            defined_methods(owner).each { |name| declare(owner, name, rule) if rule.covers?(owner, name) }
          end
        end
        rule
      end

      # The probes declared for +owner+ (all classes when nil).
      def probes(owner = nil)
        @lock.synchronize { @probes.values.select { |probe| owner.nil? || probe.owner.equal?(owner) } }
      end

      # The method probes fired through +tracepoint+.
      def probes_of(tracepoint)
        @lock.synchronize { @probes.values.select { |probe| probe.tracepoint.equal?(tracepoint) } }
      end

      # The provider name a class's probes get by default: Admin::UsersController => admin_users_controller.
      def provider_name_for(klass)
        name = klass.name or return nil
        name.split("::").map do |part|
          part.gsub(/([A-Z]+)([A-Z][a-z])/, '\1_\2').gsub(/([a-z\d])([A-Z])/, '\1_\2').downcase
        end.join("_")
      end

      # The probe name for a method: ? => _p, ! => _bang, = => _set; nil for operators.
      def probe_name_for(method_name)
        name = method_name.to_s
        return if name.match?(OPERATOR)

        name.sub(/\?\z/, "_p").sub(/!\z/, "_bang").sub(/=\z/, "_set")
      end

      def arm_all
        @lock.synchronize { @probes.each_value { |probe| want(probe, :switch) } }
      end

      def disarm_all
        @lock.synchronize { @probes.each_value { |probe| unwant(probe, :switch) } }
      end

      # Wraps the method of +probe+ and keeps it wrapped (through
      # redefinitions) until every reason to want it is gone.
      def want(probe, reason)
        @lock.synchronize do
          reason == :switch ? probe.wanted_by_switch = true : probe.wanted_explicitly = true
          install(probe)
        end
      end

      def unwant(probe, reason)
        @lock.synchronize do
          reason == :switch ? probe.wanted_by_switch = false : probe.wanted_explicitly = false
          remove(probe) unless probe.wanted?
        end
      end

      # Puts the wrapper of +probe+ in place (again, if the method changed).
      def install(probe)
        @lock.synchronize do
          visibility = visibility_of(probe.owner, probe.method_name)
          unless visibility
            remove(probe)
            return false
          end
          wrappers = wrappers_for(probe.owner, probe.kind)
          values = { tracepoint: wrappers.constant(probe.method_name, :tracepoint, probe.tracepoint) }
          values[:label] = wrappers.constant(probe.method_name, :label, probe.label.freeze) if probe.kind == :stack
          parameters = original_method(probe.owner, probe.method_name).parameters
          MethodWrapper.define(wrappers, probe.method_name, parameters, TEMPLATES.fetch(probe.kind), values)
          wrappers.send(visibility, probe.method_name)
          probe.installed = true
        end
      end

      # Takes the wrapper of +probe+ away.
      def remove(probe)
        @lock.synchronize do
          wrappers = @wrappers[[probe.owner, probe.kind]]
          wrappers.send(:remove_method, probe.method_name) if wrappers&.defines?(probe.method_name)
          probe.installed = false
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
        warn_once([:added, klass, name], "static_tracing: not tracing #{klass}##{name}: #{e.class}: #{e.message}")
      end

      def method_gone(klass, name)
        @lock.synchronize { probes_named(klass, name).each { |probe| remove(probe) } }
      rescue StandardError => e
        warn_once([:gone, klass, name], "static_tracing: could not unwrap #{klass}##{name}: #{e.message}")
      end

      def visibility_changed(klass, names)
        names = names.flatten.map { |name| name.to_sym if name.is_a?(Symbol) || name.is_a?(String) }
        @lock.synchronize { names.each { |name| reinstall(klass, name) if name } }
      rescue StandardError, ScriptError => e
        warn_once([:visibility, klass],
                  "static_tracing: could not follow a visibility change in #{klass}: #{e.message}")
      end

      private

      def declare(klass, name, rule)
        probe_name = probe_name_for(name) or return
        key = [klass, name, rule.kind]
        return if @probes.key?(key)

        provider = rule.provider || default_provider(klass, rule.kind) or return
        tracepoint = StaticTracing::Provider.register(provider).add_tracepoint(probe_name, *TYPES.fetch(rule.kind))
        probe = @probes[key] = MethodProbe.new(klass, name, rule.kind, tracepoint)
        want(probe, :switch) if Switch.enabled?
      rescue ArgumentError, StaticTracing::Error => e
        warn_once([klass, name, rule.kind], "static_tracing: not tracing #{klass}##{name}: #{e.message}")
      end

      def default_provider(klass, kind)
        name = provider_name_for(klass)
        unless name
          warn_once([:anonymous, klass],
                    "static_tracing: not tracing anonymous #{klass.inspect}: give it a provider " \
                    "(include StaticTracing::LatencyTracer.with(provider: :name))")
          return
        end
        kind == :stack ? "#{name}_stack" : name
      end

      # The method changed (redefined, visibility, back after a removal):
      # a wanted wrapper is made again to fit it.
      def reinstall(klass, name)
        probes_named(klass, name).each { |probe| install(probe) if probe.wanted? }
      end

      def probes_named(klass, name)
        @probes.values.select { |probe| probe.owner.equal?(klass) && probe.method_name == name }
      end

      def each_rule(klass, name, &)
        rules = klass.ancestors.flat_map { |ancestor| @rules.fetch(ancestor, []) }
        rules.select { |rule| rule.covers?(klass, name) }.each(&)
      end

      def install_hooks(owner)
        singleton = owner.singleton_class
        singleton.prepend(ClassHooks) unless singleton <= ClassHooks
        singleton.prepend(VisibilityHooks) unless singleton <= VisibilityHooks
      end

      def wrappers_for(owner, kind)
        @wrappers[[owner, kind]] ||= Wrappers.new(owner, kind).tap { |wrappers| owner.prepend(wrappers) }
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

      # The method as the class defines it, behind any wrappers.
      def original_method(klass, name)
        method = klass.instance_method(name)
        method = method.super_method while method.owner.is_a?(Wrappers)
        method
      end

      def warn_once(key, message)
        return if @warned[key]

        @warned[key] = true
        warn(message)
      end
    end

    # Prepended to the singleton class of a traced class: sees its methods
    # come and go. (Visibility changes are seen by VisibilityHooks, native.)
    module ClassHooks
      def method_added(name)
        super
        StaticTracing::MethodTracing.method_defined(self, name)
      end

      def method_removed(name)
        super
        StaticTracing::MethodTracing.method_gone(self, name)
      end

      def method_undefined(name)
        super
        StaticTracing::MethodTracing.method_gone(self, name)
      end
    end
  end
end
