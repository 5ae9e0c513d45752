# frozen_string_literal: true

# ruby -Ilib bench/recorder/flight_process.rb RECORDS SIZE: a process
# holding a flight recording of SIZE for `static-tracing dump PID` to read
# (bench/recorder/reading.rb). It makes RECORDS one-slot records, prints
# one line of JSON (ready, its ring, the records made), then waits to be
# stopped: what a dump costs must follow the records the ring holds, not
# its size, so an idle ring and a busy one are read from outside, as an
# operator would, while nothing else writes to them.
require "json"
require "static_tracing"

provider = StaticTracing::Provider.register(:bench_recorder_flight)
tracepoint = provider.add_tracepoint(:latency, Integer, latency: 0)
provider.load
records = Integer(ARGV.fetch(0))
status = StaticTracing::Recorder.start(probes: ["bench_recorder_flight:*"], flight: true, size: ARGV.fetch(1))
records.times { |value| tracepoint.fire(value) }
puts JSON.generate(ready: true, ring: status["ring"], records:)
# The benchmark reads this line from a file as it grows.
$stdout.flush
sleep
