# frozen_string_literal: true

module StaticTracing
  module Rails
    # config.static_tracing.trace_actions: every controller gets
    # StaticTracing::LatencyTracer, so each method a controller defines (its
    # actions, and the private methods it calls) has a probe
    # `usdt:*:users_controller:index` with arg0 = latency in ns. Prepended
    # to the singleton class of ActionController::Base and ::API: each class
    # that inherits from them directly includes the tracer, and its
    # subclasses are traced through it.
    module ActionTracing
      def inherited(subclass)
        super
        subclass.include(StaticTracing::LatencyTracer) unless subclass <= StaticTracing::LatencyTracer
      end

      def self.install(base)
        base.singleton_class.prepend(self) unless base.singleton_class <= self
      end
    end
  end
end
