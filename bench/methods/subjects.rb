# frozen_string_literal: true

module Bench
  # The methods the methods group calls: one class for each way of calling
  # the same empty bodies. Loaded only when that group runs, so that no
  # other group runs with traced classes (and their providers) around.
  module Subjects
    BODIES = <<~RUBY
      def m0; end
      def m2(first, second); end
      def mk(first, key:); end
    RUBY

    # Shape => [how the table shows it, the call in a loop, its locals].
    SHAPES = {
      m0: ["m0()", "receiver.m0", {}],
      m2: ["m2(a, b)", "receiver.m2(a, b)", { a: 1, b: 2 }],
      mk: ["mk(a, key:)", "receiver.mk(a, key: b)", { a: 1, b: 2 }]
    }.freeze

    class Plain
      class_eval(BODIES, __FILE__, __LINE__)

      def with_yield
        yield
      end
    end

    # The least any wrapper written in Ruby pays: a prepended method with
    # the traced method's own parameters, passing them on through super.
    # A LatencyTracer wrapper is this plus its is-enabled check. (Methods
    # that only call super are the point here.)
    module PrependSuper
      # rubocop:disable Lint/UselessMethodDefinition
      def m0 = super()
      def m2(first, second) = super(first, second)
      def mk(first, key:) = super(first, key:)
      # rubocop:enable Lint/UselessMethodDefinition
    end

    class Floor
      prepend PrependSuper
      class_eval(BODIES, __FILE__, __LINE__)
    end

    class Traced
      include StaticTracing::LatencyTracer.with(provider: :bench_methods)
      class_eval(BODIES, __FILE__, __LINE__)
    end

    class Attached
      include StaticTracing::LatencyTracer.with(provider: :bench_methods_attached)
      class_eval(BODIES, __FILE__, __LINE__)
    end

    # Called with a TracePoint enabled on it, as LatencyTracePoint does.
    class Pointed
      class_eval(BODIES, __FILE__, __LINE__)
    end

    # What one would write to get method latency without this gem: a
    # TracePoint on the method alone (target:), reading the clock at call
    # and at return. The latency ends in an attribute, where a real one
    # would hand it on.
    class LatencyTracePoint
      attr_reader :last_ns

      def initialize
        starts = []
        @tracepoint = TracePoint.new(:call, :return) do |point|
          if point.event == :call
            starts.push(Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond))
          else
            @last_ns = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - starts.pop
          end
        end
      end

      # Runs the block with the TracePoint enabled on +method+ only.
      def around(method, &)
        @tracepoint.enable(target: method, &)
      end
    end
  end
end
