# frozen_string_literal: true

require "fileutils"
require "json"
require "net/http"
require "tmpdir"
require "uri"

# The Prometheus text exposition format (0.0.4), or OpenMetrics 1.0, read
# back as Prometheus reads it, with the rules the metrics `static-tracing
# export` and StaticTracing::Rack::Metrics serve are held to: every family
# has its HELP and TYPE before its samples, a family's samples are
# together, no series twice, and each histogram's buckets are cumulative,
# end in +Inf, and +Inf is its _count. OpenMetrics adds: the text ends with
# `# EOF`, a counter's family is named without its samples' `_total`, a
# UNIT is the end of its family's name, and exemplars (on a histogram's
# buckets and a counter's total only) have labels of at most 128
# characters, a value and a timestamp.
module PrometheusText
  class Invalid < StandardError; end

  Family = Struct.new(:name, :help, :type, :samples, :unit)
  Sample = Struct.new(:name, :labels, :value, :exemplar)
  Exemplar = Struct.new(:labels, :value, :timestamp)

  NAME = /[a-zA-Z_:][a-zA-Z0-9_:]*/
  LABEL = /\A(?<name>[a-zA-Z_][a-zA-Z0-9_]*)="(?<value>(?:[^"\\\n]|\\[\\"n])*)",?/
  EXEMPLAR = / \# \{(?<exemplar>[^}]*)\} (?<exemplar_value>\S+)(?: (?<exemplar_time>\S+))?/
  SAMPLE = /\A(?<name>#{NAME})(?:\{(?<labels>[^}]*)\})? (?<value>\S+)(?: -?\d+(?:\.\d+)?)?(?:#{EXEMPLAR})?\z/
  TYPES = %w[counter gauge histogram summary untyped].freeze
  EOF = "# EOF\n"

  # name => Family, in the order they came; +open_metrics+: read as
  # OpenMetrics.
  def self.parse(text, open_metrics: false)
    Reader.new(open_metrics).read(text)
  end

  # One text read line by line: the families so far, and the one whose
  # samples come now.
  class Reader
    def initialize(open_metrics)
      @open_metrics = open_metrics
      @families = {}
      @current = nil
    end

    def read(text)
      lines(text).each_line(chomp: true).with_index(1) do |line, number|
        read_line(line)
      rescue Invalid => e
        raise Invalid, "line #{number}: #{e.message}: #{line.inspect}"
      end
      @families.each_value { |family| PrometheusText.check_histogram(family) if family.type == "histogram" }
      @families
    end

    private

    def must(condition, problem) = PrometheusText.must(condition, problem)

    # The text's lines of families, checked to end as they must.
    def lines(text)
      must(text.empty? || text.end_with?("\n"), "the text does not end with a newline")
      return text unless @open_metrics

      must(text.end_with?(EOF), "OpenMetrics text that does not end with # EOF")
      text.delete_suffix(EOF)
    end

    def read_line(line)
      case line
      when /\A# (HELP|TYPE|UNIT) (#{NAME}) ?(.*)\z/ then declare(*Regexp.last_match.captures)
      when "# EOF" then must(false, "# EOF before the end")
      when /\A#/, "" then nil
      else sample(line)
      end
    end

    def declare(kind, name, text)
      family = @families[name] ||= Family.new(name, nil, nil, [])
      must(family.samples.empty?, "#{name} is declared after its samples")
      must(@current.nil? || @current == family || family.help.nil?, "#{name} is declared again after another family")
      @current = family
      return unit(family, text) if kind == "UNIT"

      field = kind == "HELP" ? :help : :type
      must(family[field].nil?, "a second #{kind} for #{name}")
      type(name, text) if kind == "TYPE"
      family[field] = text
    end

    def type(name, text)
      must(TYPES.include?(text), "unknown type #{text.inspect}")
      must(!(@open_metrics && text == "counter" && name.end_with?("_total")),
           "an OpenMetrics counter family named with _total")
    end

    def unit(family, text)
      must(@open_metrics && family.name.end_with?("_#{text}"), "a UNIT that does not end its family's name")
      family.unit = text
    end

    def sample(line)
      match = must(SAMPLE.match(line), "not a sample")
      name = match[:name]
      family = must(PrometheusText.family_of(@families, name, open_metrics: @open_metrics),
                    "a sample of no family declared before it")
      must(family.help && family.type, "#{family.name} has no HELP and TYPE")
      must(family == @current, "a sample of #{family.name} apart from the others")
      labels = PrometheusText.labels(match[:labels].to_s)
      must(family.samples.none? { |each| each.name == name && each.labels == labels }, "the same series twice")
      family.samples << Sample.new(name, labels, PrometheusText.number(match[:value]), exemplar(family, name, match))
    end

    def exemplar(family, name, match)
      return unless match[:exemplar]

      must(@open_metrics, "an exemplar outside OpenMetrics")
      must(%W[#{family.name}_bucket #{family.name}_total].include?(name), "an exemplar on #{name}")
      labels = PrometheusText.labels(match[:exemplar])
      must(labels.sum { |key, value| key.size + value.size } <= 128, "exemplar labels longer than 128 characters")
      time = match[:exemplar_time] && PrometheusText.number(match[:exemplar_time])
      Exemplar.new(labels, PrometheusText.number(match[:exemplar_value]), time)
    end
  end

  # +condition+, unless it is false or nil: then the text is invalid.
  def self.must(condition, problem)
    condition or raise Invalid, problem
  end

  # The family a sample named +name+ is of: a histogram's for its
  # _bucket, _sum and _count, a counter's for its _total in OpenMetrics
  # (the text format names the family with it).
  def self.family_of(families, name, open_metrics: false)
    family = families[name]
    return family if family && !(open_metrics && family.type == "counter")

    parts = name.match(/\A(.*)(_total|_bucket|_sum|_count)\z/) or return
    of_suffix(families, *parts.captures)
  end

  def self.of_suffix(families, base, suffix)
    family = families[base]
    family if family&.type == (suffix == "_total" ? "counter" : "histogram")
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
    samples(families, name, **labels).to_h { |sample| [sample.labels.values_at(*by.map(&:to_s)), sample.value] }
  end

  # The exemplar of each series of +name+ that has one, by +by+.
  def self.exemplars(families, name, by:, **labels)
    samples(families, name, **labels).select(&:exemplar)
                                     .to_h { |sample| [sample.labels.values_at(*by.map(&:to_s)), sample.exemplar] }
  end

  def self.samples(families, name, **labels)
    family = family_of(families, name) or return []
    family.samples.select do |sample|
      sample.name == name && labels.all? { |key, value| sample.labels[key.to_s] == value }
    end
  end
end

module E2E
  # A real Prometheus server (Debian's prometheus, which bin/setup
  # installs) scraping +targets+ every second, on a free loopback port,
  # keeping its data in +dir+, with the feature flags +features+
  # (exemplar-storage: it keeps the exemplars it scrapes); asked through
  # its HTTP API. Every wait on it is bounded.
  class PrometheusServer < Child
    JOB = "static_tracing"

    def self.executable
      E2E.which("prometheus")
    end

    attr_reader :port

    def initialize(targets:, dir:, features: [])
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
            "--web.listen-address=127.0.0.1:#{@port}", "--log.level=warn",
            *features.map { |feature| "--enable-feature=#{feature}" }, chdir: dir)
      wait_until("it is ready", timeout: 60) { ready? }
    end

    # The result of the instant query +promql+ at +time+ (now if nil): a
    # list of {"metric" => labels, "value" => [time, "value"]}.
    def query(promql, time: nil)
      api("query", query: promql, time:)["result"]
    end

    # The exemplars of the series +promql+ selects, kept from +from+ to
    # +to+ (Unix times): a list of {"seriesLabels" => labels, "exemplars" =>
    # [{"labels" => ..., "value" => "...", "timestamp" => ...}]}.
    def exemplars(promql, from:, to:)
      api("query_exemplars", query: promql, start: from, end: to)
    end

    # Each target Prometheus scrapes, as /api/v1/targets gives it
    # ("health", "lastError", "scrapeUrl", ...).
    def targets
      api("targets")["activeTargets"]
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

    # The data of the answer to GET /api/v1/+path+ with +params+.
    def api(path, **params)
      query = URI.encode_www_form(params.compact)
      uri = URI("http://127.0.0.1:#{@port}/api/v1/#{path}#{"?#{query}" unless query.empty?}")
      response = Net::HTTP.start(uri.host, uri.port, open_timeout: 5, read_timeout: 10) { |http| http.get(uri) }
      answer = JSON.parse(response.body)
      raise "Prometheus refused #{uri}: #{response.body}" unless answer["status"] == "success"

      answer["data"]
    end

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
    def start_prometheus(targets:, dir:, features: [])
      cannot_run!("prometheus is not installed (bin/setup installs it)") unless PrometheusServer.executable
      PrometheusServer.new(targets:, dir:, features:).tap { |server| started_processes << server }
    end
  end
end
