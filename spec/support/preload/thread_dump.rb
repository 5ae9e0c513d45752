# frozen_string_literal: true

# Loaded into the servers the end-to-end specs start (through RUBYOPT), to
# say why a process does not exit when it should: SIGPWR makes the process
# write every thread's backtrace to <$STATIC_TRACING_SPEC_DUMPS>/<pid>.threads.
# The trap runs on the main thread once it can take the GVL, so a dump that
# never comes is an answer too: some thread holds the GVL and is blocked.
if (dumps = ENV.fetch("STATIC_TRACING_SPEC_DUMPS", nil))
  Signal.trap("PWR") do
    threads = Thread.list.map do |thread|
      "#{thread.name || "(unnamed)"} #{thread.status.inspect}\n    #{(thread.backtrace || []).join("\n    ")}"
    end
    path = File.join(dumps, "#{Process.pid}.threads")
    File.write("#{path}.tmp", threads.join("\n"))
    File.rename("#{path}.tmp", path)
  end
end
