# frozen_string_literal: true

module Bench
  class Recorder
    # A scrape as `static-tracing export` and StaticTracing::Rack::Metrics
    # answer one (docs/fleet.md): a ring read from its first record and its
    # metrics written, in this process's thread CPU time. Two processes
    # hold the same calls of the same probes, one outside any trace
    # context, the other ten calls a request in a context each (its ring
    # has a context record more every ten calls); the traced one is scraped
    # in OpenMetrics with exemplars, and as text, in the same rounds as the
    # plain one in the text format.
    class Scraping
      SCRAPE_PROCESS = File.join(__dir__, "scrape_process.rb")
      PROBES = 100
      CALLS = 100_000
      ROUNDS = 9
      OPEN_METRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
      WITH_EXEMPLARS = "scrape.traced_open_metrics"

      def initialize(group)
        @group = group
      end

      def run
        children = %w[plain traced].to_h { |kind| [kind, start(kind)] }
        rings = children.transform_values { |(_, ring)| File.open(ring) }
        table(Bench.interleave(cases(rings), rounds: ROUNDS))
      ensure
        rings&.each_value(&:close)
        children&.each_value { |child, _| child.kill }
      end

      private

      def cases(rings)
        { "scrape.plain_text" => [rings["plain"], nil], "scrape.traced_text" => [rings["traced"], nil],
          WITH_EXEMPLARS => [rings["traced"], OPEN_METRICS] }.transform_values do |ring, accept|
          -> { scrape(ring, accept) }
        end
      end

      def start(kind)
        child = Child.new(RbConfig.ruby, "-I", File.join(ROOT, "lib"), SCRAPE_PROCESS, PROBES.to_s, CALLS.to_s, kind,
                          log: @group.file("recorder-scrape-#{kind}.log"), env: { "STATIC_TRACING_MODE" => "off" })
        line = child.wait_for(/^\{"ready":true.*$/, timeout: 120)[0]
        [child, JSON.parse(line).fetch("ring")]
      end

      # A tally's first scrape of +ring+ and its exposition for +accept+:
      # CPU milliseconds, the bytes served, and the exemplars in them.
      def scrape(ring, accept)
        tally = nil
        text = nil
        reader = StaticTracing.trace_reader::Tally
        cpu_ns = Bench.time_ns(Process::CLOCK_THREAD_CPUTIME_ID) do
          tally = reader.new("ring")
          tally.scrape(ring.fileno)
          text = reader.exposition([[1, tally]], accept).last
        end
        { cpu_ms: cpu_ns / 1e6, bytes: text.bytesize, exemplars: text.scan(" # {trace_id=").size,
          calls: tally.probe_list.sum { |probe| probe[2] } }
      end

      def table(runs)
        table = @group.add_table(:recorder_scraping, "A scrape: one ring of #{PROBES} latency probes and " \
                                                     "#{CALLS.to_s.reverse.scan(/\d{1,3}/).join(",").reverse} " \
                                                     "calls read and served (median of #{ROUNDS} interleaved rounds)",
                                 measurement: "measurement", cpu_ms: ["CPU ms", :d1], bytes: ["bytes", :int],
                                 exemplars: ["exemplars", :int], ratio: ["ratio to plain text", :x])
        plain = Bench.median(runs.fetch("scrape.plain_text").map { |run| run[:cpu_ms] })
        labels = { "scrape.plain_text" => "calls outside any context, text format",
                   "scrape.traced_text" => "calls in request contexts, text format",
                   WITH_EXEMPLARS => "calls in request contexts, OpenMetrics with exemplars" }
        labels.each do |id, label|
          table.row(row(id, label, runs.fetch(id), plain))
        end
        table.note("target: a scrape with exemplars at most 1.2x one without (the same calls outside contexts, " \
                   "in the text format); each traced ring also holds a context record every ten calls")
      end

      def row(id, label, runs, plain)
        raise "#{id}: read #{runs.first[:calls]} calls of #{CALLS}" unless runs.all? { |run| run[:calls] == CALLS }

        cpu = Bench.median(runs.map { |run| run[:cpu_ms] })
        { id:, measurement: label, cpu_ms: cpu, bytes: runs.first[:bytes], exemplars: runs.first[:exemplars],
          ratio: cpu / plain, ratio_per_round: runs.map { |run| run[:cpu_ms] } }
      end
    end
  end
end
