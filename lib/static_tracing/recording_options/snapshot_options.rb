# frozen_string_literal: true

module StaticTracing
  module RecordingOptions
    # The settings of a trigger's snapshots: where they go, how often, what
    # each holds (the slow call and a window before it, not the whole
    # ring) and what a dump directory's snapshots may take in all, whichever
    # process wrote them (its budget). Checked here for the command and the
    # process alike.
    module SnapshotOptions
      DEFAULT_DUMP_INTERVAL = 60.0
      DEFAULT_MAX_DUMPS = 10
      DEFAULT_MAX_DUMP_BYTES = 256 * MIB
      # What a snapshot holds: the slow call, and the records made in the
      # DEFAULT_DUMP_WINDOW seconds before it began, at most
      # DEFAULT_DUMP_RECORDS of them (the newest).
      DEFAULT_DUMP_WINDOW = 5.0
      DEFAULT_DUMP_RECORDS = 100_000
      DEFAULTS = { dump_dir: nil, dump_interval: DEFAULT_DUMP_INTERVAL, max_dumps: DEFAULT_MAX_DUMPS,
                   max_dump_bytes: DEFAULT_MAX_DUMP_BYTES, dump_window: DEFAULT_DUMP_WINDOW,
                   dump_records: DEFAULT_DUMP_RECORDS }.freeze
      SECONDS = (0.0..86_400.0)
      DUMP_RECORDS = (1..(1 << 32))
      MAX_DUMPS = (1..1000)
      MAX_DUMP_BYTES = (MIN_SIZE..(1 << 50))

      module_function

      # The checked settings of +values+ (#settings' keywords), defaults
      # where none is given; ArgumentError for a keyword it does not know.
      def settings(values)
        unknown = values.keys - DEFAULTS.keys
        raise ArgumentError, "unknown recording settings: #{unknown.join(", ")}" unless unknown.empty?

        values = DEFAULTS.merge(values)
        { dump_dir: values[:dump_dir] && directory(values[:dump_dir]),
          dump_interval: seconds(values[:dump_interval], "dump interval"),
          max_dumps: count(values[:max_dumps], MAX_DUMPS, "maximum of dumps"),
          max_dump_bytes: bytes(values[:max_dump_bytes]),
          dump_window: seconds(values[:dump_window], "dump window"),
          dump_records: count(values[:dump_records], DUMP_RECORDS, "number of records a snapshot holds") }
      end

      # The keywords of #settings in what the command sent (Settings#to_h).
      def from_h(hash)
        DEFAULTS.to_h { |key, default| [key, hash.fetch(key.to_s, default)] }
      end

      def define(parser, values)
        {
          "--dump-dir DIR" => [:dump_dir, "Where the process writes those snapshots (default: its stub directory)"],
          "--dump-interval SECONDS" => [:dump_interval, "At most one snapshot this often " \
                                                        "(default #{DEFAULT_DUMP_INTERVAL.to_i})"],
          "--dump-window SECONDS" => [:dump_window, "A snapshot holds the slow call and what was recorded this " \
                                                    "long before it began (default #{DEFAULT_DUMP_WINDOW.to_i})"],
          "--dump-records N" => [:dump_records, "... and at most this many records, the newest " \
                                                "(default #{DEFAULT_DUMP_RECORDS})"],
          "--max-dumps N" => [:max_dumps, "At most this many snapshots in the dump directory, whichever process " \
                                          "wrote them; the oldest are kept (default #{DEFAULT_MAX_DUMPS})"],
          "--max-dump-bytes SIZE" => [:max_dump_bytes, "At most this many bytes of snapshots in the dump directory " \
                                                       "(default #{format_size(DEFAULT_MAX_DUMP_BYTES)})"]
        }.each { |option, (key, text)| parser.on(option, text) { |value| values[key] = value } }
      end

      def format_size(bytes)
        RecordingOptions.format_size(bytes)
      end

      def directory(path)
        return path if path.is_a?(String) && !path.empty? && !path.include?("\0")

        raise ArgumentError, "invalid dump directory #{path.inspect}: give a directory's path"
      end

      def seconds(value, name)
        seconds = value.is_a?(Numeric) ? value : Float(value.to_s, exception: false)
        return seconds.to_f if seconds.is_a?(Numeric) && seconds.real? && SECONDS.cover?(seconds)

        raise ArgumentError, "invalid #{name} #{value.inspect}: give seconds from #{SECONDS.min.to_i} to " \
                             "#{SECONDS.max.to_i}"
      end

      def count(value, range, name)
        count = value.is_a?(Integer) ? value : Integer(value.to_s, 10, exception: false)
        return count if count && range.cover?(count)

        raise ArgumentError, "invalid #{name} #{value.inspect}: give a number from #{range.min} to #{range.max}"
      end

      def bytes(value)
        match = !value.is_a?(Integer) && SIZE.match(value.to_s)
        bytes = match ? Integer(match[1], 10) * UNITS.fetch(match[2].upcase) : value
        return bytes if bytes.is_a?(Integer) && MAX_DUMP_BYTES.cover?(bytes)

        raise ArgumentError, "invalid maximum of snapshot bytes #{value.inspect}: give bytes, or a number with K, " \
                             "M or G (e.g. 256M), from #{format_size(MAX_DUMP_BYTES.min)}"
      end
    end
  end
end
