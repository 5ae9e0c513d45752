# frozen_string_literal: true

require_relative "native_library"

module StaticTracing
  # The reader of the recorder's files, trace_reader.so (ext/trace_reader):
  # the format's one implementation, in Rust, for the `static-tracing`
  # command and for StaticTracing::Rack::Metrics, which load it when they
  # first read a ring or a trace file. A library of its own, apart from the
  # extension a traced process loads (static_tracing.so): loading it starts
  # none of the gem's runtime (no watcher, no signal handler, no stub), as
  # the command must not in its own process. It raises the command's
  # errors, which are defined before it loads. NativeLibrary finds the
  # build for the running Ruby. See ARCHITECTURE.md.
  #
  #   StaticTracing.trace_reader::Tally.new(name)
  def self.trace_reader
    @trace_reader ||= begin
      NativeLibrary.require("trace_reader")
      TraceReader
    end
  end
end
