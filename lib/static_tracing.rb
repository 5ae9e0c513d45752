# frozen_string_literal: true

require_relative "static_tracing/version"
require_relative "static_tracing/errors"
require_relative "static_tracing/native_library"
StaticTracing::NativeLibrary.require("static_tracing")
require_relative "static_tracing/names"
require_relative "static_tracing/registry"
require_relative "static_tracing/provider"
require_relative "static_tracing/tracepoint"
require_relative "static_tracing/switch"
require_relative "static_tracing/watcher"
require_relative "static_tracing/method_tracing"
require_relative "static_tracing/latency_tracer"
require_relative "static_tracing/stack_tracer"
require_relative "static_tracing/blocks"
require_relative "static_tracing/recorder"
require_relative "static_tracing/control"
require_relative "static_tracing/signal_toggle"
require_relative "static_tracing/configuration"
require_relative "static_tracing/state"
require_relative "static_tracing/fork_hook"
require_relative "static_tracing/trace_context"
require_relative "static_tracing/rack_middleware"

# USDT probes defined at run time: see README.md.
module StaticTracing
  @providers = Registry.new
  @warned = {}

  class << self
    # The registry of providers, by name.
    attr_reader :providers

    # Whether probes can be loaded on this platform (Linux x86-64, aarch64).
    def supported?
      Native.supported?
    end

    # Called by Provider when the native side put a stub somewhere other
    # than the first stub directory: says so once for each set of reasons.
    def warn_stub_fallback(skipped)
      warn_stub_directories(skipped.join("; "), "stub directory skipped")
    end

    # The state file (see State) and the stubs pass over the same
    # directories for the same reasons: what one said is not said again.
    def warn_stub_directories(reasons, what)
      warn_once([:stub_directories, reasons], "static_tracing: #{what}: #{reasons}")
    end

    def warn_unsupported
      warn_once(:unsupported, "static_tracing: USDT probes are supported on Linux x86-64 and aarch64 only; " \
                              "on #{RUBY_PLATFORM} every tracepoint is a no-op")
    end

    # Says +message+ unless a warning was given under +key+ before: the
    # process's one table of warnings given, for the whole gem. A key that
    # names a class does so by object_id (never reused), so that a warning
    # does not keep its class alive.
    def warn_once(key, message)
      return if @warned[key]

      @warned[key] = true
      warn(message, uplevel: nil)
    end
  end

  at_exit { Native.remove_files_at_exit }
end

StaticTracing.warn_unsupported unless StaticTracing.supported?
StaticTracing::Configuration.configure_from_environment
StaticTracing::Recorder.configure_from_environment
