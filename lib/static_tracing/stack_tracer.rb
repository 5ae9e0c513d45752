# frozen_string_literal: true

module StaticTracing
  # Fires a probe at the entry of every instance method the class defines,
  # with arg0 the Ruby stack in folded form (root first, `Class#method`
  # frames separated by `;`), ready for flamegraph.pl:
  #
  #   class MyController
  #     include StaticTracing::StackTracer
  #     def index; end      # usdt:*:my_controller_stack:index
  #   end
  #
  #   bpftrace -e 'usdt:*:my_controller_stack:* { @[str(arg0)] = count(); }' -p PID
  #
  # The provider is the class name in snake case followed by `_stack` (so it
  # can be used alongside LatencyTracer); `StackTracer.with(provider: :x)`
  # names another. A stack longer than `max_bytes` keeps its innermost
  # frames under a first frame `[truncated]`; bpftrace reads at most
  # BPFTRACE_STRLEN bytes (64 by default).
  module StackTracer
    KIND = :stack
    DEFAULT_MAX_BYTES = 200
    # More than any stack needs. A larger Integer does not fit the native
    # side's size_t: every traced call would raise while a tracer is attached.
    MAX_MAX_BYTES = 1 << 32

    @max_bytes = DEFAULT_MAX_BYTES

    class << self
      # Longest folded stack fired, in bytes.
      attr_reader :max_bytes

      def max_bytes=(bytes)
        unless bytes.is_a?(Integer) && bytes.between?(1, MAX_MAX_BYTES)
          raise ArgumentError,
                "max_bytes must be an Integer of at least 1 and at most #{MAX_MAX_BYTES}, got #{bytes.inspect}"
        end

        @max_bytes = bytes
      end

      def included(base)
        super
        MethodTracing.trace(base, kind: KIND)
      end

      def with(provider: nil)
        Tracer.new(KIND, provider:)
      end
    end
  end
end
