# frozen_string_literal: true

require_relative "../trace_reader_library"

module StaticTracing
  module CLI
    # A recorder's ring file, or a trace file (docs/recording.md), read
    # whole by the format's one implementation, the reader in Rust
    # (StaticTracing.trace_reader: ext/stapsdt's ring, ext/trace_reader),
    # which the command loads without the gem's runtime. Here, for the
    # command and for scripts, are what it read: the header's fields, the
    # probes and the records, as Ruby values only when asked for.
    #
    #   trace = TraceFile.read("1234-4026531836.ring")
    #   trace.records.each { |record| puts "#{record.probe.label} #{record.args.inspect}" }
    #   trace.lost # records the process reserved that are not in the file
    #
    # Everything read from the file is checked first: a file that breaks
    # the format raises FormatError, which names the file, where and what
    # was wrong; nothing is read past the size the file has, and what is
    # held follows the records the file holds, not the sizes it claims.
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
      # latency probe), +probe+ a Probe, +tid+ the thread, +args+ the values,
      # +context+ the W3C trace context it was made in: [trace_id, span_id]
      # (hex), nil outside any, or :unknown when its context record was not
      # read (overwritten in a flight ring).
      Record = Struct.new(:seq, :time_ns, :probe, :tid, :args, :context) do
        def trace_id
          context[0] if context.is_a?(Array)
        end
      end

      # Descriptors besides the files read: the standard streams, the
      # output, the reader's own.
      DESCRIPTORS_KEPT = 64

      class << self
        # The native reader (StaticTracing::TraceReader), loaded when first
        # needed: commands that read no file never load it.
        def reader
          StaticTracing.trace_reader
        end

        # The file at +path+, which the user named: whoever owns it. Only a
        # regular file is read (a FIFO would block).
        def read(path)
          open_regular(path) { |file| from_io(file, name: path) }
        end

        # Yields +path+ opened for reading once it is found a regular file.
        def open_regular(path)
          file = opened_regular(path)
          begin
            yield file
          ensure
            file.close
          end
        end

        # +path+ opened for reading, once it is found a regular file.
        def opened_regular(path)
          file = File.open(path, File::RDONLY | File::NONBLOCK)
          stat = file.stat
          return file if stat.file?

          file.close
          raise Error, "cannot read #{path}: it is a #{stat.ftype}, not a regular file"
        rescue SystemCallError => e
          file&.close
          raise Error, "cannot read #{path}: #{CLI.reason(e)}"
        end

        # The file open as +io+ (a File, or anything with #pread and
        # #size), named +name+ in messages.
        def from_io(io, name: io.respond_to?(:path) ? io.path : io.inspect)
          new(reader.read(source(io), name))
        end

        # What the reader reads: a File's descriptor, or an object's #pread.
        def source(io)
          io.is_a?(IO) ? io.fileno : io
        end

        # The files at +paths+ read, for a report (TraceReader::Traces: #check
        # refuses what a format cannot make of them, #report writes it).
        # They are open together while the reader reads them (a fleet's
        # dumps are thousands): opened one after the other, and as many
        # descriptors allowed as the hard limit lets.
        def load(paths)
          allow_descriptors(paths.size)
          opened = []
          paths.each { |path| opened << [opened_regular(path), path] }
          reader.load(opened.map { |file, path| [source(file), path] })
        ensure
          opened&.each { |file, _path| file.close }
        end

        # Room for +count+ more descriptors than the command holds, up to the
        # hard limit: past it, opening a file says "Too many open files".
        def allow_descriptors(count)
          soft, hard = ::Process.getrlimit(:NOFILE)
          wanted = count + DESCRIPTORS_KEPT
          return if wanted <= soft

          ::Process.setrlimit(:NOFILE, hard == ::Process::RLIM_INFINITY ? wanted : [wanted, hard].min, hard)
        rescue SystemCallError, NotImplementedError
          nil
        end

        # What the live ring open as +ring+ (named +name+) holds now, as a
        # trace file written to +out+ (sized to its records: the process
        # goes on writing); [records, lost, dropped].
        def dump(ring, name, out)
          reader.dump(source(ring), name, out.fileno)
        end

        # Probes from the reader's [id, provider, name, types, latency_arg, stack_arg].
        def probes_of(list)
          list.map { |entry| Probe.new(*entry) }
        end

        # Records from the reader's [seq, time_ns, probe_id, tid, args].
        def records_of(list, probes)
          list.map do |fields|
            fields[2] = probes[fields[2]]
            Record.new(*fields)
          end
        end
      end

      # +read+: the reader's TraceReader::Trace.
      def initialize(read)
        @read = read
      end

      %i[name pid pid_namespace overwrite? complete? anchor_monotonic_ns anchor_realtime_ns max_string slot_count
         dropped records_total lost].each do |field|
        define_method(field) { @read.public_send(field) }
      end

      def probes
        @probes ||= self.class.probes_of(@read.probe_list)
      end

      def records
        @records ||= self.class.records_of(@read.record_list, probes)
      end

      # The wall-clock time (ns since the epoch) of +time_ns+ on the file's clock.
      def wall_time_ns(time_ns)
        anchor_realtime_ns + time_ns - anchor_monotonic_ns
      end

      # Follows a live ring as its process writes it: each read takes the
      # records committed since the one before, #finish what is left; the
      # reader holds them for the trace file #write makes. Without
      # overwrite it stores its position in the ring's tail, which lets the
      # writer reuse the slots before it.
      #
      #   reader = TraceFile::RingReader.new(file) # opened read-write
      #   loop { reader.take; sleep 0.1 }         # or #poll: the records, as Records
      #   reader.take_rest
      #   reader.write(output)
      class RingReader
        # +from_now+: from the ring's head, reading only (a flight ring
        # another recording fills): the records made from now on.
        def initialize(io, name: io.respond_to?(:path) ? io.path : io.inspect, from_now: false)
          @io = TraceFile.source(io)
          follower = TraceFile.reader::Follower
          @follower = from_now ? follower.from_now(@io, name) : follower.new(@io, name)
        end

        # How many records were committed since the last read; they are held.
        def take
          @follower.poll(@io)
        end

        # How many records the last read found, whether or not the ones
        # before them were committed (the process exited, or it stops).
        def take_rest
          @follower.finish(@io)
        end

        # #take, returning the records it took as Records.
        def poll
          records_of_a_read { take }
        end

        # #take_rest, returning the records it took as Records.
        def finish
          records_of_a_read { take_rest }
        end

        # The sequence number of the next slot to read.
        def position
          @follower.position
        end

        def records_read
          @follower.counts[0]
        end

        # Records reserved and not read: dropped (the ring or the probe
        # table was full), overwritten (flight mode), or not read (yet).
        def lost
          @follower.counts[1]
        end

        def dropped
          @follower.counts[2]
        end

        # Writes what was read as a trace file to +io+ (a File).
        def write(io)
          @follower.write(io.fileno)
        end

        private

        def records_of_a_read
          before = @follower.held_bytes
          yield
          TraceFile.records_of(@follower.records_after(before), TraceFile.probes_of(@follower.probe_list))
        end
      end
    end
  end
end
