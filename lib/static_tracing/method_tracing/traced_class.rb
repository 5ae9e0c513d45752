# frozen_string_literal: true

module StaticTracing
  # The data of method tracing, per class: see MethodTracing for what is
  # done with it.
  module MethodTracing
    # What a rule traces and how.
    Rule = Struct.new(:owner, :kind, :provider, :only, :inherited, keyword_init: true) do
      def covers?(klass, name)
        (klass.equal?(owner) || (inherited && klass < owner)) && (only.nil? || only.include?(name))
      end
    end

    # One traced method: its probe, why its wrapper is wanted (:switch while
    # tracing is on, :explicit after Tracepoint#load, :attach while a tracer
    # is attached in attach mode) and whether it is in place.
    class MethodProbe
      attr_reader :owner, :method_name, :kind, :tracepoint, :wanted_by
      attr_accessor :installed

      def initialize(owner, method_name, kind, tracepoint)
        @owner = owner
        @method_name = method_name
        @kind = kind
        @tracepoint = tracepoint
        @wanted_by = []
        @installed = false
      end

      def wanted?
        !@wanted_by.empty?
      end

      # Called by the Watcher in attach mode.
      def attach_changed(attached)
        attached ? MethodTracing.want(self, :attach) : MethodTracing.unwant(self, :attach)
      end

      def installed?
        @installed
      end

      # "Foo#bar", or "Foo.bar" for a class method.
      def label
        @label ||= MethodTracing.method_label(owner, method_name)
      end

      def inspect
        "#<#{self.class} #{label} -> #{tracepoint.provider.name}:#{tracepoint.name}#{" (wrapped)" if installed?}>"
      end
    end

    # What tracing knows about one class or module: the rules given to it,
    # the probes of its methods (by [method name, kind]) and the modules
    # holding their wrappers (by kind). The class itself holds it (see
    # Native.class_state) and nothing else does strongly, so a class made at
    # run time is collected as if it had never been traced.
    class TracedClass
      attr_reader :owner, :rules, :probes, :wrappers

      def initialize(owner)
        @owner = owner
        @rules = []
        @probes = {}
        @wrappers = {}
      end

      def probes_named(method_name)
        @probes.values.select { |probe| probe.method_name == method_name }
      end
    end

    # The module prepended to a class to hold its wrappers of one kind. It
    # is anonymous: a constant naming it would keep the class alive for
    # good. `ancestors` shows it as StaticTracing::MethodTracing::Wrappers(MyController, latency).
    class Wrappers < Module
      # The methods Ruby warns about removing (see #remove_wrapper).
      WARNED_REMOVALS = %i[initialize object_id __send__].freeze

      def initialize(owner, kind)
        super()
        @label = "#{self.class.name}(#{MethodTracing.module_name(owner)}, #{kind})"
        @constants = {}
        # Method name => [what its wrapper was compiled from, the wrapper].
        @compiled = {}
      end

      def inspect
        @label
      end
      alias to_s inspect

      # Anonymous, whatever Ruby remembers of the constant that named it
      # while a wrapper was compiled into it (see MethodWrapper.evaluate_in).
      def name
        nil
      end

      # A constant of this module holding +value+ for +method_name+, by name:
      # wrapper code reads it through an inline-cached constant lookup.
      def constant(method_name, role, value)
        name = (@constants[[method_name, role]] ||= "#{role.upcase}_#{@constants.size}")
        remove_const(name) if const_defined?(name, false)
        const_set(name, value)
        name
      end

      # The wrapper of +method_name+ compiled last from +source+, kept while
      # it is removed (see MethodTracing.define_wrapper), or nil.
      def compiled(method_name, source)
        compiled_from, wrapper = @compiled[method_name]
        wrapper if compiled_from == source
      end

      # Keeps the wrapper of +method_name+ just compiled from +source+.
      def compiled!(method_name, source)
        @compiled[method_name] = [source, instance_method(method_name)]
        method_name
      end

      # Ruby warns, even without -w, that removing initialize, object_id or
      # __send__ "may cause serious problems": here it is the gem's own
      # wrapper that goes, and the method it wrapped stays.
      def remove_wrapper(method_name)
        return remove_method(method_name) unless WARNED_REMOVALS.include?(method_name)

        verbose = $VERBOSE
        $VERBOSE = nil
        begin
          remove_method(method_name)
        ensure
          $VERBOSE = verbose
        end
      end

      def defines?(method_name)
        method_defined?(method_name, false) || private_method_defined?(method_name, false)
      end
    end
  end
end
