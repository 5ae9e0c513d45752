# frozen_string_literal: true

require "fileutils"
require "json"
require "net/http"
require "tmpdir"
require "uri"

# The Prometheus text exposition format (0.0.4) read back as Prometheus
# reads it, with the rules the metrics `static-tracing export` and
# StaticTracing::Rack::Metrics serve are held to: every family has its
# HELP and TYPE before its samples, a family's samples are together, no
# series twice, and each histogram's buckets are cumulative, end in +Inf,
# and +Inf is its _count.
module PrometheusText
  class Invalid < StandardError; end

  Family = Struct.new(:name, :help, :type, :samples)
  Sample = Struct.new(:name, :labels, :value)

  NAME = /[a-zA-Z_:][a-zA-Z0-9_:]*/
  LABEL = /\A(?<name>[a-zA-Z_][a-zA-Z0-9_]*)="(?<value>(?:[^"\\\n]|\\[\\"n])*)",?/
  SAMPLE = /\A(?<name>#{NAME})(?:\{(?<labels>[^}]*)\})? (?<value>\S+)(?: -?\d+)?\z/
  HISTOGRAM_SUFFIXES = %w[_bucket _sum _count].freeze
  TYPES = %w[counter gauge histogram summary untyped].freeze

  # name => Family, in the order they came.
  def self.parse(text)
    raise Invalid, "the text does not end with a newline" unless text.empty? || text.end_with?("\n")

    families = {}
    current = nil
    text.each_line(chomp: true).with_index(1) do |line, number|
      current = read_line(families, current, line)
    rescue Invalid => e
      raise Invalid, "line #{number}: #{e.message}: #{line.inspect}"
    end
    families.each_value { |family| check_histogram(family) if family.type == "histogram" }
    families
  end

  def self.read_line(families, current, line)
    case line
    when /\A# (HELP|TYPE) (#{NAME}) ?(.*)\z/ then declare(families, current, Regexp.last_match)
    when /\A#/, "" then current
    else sample(families, current, line)
    end
  end

  def self.declare(families, current, match)
    kind, name, text = match.captures
    family = families[name] ||= Family.new(name, nil, nil, [])
    field = kind == "HELP" ? :help : :type
    must(family.samples.empty?, "#{name} is declared after its samples")
    must(current.nil? || current == family || family.help.nil?, "#{name} is declared again after another family")
    must(family[field].nil?, "a second #{kind} for #{name}")
    must(kind == "HELP" || TYPES.include?(text), "unknown type #{text.inspect}")
    family[field] = text
    family
  end

  def self.sample(families, current, line)
    match = must(SAMPLE.match(line), "not a sample")
    name = match[:name]
    family = must(family_of(families, name), "a sample of no family declared before it")
    must(family.help && family.type, "#{family.name} has no HELP and TYPE")
    must(family == current, "a sample of #{family.name} apart from the others")
    labels = labels(match[:labels].to_s)
    must(family.samples.none? { |each| each.name == name && each.labels == labels }, "the same series twice")
    family.samples << Sample.new(name, labels, number(match[:value]))
    family
  end

  # +condition+, unless it is false or nil: then the text is invalid.
  def self.must(condition, problem)
    condition or raise Invalid, problem
  end

  def self.family_of(families, name)
    return families[name] if families.key?(name)

    suffix = HISTOGRAM_SUFFIXES.find { |each| name.end_with?(each) } or return
    family = families[name.delete_suffix(suffix)]
    family if family&.type == "histogram"
  end

  def self.labels(text)
    labels = {}
    rest = text
    until rest.empty?
      match = LABEL.match(rest) or raise Invalid, "labels that do not parse: #{rest.inspect}"
      labels[match[:name]] = match[:value].gsub(/\\(.)/) { Regexp.last_match(1) == "n" ? "\n" : Regexp.last_match(1) }
      rest = match.post_match
    end
    labels
  end

  # A value as Go's ParseFloat reads it, infinities and NaN included.
  def self.number(text)
    { "+Inf" => Float::INFINITY, "-Inf" => -Float::INFINITY, "NaN" => Float::NAN }.fetch(text) { Float(text) }
  rescue ArgumentError
    raise Invalid, "#{text.inspect} is not a number"
  end

  def self.check_histogram(family)
    family.samples.group_by { |sample| sample.labels.except("le") }.each do |labels, samples|
      where = "#{family.name}#{labels}"
      by_kind = samples.group_by { |sample| sample.name.delete_prefix(family.name) }
      counts = check_buckets(where, by_kind.fetch("_bucket", []))
      count = must(by_kind["_count"], "#{where}: no _count").first.value
      must(by_kind["_sum"], "#{where}: no _sum")
      must(counts.last == count, "#{where}: +Inf #{counts.last} is not _count #{count}")
    end
  end

  # The counts of one series' buckets, checked.
  def self.check_buckets(where, buckets)
    bounds = buckets.map { |bucket| number(bucket.labels.fetch("le")) }
    counts = buckets.map(&:value)
    must(bounds == bounds.sort && bounds.uniq == bounds, "#{where}: buckets out of order")
    must(bounds.last == Float::INFINITY, "#{where}: the last bucket is not +Inf")
    must(counts.each_cons(2).all? { |a, b| a <= b }, "#{where}: buckets not cumulative")
    counts
  end

  # The value of each series of +name+ whose labels include +labels+, by
  # the labels that tell them apart (+by+).
  def self.values(families, name, by:, **labels)
    family = family_of(families, name) or return {}
    chosen = family.samples.select do |sample|
      sample.name == name && labels.all? { |key, value| sample.labels[key.to_s] == value }
    end
    chosen.to_h { |sample| [sample.labels.values_at(*by.map(&:to_s)), sample.value] }
  end
end

module E2E
  # A real Prometheus server (Debian's prometheus, which bin/setup
  # installs) scraping +targets+ every second, on a free loopback port,
  # keeping its data in +dir+; asked through its HTTP API. Every wait on it
  # is bounded.
  class PrometheusServer < Child
    JOB = "static_tracing"

    def self.executable
      E2E.which("prometheus")
    end

    attr_reader :port

    def initialize(targets:, dir:)
      @port = E2E.free_port
      config = File.join(dir, "prometheus.yml")
      File.write(config, <<~YAML)
        global:
          scrape_interval: 1s
          scrape_timeout: 1s
          evaluation_interval: 1s
        scrape_configs:
          - job_name: #{JOB}
            static_configs:
              - targets: [#{targets.map { |target| "\"#{target}\"" }.join(", ")}]
      YAML
      super(PrometheusServer.executable, "--config.file=#{config}", "--storage.tsdb.path=#{File.join(dir, "data")}",
            "--web.listen-address=127.0.0.1:#{@port}", "--log.level=warn", chdir: dir)
      wait_until("it is ready", timeout: 60) { ready? }
    end

    # The result of the instant query +promql+ at +time+ (now if nil): a
    # list of {"metric" => labels, "value" => [time, "value"]}.
    def query(promql, time: nil)
      params = { query: promql, time: }.compact
      uri = URI("http://127.0.0.1:#{@port}/api/v1/query?#{URI.encode_www_form(params)}")
      response = Net::HTTP.start(uri.host, uri.port, open_timeout: 5, read_timeout: 10) { |http| http.get(uri) }
      answer = JSON.parse(response.body)
      raise "Prometheus refused #{promql}: #{response.body}" unless answer["status"] == "success"

      answer.dig("data", "result")
    end

    # The value of each series +promql+ gives at +time+, by the labels +by+.
    def values(promql, by:, time: nil)
      query(promql, time:).to_h { |series| [series["metric"].values_at(*by), Float(series["value"][1])] }
    end

    # The time of the latest scrape of the job's every target that
    # succeeded, once one began after +after+ (a Unix time); nil until then.
    def scraped_after(after)
      up = query(%(up{job="#{JOB}"}))
      return if up.empty? || up.any? { |series| series["value"][1] != "1" }

      # An instant query's values carry the time it was asked for; the
      # samples' own are timestamp()'s values.
      times = query(%(timestamp(up{job="#{JOB}"}))).map { |series| Float(series["value"][1]) }
      times.min if times.min > after
    end

    # Waits until a scrape of every target has begun after +after+ and
    # succeeded; returns its time.
    def wait_for_scrape_after(after)
      wait_until("Prometheus has scraped after #{after}", timeout: 30) { scraped_after(after) }
    end

    def name
      "prometheus #{pid}"
    end

    private

    def ready?
      Net::HTTP.start("127.0.0.1", @port, open_timeout: 1, read_timeout: 5) { |http| http.get("/-/ready") }
               .code == "200"
    rescue SystemCallError, IOError, Net::ReadTimeout, Net::OpenTimeout
      false
    end

    def wait_until(what, timeout:)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      loop do
        value = yield
        return value if value
        raise "#{name} exited (#{@thread.value.inspect}) before #{what}:\n#{output}" unless alive?
        raise "timed out after #{timeout}s waiting until #{what}:\n#{output}" if
          Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

        sleep 0.1
      end
    end
  end

  module Helpers
    # Prometheus scraping +targets+ ("host:port"), its data in +dir+.
    def start_prometheus(targets:, dir:)
      cannot_run!("prometheus is not installed (bin/setup installs it)") unless PrometheusServer.executable
      PrometheusServer.new(targets:, dir:).tap { |server| started_processes << server }
    end
  end
end
