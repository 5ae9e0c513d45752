# frozen_string_literal: true

module StaticTracing
  # What the wrapper of each kind of method tracer does: see MethodWrapper
  # for how a template becomes a method.
  module MethodTracing
    # Wrapper bodies, by kind. %{super} calls the original method with the
    # arguments this call received. When no tracer is attached a wrapper
    # costs the is-enabled check and the return through it, nothing else.
    # An attached latency wrapper crosses into native code once before the
    # call (latency_start: the clock if attached, else nil) and once after
    # (fire_latency: the clock again, and the fire).
    #
    # In a non-main Ractor the tracepoint constant cannot be read (it is not
    # shareable) and the extension cannot be called (it is not Ractor-safe):
    # the check raises a Ractor::Error there and nowhere else, which the
    # rescue turns into "not attached", so the call goes through untraced.
    TEMPLATES = {
      latency: <<~'RUBY',
        __static_tracing_started = (%{tracepoint}.latency_start rescue nil)
        return %{super} unless __static_tracing_started
        begin
          %{super}
        ensure
          %{tracepoint}.fire_latency(__static_tracing_started)
        end
      RUBY
      stack: <<~'RUBY'
        return %{super} unless (%{tracepoint}.enabled? rescue false)
        %{tracepoint}.fire(StaticTracing::Native.folded_stack(%{label}, 1, StaticTracing::StackTracer.max_bytes))
        %{super}
      RUBY
    }.freeze

    # Argument types of each kind's probes, and what the argument holds.
    TYPES = { latency: [Integer], stack: [String] }.freeze
    ROLES = { latency: { latency: 0 }, stack: { stack: 0 } }.freeze
  end
end
