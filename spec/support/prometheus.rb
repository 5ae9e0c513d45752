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
