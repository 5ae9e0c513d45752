# frozen_string_literal: true

require "forwardable"

module StaticTracing
  module CLI
    # A recorder's ring file, or a trace file (docs/recording.md), read
    # whole: its header, its probes and the records it holds, in sequence
    # order. A live ring (a process may be writing it) is read without ever
    # returning a torn record; RingReader follows one as it is written, and
    # Writer writes trace files.
    #
    #   trace = TraceFile.read("1234-4026531836.ring")
    #   trace.records.each { |record| puts "#{record.probe.label} #{record.args.inspect}" }
    #   trace.lost # records the process reserved that are not in the file
    #
    # Everything read from the file is checked first: a file that breaks
    # the format raises FormatError, which names the file, where and what
    # was wrong; nothing is read past the size the file has, and nothing is
    # allocated that the file does not hold.
    class TraceFile
      # The file breaks the format: the message says where and how.
      class FormatError < Error; end

      # An entry of the probe table. +types+ are "Integer", "Float" or
      # "String"; +latency_arg+ the index of the argument holding a duration
      # in ns, +stack_arg+ that of a folded stack, or nil.
      Probe = Struct.new(:id, :provider, :name, :types, :latency_arg, :stack_arg) do
        def label
          "#{provider}:#{name}"
        end
      end

      # A record: +seq+ its first slot's sequence number, +time_ns+ the
      # file's CLOCK_MONOTONIC when it was made (when the call ended, for a
      # latency probe), +probe+ a Probe, +tid+ the thread, +args+ the values.
      Record = Struct.new(:seq, :time_ns, :probe, :tid, :args)

      # The header's fields, as TraceFile, RingReader and Writer share them.
      module Header
        extend Forwardable

        def_delegators :layout, :pid, :pid_namespace, :overwrite?, :complete?, :anchor_monotonic_ns,
                       :anchor_realtime_ns, :max_string, :slot_count, :wall_time_ns, :probes, :dropped
        # Records the process reserved (dropped ones not included).
        def records_total
          layout.records
        end
      end

      include Header

      class << self
        # The file at +path+, which the user named: whoever owns it. Only a
        # regular file is read (a FIFO would block).
        def read(path)
          File.open(path, File::RDONLY | File::NONBLOCK) do |file|
            stat = file.stat
            raise Error, "cannot read #{path}: it is a #{stat.ftype}, not a regular file" unless stat.file?

            from_io(file, name: path)
          end
        rescue SystemCallError => e
          raise Error, "cannot read #{path}: #{CLI.reason(e)}"
        end

        # The file open as +io+ (anything with #pread and #size), named
        # +name+ in messages.
        def from_io(io, name: io.respond_to?(:path) ? io.path : io.inspect)
          layout = Layout.new(io, name)
          return new(layout, []) if layout.slot_count.zero?

          new(layout, Slots.read_ring(layout).records)
        end
      end

      attr_reader :records

      def initialize(layout, records)
        @layout = layout
        @records = records
        return unless records.size > records_total

        layout.invalid("header field records", Layout::COUNTERS[:records],
                       "at least the #{records.size} records the file holds", records_total)
      end

      # The file's name, as messages give it.
      def name
        layout.name
      end

      # Records reserved and not read: dropped (the ring or the probe table
      # was full), overwritten (flight mode) or being written while read.
      def lost
        dropped + records_total - records.size
      end

      private

      attr_reader :layout
    end
  end
end

require_relative "trace_file/layout"
require_relative "trace_file/table_entry"
require_relative "trace_file/payload"
require_relative "trace_file/slots"
require_relative "trace_file/ring_reader"
require_relative "trace_file/writer"
