# frozen_string_literal: true

# Loaded into a script the recorder group runs (ruby -r, see usage.rb):
# writes the process's peak resident set, in KiB, to $BENCH_PEAK_FILE when
# it exits. Not ru_maxrss, which wait4 and getrusage give: the kernel
# carries into it the resident set of the process that forked it, as it
# was at the exec, so every command would count the benchmark's own pages.
# VmHWM is the new program's alone. Registered before the script runs,
# this handler runs after the script's own.
at_exit do
  peak = File.read("/proc/self/status")[/^VmHWM:\s*(\d+) kB/, 1]
  File.write(ENV.fetch("BENCH_PEAK_FILE"), peak) if peak
end
