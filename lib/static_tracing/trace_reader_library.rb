# frozen_string_literal: true

module StaticTracing
  # The reader of the recorder's files, trace_reader.so (ext/trace_reader):
  # the format's one implementation, in Rust, for the `static-tracing`
  # command and for StaticTracing::Rack::Metrics, which load it when they
  # first read a ring or a trace file. A library of its own, apart from the
  # extension a traced process loads (static_tracing.so): loading it starts
  # none of the gem's runtime (no watcher, no signal handler, no stub), as
  # the command must not in its own process. It raises the command's
  # errors, which are defined before it loads. In a checkout it sits in
  # this directory; in an installed gem, in the extension directory on the
  # load path. See ARCHITECTURE.md.
  #
  #   StaticTracing.trace_reader::Tally.new(name)
  def self.trace_reader
    @trace_reader ||= begin
      checkout = File.expand_path("trace_reader.so", __dir__)
      File.exist?(checkout) ? require(checkout) : require("static_tracing/trace_reader")
      TraceReader
    end
  end
end
