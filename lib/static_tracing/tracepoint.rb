# frozen_string_literal: true

module StaticTracing
  # One probe of a provider: `usdt:*:<provider>:<name>`.
  #
  # The native half implements #fire(*args) (checks the count and types of
  # the arguments, and fires if the provider is loaded and a tracer is
  # attached, or records if the recorder records it; returns whether it
  # did), #enabled?, #measure { } and #fire_if_enabled { } (a latency
  # block and a tracepoint block for a probe held in a constant: see
  # StaticTracing.latency_probe and StaticTracing.tracepoint), #latency_start,
  # #fire_latency, #name, #label, #provider and #types. Tracepoints are
  # made by their provider (Provider#add_tracepoint), which keeps them.
  class Tracepoint
    # The tracepoint +name+ of +provider+ (a name or a Provider), declared
    # with +types+ if new; the provider is registered if needed. +latency+
    # and +stack+: see Provider#add_tracepoint.
    def self.new(provider, name, *types, latency: nil, stack: nil)
      unless provider.is_a?(Provider)
        Provider.check_declaration(provider, name, types) unless StaticTracing.providers.key?(provider)
        provider = Provider.register(provider)
      end
      provider.add_tracepoint(name, *types, latency:, stack:)
    end

    # ArgumentError unless +latency+ is nil or the index of an Integer among
    # +types+, and +stack+ nil or the index of a String.
    def self.check_roles(name, types, latency:, stack:)
      check_role(name, types, :latency, latency, Integer) unless latency.nil?
      check_role(name, types, :stack, stack, String) unless stack.nil?
    end

    def self.check_role(name, types, role, index, type)
      return if index.is_a?(Integer) && index >= 0 && types[index].equal?(type)

      raise ArgumentError, "probe #{name}: #{role}: must be the index of #{type == Integer ? "an" : "a"} " \
                           "#{type} among its types #{signature(types)}, got #{index.inspect}"
    end
    private_class_method :check_role

    # The index of the argument that holds a duration in nanoseconds, or nil.
    attr_reader :latency_argument

    # The index of the argument that holds a folded stack, or nil.
    attr_reader :stack_argument

    # "(Integer, String)"
    def self.signature(types)
      "(#{types.map { |type| type.is_a?(Module) ? type.name : type.inspect }.join(", ")})"
    end

    # Makes sure the provider is loaded, so the probe can be attached to;
    # for a method tracepoint, also wraps its method (until #unload).
    def load
      provider.load
      MethodTracing.probes_of(self).each { |probe| MethodTracing.want(probe, :explicit) }
      self
    end

    # For a method tracepoint: removes its wrapper (unless tracing is on),
    # the provider stays loaded. For others: unloads the provider, since a
    # provider's probes are loaded and unloaded together.
    def unload
      probes = MethodTracing.probes_of(self)
      if probes.empty?
        provider.unload
      else
        probes.each { |probe| MethodTracing.unwant(probe, :explicit) }
      end
      self
    end

    # The methods whose wrapper fires this tracepoint, as "Class#method".
    def traced_methods
      MethodTracing.probes_of(self).map(&:label)
    end

    def loaded?
      provider.loaded?
    end

    # Whether the recorder records this probe now.
    def recorded?
      Recorder.armed?(self)
    end

    def inspect
      "#<#{self.class} #{provider.name}:#{name}#{self.class.signature(types)}>"
    end
    alias to_s inspect

    private

    def assign_roles(latency, stack)
      @latency_argument = latency
      @stack_argument = stack
    end
  end
end
