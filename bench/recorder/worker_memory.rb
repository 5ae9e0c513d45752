# frozen_string_literal: true

# Run by the recorder group in a process of its own (a worker's stand-in):
# what its resident memory holds because of recording. Its resident set,
# in anonymous pages and in shared ones (the ring), before recording,
# after a 16M flight ring's first lap, after SNAPSHOTS trigger snapshots
# (of the default window) and after WHOLE dumps of the whole ring; and the
# peak. Prints one line of JSON.
#
#   ruby -I lib bench/recorder/worker_memory.rb DIR

require "json"
require "static_tracing"

SNAPSHOTS = 20
WHOLE = 5
SLOT = 32
SIZE = 16 << 20

def memory
  status = File.read("/proc/self/status")
  %w[VmRSS RssAnon RssShmem VmHWM].to_h { |field| [field, Integer(status[/^#{field}:\s*(\d+) kB/, 1]) * 1024] }
end

def wait_for_snapshots(dir, count)
  deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
  until Dir[File.join(dir, "*-bench_memory-*.trace")].size >= count
    raise "no snapshot #{count} after 30 s" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

    sleep 0.005
  end
end

dir = ARGV.fetch(0)
request = StaticTracing::Tracepoint.new(:bench_memory, :request, Integer, latency: 0)
$stderr = File.open(File::NULL, "w")
GC.start
figures = { before: memory }
StaticTracing::Recorder.start(probes: ["bench_memory:*"], size: "16M", dump_when: "bench_memory:request > 100ms",
                              dump_dir: dir, dump_interval: 0, max_dumps: 1000, max_dump_bytes: "4G")
(SIZE / SLOT).times { request.fire(1000) }
GC.start
figures[:lap] = memory
SNAPSHOTS.times do |index|
  2_000.times { request.fire(1000) }
  request.fire(300_000_000)
  wait_for_snapshots(dir, index + 1)
end
GC.start
figures[:snapshots] = memory
figures[:snapshot_bytes] = Dir[File.join(dir, "*-bench_memory-*.trace")].sum { |path| File.size(path) } / SNAPSHOTS
WHOLE.times { |index| StaticTracing::Recorder.dump(File.join(dir, "whole-#{index}.trace")) }
GC.start
figures[:whole] = memory
figures[:whole_bytes] = File.size(File.join(dir, "whole-0.trace"))
StaticTracing::Recorder.stop
puts JSON.generate(figures)
