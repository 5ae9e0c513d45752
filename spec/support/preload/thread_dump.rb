# frozen_string_literal: true

# Loaded into the servers the end-to-end specs start (through RUBYOPT), to
# say why a process does not exit when it should: $STATIC_TRACING_SPEC_DUMP_SIGNAL
# (E2E::Puma::DUMP_SIGNAL) makes the process write every thread's backtrace
# to <$STATIC_TRACING_SPEC_DUMPS>/<pid>.threads.
# The trap runs on the main thread once it can take the GVL, so a dump that
# never comes is an answer too: the main thread cannot run Ruby code.
dumps = ENV.fetch("STATIC_TRACING_SPEC_DUMPS", nil)
signal = ENV.fetch("STATIC_TRACING_SPEC_DUMP_SIGNAL", nil)
if dumps && signal
  Signal.trap(signal) do
    threads = Thread.list.map do |thread|
      "#{thread.name || "(unnamed)"} #{thread.status.inspect}\n    #{(thread.backtrace || []).join("\n    ")}"
    end
    path = File.join(dumps, "#{Process.pid}.threads")
    File.write("#{path}.tmp", threads.join("\n"))
    File.rename("#{path}.tmp", path)
  end
end
