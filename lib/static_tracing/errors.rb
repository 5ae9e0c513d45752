# frozen_string_literal: true

module StaticTracing
  # Base class of the gem's own errors. Invalid arguments raise Ruby's
  # ArgumentError, TypeError or RangeError instead, as core methods do.
  class Error < StandardError; end

  # A provider's stub could not be generated or loaded anywhere; the message
  # lists every place that was tried and why it was passed over.
  class ProviderLoadError < Error; end

  # The recorder could not start, or write a snapshot: the message says why
  # (no usable directory, no space or memory for the ring, a size out of
  # range) and what to do. Nothing else about the process changed.
  class RecorderError < Error; end

  # A trace context cleared where it was not set (on another thread or
  # fiber), twice, or before contexts set inside it: the message says which
  # context, where it was set, and what is still set. Nothing changed.
  class TraceContextError < Error; end
  # A bug in the gem: a panic in one of its native libraries, caught where
  # Ruby called it and raised as this rather than unwound into Ruby. The
  # message says what failed and asks for a report; the process goes on.
  class InternalError < Error; end

  # `StaticTracing.providers[name]` for a name nobody registered.
  class ProviderMissingError < KeyError; end
end
