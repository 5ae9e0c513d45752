# frozen_string_literal: true

module StaticTracing
  # What the wrapper of each kind of method tracer does: see MethodWrapper
  # for how a template becomes a method.
  module MethodTracing
    # Wrapper bodies, by kind. %{super} calls the original method with the
    # arguments this call received. When no tracer is attached a wrapper
    # costs the is-enabled check and the return through it, nothing else.
    TEMPLATES = {
      latency: <<~'RUBY',
        return %{super} unless %{tracepoint}.enabled?
        __static_tracing_started = StaticTracing.nsec
        begin
          %{super}
        ensure
          %{tracepoint}.fire(StaticTracing.nsec - __static_tracing_started)
        end
      RUBY
      stack: <<~'RUBY'
        return %{super} unless %{tracepoint}.enabled?
        %{tracepoint}.fire(StaticTracing::Native.folded_stack(%{label}, 1, StaticTracing::StackTracer.max_bytes))
        %{super}
      RUBY
    }.freeze

    # Argument types of each kind's probes.
    TYPES = { latency: [Integer], stack: [String] }.freeze
  end
end
