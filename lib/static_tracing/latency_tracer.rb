# frozen_string_literal: true

module StaticTracing
  # Fires a probe with the latency of every call, in nanoseconds (arg0), for
  # each instance method the class defines, before or after the include:
  #
  #   class MyController
  #     include StaticTracing::LatencyTracer
  #     def index; end      # usdt:*:my_controller:index
  #   end
  #
  # The provider is the class name in snake case; give another with
  # `include StaticTracing::LatencyTracer.with(provider: :web)`. Subclasses
  # are traced too, each under its own name. Probe names: `?` => `_p`,
  # `!` => `_bang`, `=` => `_set`; operator methods are left alone.
  module LatencyTracer
    KIND = :latency

    def self.included(base)
      super
      MethodTracing.trace(base, kind: KIND)
    end

    # The tracer with options: `include StaticTracing::LatencyTracer.with(provider: :web)`.
    def self.with(provider: nil)
      Tracer.new(KIND, provider:)
    end
  end

  # A tracer with options, as returned by LatencyTracer.with and StackTracer.with.
  class Tracer < Module
    def initialize(kind, provider:)
      super()
      @kind = kind
      @provider = provider && Names.string(:provider, provider)
    end

    def included(base)
      super
      MethodTracing.trace(base, kind: @kind, provider: @provider)
    end

    def inspect
      "#<StaticTracing::Tracer #{@kind}#{" provider: #{@provider}" if @provider}>"
    end
    alias to_s inspect
  end
end
