# frozen_string_literal: true

require "json"

module StaticTracing
  module CLI
    class Report < Command
      # Records as Chrome trace-event JSON (the Trace Event Format), which
      # Perfetto UI, chrome://tracing and speedscope open: per process a
      # process_name metadata event; per call of a latency probe a complete
      # event ("X") from its start (its end, when the record was made, less
      # its latency) for its latency; per other record an instant event
      # ("i", thread scoped). Times are wall-clock microseconds, written with
      # all three decimals of their nanoseconds (Perfetto keeps them).
      class ChromeTrace
        # Written out in pieces of about this many bytes.
        CHUNK = 1 << 20

        def initialize(traces)
          @traces = traces
        end

        def write(out)
          @out = out
          @buffer = +%({"traceEvents":[\n)
          @first = true
          @traces.each { |trace| write_trace(trace) }
          @buffer << %(\n],"displayTimeUnit":"ns"}\n)
          out.write(@buffer)
        end

        private

        def write_trace(trace)
          pid = trace.pid
          event(%({"name":"process_name","ph":"M","ts":0,"pid":#{pid},"tid":0,"args":{"name":"ruby #{pid}"}}))
          prefixes = trace.probes.map { |probe| prefix(probe) }
          # The wall-clock time of the file's clock at 0, added to each record's.
          epoch = trace.wall_time_ns(0)
          trace.records.each do |record|
            probe = record.probe
            time = epoch + record.time_ns
            event(if probe.latency_arg
                    complete(prefixes[probe.id], probe.latency_arg, record, time, pid)
                  else
                    instant(prefixes[probe.id], record, time, pid)
                  end)
          end
        end

        def prefix(probe)
          %({"name":#{JSON.generate(probe.label)},"cat":#{JSON.generate(probe.provider)},"ph":) +
            (probe.latency_arg ? %("X") : %("i","s":"t"))
        end

        # A negative latency (the process fired one) lasts nothing.
        def complete(prefix, latency_arg, record, time, pid)
          latency = [record.args[latency_arg], 0].max
          %(#{prefix},"ts":#{micros(time - latency)},"dur":#{micros(latency)},"pid":#{pid},"tid":#{record.tid},) +
            %("args":{#{arguments(record.args, latency_arg)}}})
        end

        def instant(prefix, record, time, pid)
          %(#{prefix},"ts":#{micros(time)},"pid":#{pid},"tid":#{record.tid},"args":{#{arguments(record.args)}}})
        end

        # "arg0":value, ... by the arguments' positions, but the one left out.
        def arguments(args, left_out = nil)
          pairs = []
          args.each_with_index do |value, index|
            pairs << %("arg#{index}":#{value(value)}) unless index == left_out
          end
          pairs.join(",")
        end

        def value(value)
          case value
          when Integer then value.to_s
          when Float then value.finite? ? value.to_s : JSON.generate(value.to_s)
          else JSON.generate(value.scrub)
          end
        end

        # Nanoseconds as microseconds with three decimals: exact.
        def micros(nanoseconds)
          whole, fraction = nanoseconds.abs.divmod(1000)
          format("%<sign>s%<whole>d.%<fraction>03d", sign: nanoseconds.negative? ? "-" : "", whole:, fraction:)
        end

        def event(json)
          @buffer << ",\n" unless @first
          @first = false
          @buffer << json
          return if @buffer.bytesize < CHUNK

          @out.write(@buffer)
          @buffer = +""
        end
      end
    end
  end
end
