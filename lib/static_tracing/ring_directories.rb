# frozen_string_literal: true

module StaticTracing
  # The directories a process may keep its recorder's ring in, as that
  # process sees them: readers (`static-tracing`, Rack::Metrics) open a ring
  # a process's state file names only in one of these. The process picks
  # the first that is usable and in memory (ext/stapsdt/src/ring_dir.rs,
  # docs/recording.md "Where rings live"): $STATIC_TRACING_RING_DIR, its
  # stub directory (where its state file is) if that is on a tmpfs, then
  # /dev/shm/static_tracing-UID. spec/contracts_spec.rb holds the two equal.
  module RingDirectories
    SETTING = "STATIC_TRACING_RING_DIR"
    SHARED_MEMORY = "/dev/shm"

    module_function

    # +named+: its $STATIC_TRACING_RING_DIR, made absolute (nil or empty:
    # unset); +state_dir+: where its state file is; +uid+: its uid as it
    # sees it.
    def of(named:, state_dir:, uid:)
      [(named unless named.to_s.empty?), state_dir, File.join(SHARED_MEMORY, "static_tracing-#{uid}")].compact.uniq
    end

    # Whether +ring+ (a path) is in one of +dirs+, under the name +name+.
    def holds?(dirs, ring, name)
      ring.is_a?(String) && File.basename(ring) == name && dirs.any? { |dir| File.join(dir, name) == ring }
    end
  end
end
