# frozen_string_literal: true

# ruby -Ilib bench/recorder/scrape_process.rb PROBES CALLS traced|plain: a
# process whose flight ring a scrape reads (bench/recorder/scraping.rb).
# It records CALLS calls spread over PROBES latency probes, ten calls a
# request; traced, each request in a trace context of its own, as behind
# StaticTracing::RackMiddleware with a traceparent header. It then prints
# one line of JSON (ready, its ring) and waits to be stopped.
require "json"
require "static_tracing"

probe_count, calls = ARGV.first(2).map { |arg| Integer(arg) }
traced = ARGV.fetch(2) == "traced"
provider = StaticTracing::Provider.register(:bench_recorder_scrape)
probes = Array.new(probe_count) { |index| provider.add_tracepoint(:"action_#{index}", Integer, latency: 0) }
provider.load
status = StaticTracing::Recorder.start(probes: ["bench_recorder_scrape:*"], flight: true, size: "16M")
(calls / 10).times do |request|
  # Durations up to 50 ms, spread over the buckets.
  work = proc do
    10.times do |call|
      probes[((request * 10) + call) % probe_count].fire(((request * 7919) + call) % 50_000_000)
    end
  end
  if traced
    StaticTracing.with_trace_context(format("%032x", request + 1), format("%016x", request + 1), &work)
  else
    work.call
  end
end
puts JSON.generate(ready: true, ring: status["ring"])
$stdout.flush
sleep
