# frozen_string_literal: true

module StaticTracing
  # How traced methods are named as probes.
  #
  # A method's probe is named after the method: `?` => `_p`, `!` => `_bang`,
  # `=` => `_set`, each other character outside ASCII letters, digits and
  # `_` => `_u` and its code point in hex (`grüßen` => `gr_u00fc_u00dfen`).
  # A class method's name gets `self_` in front (`Svc.call` =>
  # `svc:self_call`). Operators (`+`, `[]`, `<=>`) are not traced.
  #
  # Two distinct methods never share a probe: when a method's name is taken
  # in its provider by another method (`valid?` and `valid_p`, or
  # `Foo::Bar#index` and `FooBar#index`, both in provider foo_bar), the one
  # declared later gets `_2` (then `_3`, ...) after it, with a warning
  # naming both.
  module MethodTracing
    IDENTIFIER = /\A[[:alpha:]_][[:alnum:]_]*[?!=]?\z/
    MODULE_NAME = Module.instance_method(:name)
    MODULE_INSPECT = Module.instance_method(:inspect)
    CLASS_METHOD_PREFIX = "self_"

    # Provider name => probe name => the method holding it, as
    # method_label names it (every anonymous class's method +name+ as one).
    @claims = {}
    # Singleton class => the module it belongs to, found once (weakly).
    @attached_modules = ObjectSpace::WeakMap.new

    class << self
      # The provider name a class's probes get by default: Admin::UsersController => admin_users_controller.
      # A class's singleton class gets its class's.
      def provider_name_for(klass)
        klass = attached_module(klass) if klass.singleton_class?
        name = klass&.name or return nil
        name.split("::").map do |part|
          part.gsub(/([A-Z]+)([A-Z][a-z])/, '\1_\2').gsub(/([a-z\d])([A-Z])/, '\1_\2').downcase
        end.join("_")
      end

      # The probe name for a method (of +owner+, which makes it a class method
      # when a singleton class); nil for operators.
      def probe_name_for(method_name, owner = nil)
        name = method_name.to_s
        return unless name.match?(IDENTIFIER)

        name = name.sub(/\?\z/, "_p").sub(/!\z/, "_bang").sub(/=\z/, "_set")
        name = name.gsub(/[^A-Za-z0-9_]/) { |char| format("_u%04x", char.ord) }
        owner&.singleton_class? ? "#{CLASS_METHOD_PREFIX}#{name}" : name
      end

      # "Foo#bar", or "Foo.bar" for a class method.
      def method_label(klass, method_name)
        attached = attached_module(klass) if klass.singleton_class?
        return "#{module_name(attached)}.#{method_name}" if attached

        "#{module_name(klass)}##{method_name}"
      end

      # A module's name as Ruby knows it ("Admin::Users", or "#<Class:0x...>"
      # for an anonymous one), whatever its own +name+ or +inspect+ says: a
      # class may define those, and a label made of them (a frame of
      # StackTracer's folded stacks) would say what it likes (a ";" there
      # would split the frame in two).
      def module_name(mod)
        MODULE_NAME.bind_call(mod) || MODULE_INSPECT.bind_call(mod)
      end

      # The class or module whose singleton class +singleton+ is, or nil
      # (the singleton class of another object).
      def attached_module(singleton)
        @attached_modules[singleton] ||= find_attached_module(singleton)
      end

      private

      # Ruby 3.1 has no Class#attached_object: the heap is searched for the
      # one object whose singleton class this is.
      def find_attached_module(singleton)
        attached = if singleton.respond_to?(:attached_object)
                     singleton.attached_object
                   else
                     ObjectSpace.each_object(singleton).find { |object| object.singleton_class.equal?(singleton) }
                   end
        attached if attached.is_a?(Module)
      end

      # The probe the method +method_name+ of +klass+ fires in +provider+:
      # +name+, or the first of name_2, name_3, ... that no other method holds.
      def claim_probe_name(provider, name, klass, method_name)
        method = provider_name_for(klass) ? method_label(klass, method_name) : "anonymous ##{method_name}"
        claims = (@claims[provider] ||= {})
        claimed = name
        suffix = 1
        while claims.fetch(claimed, method) != method
          suffix += 1
          claimed = "#{name}_#{suffix}"
        end
        if claimed != name
          warn_once([:shared_probe, provider, method],
                    "static_tracing: #{method} and #{claims[name]} would both fire #{provider}:#{name}; " \
                    "#{method} fires #{provider}:#{claimed}")
        end
        claims[claimed] = method
        claimed
      end

      def forget_claims(provider)
        @claims.delete(provider)
      end

      # An anonymous class has no name to make a provider of: said once per
      # rule, not once per class (a factory may make thousands).
      def default_provider(klass, rule)
        name = provider_name_for(klass)
        unless name
          warn_once([:anonymous, rule.owner.object_id, rule.kind], anonymous_message(klass, rule))
          return
        end
        rule.kind == :stack ? "#{name}_stack" : name
      end

      def anonymous_message(klass, rule)
        hint = "give it a provider (include StaticTracing::LatencyTracer.with(provider: :name))"
        return "static_tracing: not tracing anonymous #{klass.inspect}: #{hint}" if klass.equal?(rule.owner)

        "static_tracing: not tracing anonymous subclasses of #{rule.owner} (#{klass.inspect} and any later " \
          "ones): #{hint.sub("it", rule.owner.to_s)}"
      end
    end
  end
end
