# frozen_string_literal: true

# ruby -Ilib bench/recorder/read_back.rb RING CALLS: reads a recorder's
# ring back as static-tracing does, in a process of its own, and prints on
# one line, as JSON, what the recorder group's thread check holds it to:
# the records read, those lost and dropped, how many of the values 0 to
# CALLS - 1 are missing or read more than once, those outside that range,
# the threads that wrote them and how often the writer changes from one
# record to the next.
require "json"
require "static_tracing/cli"

path = ARGV.fetch(0)
calls = Integer(ARGV.fetch(1))
trace = StaticTracing::CLI::TraceFile.read(path)
seen = Array.new(calls, 0)
outside = 0
switches = 0
previous = nil
threads = {}
trace.records.each do |record|
  value = record.args.first
  if value.between?(0, calls - 1)
    seen[value] += 1
  else
    outside += 1
  end
  switches += 1 if previous && record.tid != previous
  previous = threads[record.tid] = record.tid
end
puts JSON.generate(records: trace.records.size, lost: trace.lost, dropped: trace.dropped,
                   records_total: trace.records_total, missing: seen.count(0), repeated: seen.count { _1 > 1 },
                   outside:, threads: threads.size, switches:)
