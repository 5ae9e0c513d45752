# frozen_string_literal: true

module StaticTracing
  # How traced methods are named as probes.
  module MethodTracing
    OPERATOR = /\A(?![A-Za-z_][A-Za-z0-9_]*[?!=]?\z)/

    class << self
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

      private

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
