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

    # What a table should say about the tracepoints bpftrace was started
    # on: the attached numbers mean nothing unless every one is enabled.
    def attached_note(tracepoints)
      detached = tracepoints.reject(&:enabled?)
      providers = tracepoints.map(&:provider).uniq.map(&:name).join(", ")
      return "bpftrace attached to every probe of #{providers} (enabled? true)" if detached.empty?

      "WARNING: bpftrace started but #{detached.map(&:inspect).join(", ")} not enabled: attached rows are wrong"
    end

    def skipped_note
      "attached rows skipped: #{Bpftrace.unavailable_reason}"
    end

    # A bpftrace program counting the hits of each probe in a map of its
    # own, without a key: as the C floor counts its uprobe's. A map keyed
    # by probe (@[probe]) would cost each hit a hash of the probe's name,
    # about 120 ns on the reference host, billed to the probe.
    def count_program(provider, probes)
      probes.map { |probe| "usdt:*:#{provider}:#{probe} { @#{probe} = count(); }" }.join(" ")
    end

    # Exactness, checked on the way: the hits bpftrace counted for each
    # probe (counts: map name => hits, from count_program) against the
    # calls made to it (expected: probe name => calls), calibration and
    # warm-up included.
    def count_note(counts, expected)
      return "WARNING: bpftrace did not exit on SIGINT: its counts are lost" unless counts

      wrong = expected.filter_map do |probe, calls|
        count = counts.fetch(probe.to_s, 0)
        "#{probe}: #{count} counted for #{calls} calls" unless count == calls
      end
      return "bpftrace counted every attached call exactly (#{expected.values.sum} calls)" if wrong.empty?

      "WARNING: bpftrace counts differ from calls made: #{wrong.join(", ")}"
    end
  end
end
