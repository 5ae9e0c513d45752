# frozen_string_literal: true

module Bench
  # Providers set up for a measurement and taken down after it, so that one
  # group leaves nothing loaded that another could notice.
  module Fixtures
    module_function

    # A loaded provider with a tracepoint for each probe name => types;
    # yields the tracepoints by name, then unregisters the provider.
    def with_loaded_provider(name, signatures)
      provider = StaticTracing::Provider.register(name)
      tracepoints = signatures.to_h { |probe, types| [probe, provider.add_tracepoint(probe, *types)] }
      provider.load
      yield tracepoints, provider
    ensure
      provider&.unregister
    end

    # What a table should say about tracers attached to +tracepoints+: the
    # unattached numbers mean nothing if one is.
    def attachment_note(tracepoints)
      attached = tracepoints.select(&:enabled?)
      return "no tracer attached (every enabled? was false)" if attached.empty?

      "WARNING: a tracer is attached to #{attached.map(&:inspect).join(", ")}: these are not unattached costs"
    end
  end
end
