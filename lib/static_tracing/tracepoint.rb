# frozen_string_literal: true

module StaticTracing
  # One probe of a provider: `usdt:*:<provider>:<name>`.
  #
  # The native half implements #fire(*args) (checks the count and types of
  # the arguments, and fires if the provider is loaded and a tracer is
  # attached; returns whether it fired), #enabled?, #name, #provider and
  # #types.
  class Tracepoint
    # The tracepoint +name+ of +provider+ (a name or a Provider), declared
    # with +types+ if new; the provider is registered if needed.
    def self.new(provider, name, *types)
      provider = Provider.register(provider) unless provider.is_a?(Provider)
      provider.add_tracepoint(name, *types)
    end

    # "(Integer, String)"
    def self.signature(types)
      "(#{types.map { |type| type.is_a?(Module) ? type.name : type.inspect }.join(", ")})"
    end

    # Makes sure the provider is loaded, so the probe can be attached to.
    def load
      provider.load
      self
    end

    # Unloads the provider: a provider's probes are loaded and unloaded together.
    def unload
      provider.unload
      self
    end

    def loaded?
      provider.loaded?
    end

    def label
      "tracepoint #{provider.name}:#{name}"
    end

    def inspect
      "#<#{self.class} #{provider.name}:#{name}#{self.class.signature(types)}>"
    end
    alias to_s inspect
  end
end
