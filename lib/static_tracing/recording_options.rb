# frozen_string_literal: true

require "optparse"
require "shellwords"
require_relative "durations"

module StaticTracing
  # What to record and how: the settings `static-tracing record` sends a
  # process, and StaticTracing::Recorder.start (or STATIC_TRACING_RECORD)
  # takes in the process, parsed and checked by this one module on both
  # sides. Plain Ruby: the command loads neither native library to parse
  # settings (see ARCHITECTURE.md).
  #
  #   settings = RecordingOptions.settings(probes: ["my_controller:*"], flight: true, size: "16M",
  #                                        dump_when: "my_controller:show > 250ms")
  module RecordingOptions
    KIB = 1024
    MIB = 1024 * KIB
    GIB = 1024 * MIB
    # The ring's slots take the size asked for, rounded up to a power of
    # two, within these bounds (the native side's, which checks them again).
    MIN_SIZE = 64 * KIB
    MAX_SIZE = 4 * GIB
    DEFAULT_SIZE = 8 * MIB
    DEFAULT_FLIGHT_SIZE = 16 * MIB
    UNITS = { "" => 1, "K" => KIB, "M" => MIB, "G" => GIB }.freeze
    SIZE = /\A\s*(\d+)\s*([KMG]?)(?:i?B)?\s*\z/i
    # A glob over provider and probe names: their characters, * and ?.
    GLOB = /\A[A-Za-z0-9_*?]+\z/
    TRIGGER = /\A(?<pattern>[^<>=]+?)\s*>\s*(?<threshold>[^<>=]+)\z/
    # What STATIC_TRACING_RECORD cannot do that `static-tracing record`
    # does: the command reads the ring and writes the file, not the process.
    BOOT_SECONDS = "--seconds is static-tracing record's: it follows the ring and writes the trace file when the " \
                   "time is up, which a process cannot do for itself (its recording runs until stopped); to record " \
                   "a program's first seconds, run it as static-tracing record --seconds N -- COMMAND"
    # Said by the process itself, of itself.
    def self.boot_output
      "-o is static-tracing record's, which writes the trace file; a process records into its ring " \
        "(static-tracing dump #{Process.pid} -o FILE writes a flight recording, or run the program as " \
        "static-tracing record -o FILE -- COMMAND)"
    end
    # What one request may carry at most: a request is one write to a FIFO.
    MAX_PATTERNS = 64
    # A trigger's threshold, in nanoseconds. The process keeps it in 64
    # bits (a little over 584 years); a day is far past any call worth a
    # snapshot, and a bound people can read. A threshold of 0 would snapshot
    # every call.
    THRESHOLDS = (1..(86_400 * Durations::UNITS.fetch("s")))

    # A threshold on a latency probe: a call of a probe matching +pattern+
    # that takes longer than +threshold_ns+ makes the process write a snapshot.
    Trigger = Struct.new(:pattern, :threshold_ns) do
      def to_s
        "#{pattern} > #{Durations.exact(threshold_ns)}"
      end
    end

    # Checked settings; see RecordingOptions.settings. +ring_size+: bytes,
    # as asked (the ring rounds its slots up to a power of two).
    Settings = Struct.new(:probes, :flight, :ring_size, :dump_when, :dump_dir, :dump_interval, :max_dumps,
                          :max_dump_bytes, :dump_window, :dump_records, keyword_init: true) do
      # As the command sends them and the process reads them back.
      def to_h
        { "probes" => probes, "flight" => flight, "size" => ring_size, "dump_when" => dump_when&.to_s,
          "dump_dir" => dump_dir, "dump_interval" => dump_interval, "max_dumps" => max_dumps,
          "max_dump_bytes" => max_dump_bytes, "dump_window" => dump_window, "dump_records" => dump_records }
      end
    end

    module_function

    # Checks every setting and returns Settings; ArgumentError names the
    # setting, what was given and what is allowed. +probes+: patterns
    # "provider:probe" (globs; a provider alone means all its probes),
    # none for every probe. +flight+: keep the newest records in the ring
    # rather than wait for a reader. +dump_when+ ("provider:probe > 250ms")
    # implies flight: a snapshot holds what the ring holds of the slow call
    # and of the +dump_window+ seconds before it began (+dump_records+ at
    # most). +max_dumps+ and +max_dump_bytes+: what the dump directory's
    # snapshots may take in all, whichever process wrote them. One keyword
    # a setting, as the command has one option each.
    def settings(probes: [], flight: false, size: nil, dump_when: nil, **snapshots)
      # A Trigger made elsewhere is checked as its text would be.
      trigger = dump_when && trigger(dump_when.is_a?(Trigger) ? dump_when.to_s : dump_when)
      flight = true if trigger
      Settings.new(probes: patterns(probes), flight: flight ? true : false,
                   ring_size: size.nil? ? default_size(flight) : size(size), dump_when: trigger,
                   **SnapshotOptions.settings(snapshots))
    end

    # Adds the options of a recording to +parser+ (an OptionParser); each
    # stores what it was given in +values+ (a Hash of #settings' keywords).
    # `static-tracing record` and STATIC_TRACING_RECORD read them so.
    def define(parser, values)
      parser.on("--flight", "Keep the newest records, overwriting the oldest, until stopped (a flight recorder)") do
        values[:flight] = true
      end
      parser.on("--size SIZE", "Size of the ring's records, e.g. 16M (default #{format_size(DEFAULT_SIZE)}, " \
                               "#{format_size(DEFAULT_FLIGHT_SIZE)} in flight mode)") { |size| values[:size] = size }
      parser.on("--dump-when TRIGGER", "Write a snapshot when a call is slower than this, e.g. " \
                                       "'my_controller:show > 250ms' (implies --flight)") do |trigger|
        values[:dump_when] = trigger
      end
      SnapshotOptions.define(parser, values)
    end

    # Settings from a command line of those options and probe patterns
    # (STATIC_TRACING_RECORD's value). ArgumentError if it cannot be parsed.
    def parse_arguments(text)
      values = {}
      parser = OptionParser.new do |each|
        define(each, values)
        each.on("--seconds N") { raise ArgumentError, BOOT_SECONDS }
        each.on("-o", "--output FILE") { raise ArgumentError, RecordingOptions.boot_output }
      end
      patterns = parser.parse(Shellwords.split(text))
      settings(probes: patterns, **values)
    rescue OptionParser::ParseError => e
      raise ArgumentError, e.message
    end

    # Settings from what the command sent (Settings#to_h), checked again.
    def from_h(hash)
      raise ArgumentError, "recording settings must be a JSON object, got #{hash.inspect}" unless hash.is_a?(Hash)

      settings(probes: hash.fetch("probes", []), flight: hash["flight"] == true, size: hash["size"],
               dump_when: hash["dump_when"], **SnapshotOptions.from_h(hash))
    end

    def default_size(flight)
      flight ? DEFAULT_FLIGHT_SIZE : DEFAULT_SIZE
    end

    # Bytes, from an Integer or "512K", "16M", "1G" (binary units).
    def size(value)
      bytes = case value
              when Integer then value
              when String
                match = SIZE.match(value) or raise ArgumentError, size_message(value)
                Integer(match[1], 10) * UNITS.fetch(match[2].upcase)
              else raise ArgumentError, size_message(value)
              end
      return bytes if bytes.between?(MIN_SIZE, MAX_SIZE)

      raise ArgumentError, "ring size #{value.inspect} is out of range: from #{format_size(MIN_SIZE)} " \
                           "to #{format_size(MAX_SIZE)}"
    end

    def size_message(value)
      "invalid ring size #{value.inspect}: give bytes, or a number with K, M or G (e.g. 16M), " \
        "from #{format_size(MIN_SIZE)} to #{format_size(MAX_SIZE)}"
    end

    # What a ring of +bytes+ (as asked) takes: its slots rounded up to a
    # power of two.
    def slots_size(bytes)
      1 << (bytes - 1).bit_length
    end

    def format_size(bytes)
      unit, scale = [["G", GIB], ["M", MIB], ["K", KIB]].find { |_, each| bytes >= each && (bytes % each).zero? }
      unit ? "#{bytes / scale}#{unit}" : bytes.to_s
    end

    # Patterns, checked; none means every probe.
    def patterns(list)
      list = Array(list)
      if list.size > MAX_PATTERNS
        raise ArgumentError, "#{list.size} probe patterns given, at most #{MAX_PATTERNS} are accepted"
      end

      list.map { |pattern| pattern(pattern) }.uniq
    end

    # "provider:probe", "provider" (all its probes) or "*": names with * and ? as globs.
    def pattern(pattern)
      text = pattern.is_a?(Symbol) ? pattern.to_s : pattern
      raise ArgumentError, pattern_message(pattern) unless text.is_a?(String)

      provider, probe, extra = text.split(":", -1)
      probe ||= "*"
      raise ArgumentError, pattern_message(pattern) unless extra.nil? && [provider, probe].all? { GLOB.match?(_1) }

      "#{provider}:#{probe}"
    end

    def pattern_message(pattern)
      "invalid probe pattern #{pattern.inspect}: give PROVIDER:PROBE or PROVIDER, names of letters, digits " \
        "and underscores with * and ? as wildcards (e.g. my_controller:*, *:show)"
    end

    # Whether the probe +provider+:+probe+ is one +patterns+ name (every
    # probe when there are none).
    def match?(patterns, provider, probe)
      return true if patterns.empty?

      label = "#{provider}:#{probe}"
      patterns.any? { |pattern| File.fnmatch?(pattern, label) }
    end

    # "my_controller:show > 250ms" => Trigger.
    def trigger(text)
      match = text.is_a?(String) && TRIGGER.match(text.strip)
      unless match
        raise ArgumentError, "invalid trigger #{text.inspect}: give PROBE > DURATION, e.g. " \
                             "\"my_controller:show > 250ms\" (units ns, us, ms, s)"
      end

      Trigger.new(pattern(match[:pattern]), threshold(match[:threshold], text))
    end

    def threshold(duration, trigger)
      nanoseconds = Durations.parse(duration)
      return nanoseconds if THRESHOLDS.cover?(nanoseconds)

      raise ArgumentError, "trigger threshold #{duration.strip.inspect} in #{trigger.inspect} is out of range: " \
                           "give at least 1ns and at most #{Durations.exact(THRESHOLDS.max)} (a day)"
    end
  end
end

# Loaded once RecordingOptions' units and size rule are there.
require_relative "recording_options/snapshot_options"
