# frozen_string_literal: true

require "static_tracing/cli"
require "English"
require "tmpdir"

# W3C trace contexts: the API that sets them per thread and fiber, what it
# refuses, and that the recorder ties each record to the context it was
# made in (the ring read back as static-tracing reads it).
RSpec.describe "Trace contexts" do
  include E2E::Helpers

  let(:trace_id) { "4bf92f3577b34da6a3ce929d0e0e4736" }
  let(:span_id) { "00f067aa0ba902b7" }
  let(:other_trace) { "0af7651916cd43dd8448eb211c80319c" }
  let(:other_span) { "b7ad6b7169203331" }

  # Whatever an example set and left set, cleared innermost first.
  let(:set) { [] }

  def set_context(*ids) = StaticTracing.set_trace_context(*ids).tap { |token| set << token }

  after do
    set.reverse_each do |token|
      StaticTracing.clear_trace_context(token)
    rescue StaticTracing::TraceContextError
      nil
    end
    expect(StaticTracing.current_trace_context).to be_nil
  end

  describe "the API" do
    it "sets a context for the block, nests, and puts the outer one back" do
      seen = StaticTracing.with_trace_context(trace_id, span_id) do
        expect(StaticTracing.current_trace_context).to have_attributes(trace_id:, span_id:)
        inner = StaticTracing.with_trace_context(other_trace, other_span) { StaticTracing.current_trace_context }
        [inner.trace_id, StaticTracing.current_trace_context]
      end
      expect(seen[0]).to eq(other_trace)
      expect(seen[1]).to have_attributes(trace_id:)
      expect(StaticTracing.current_trace_context).to be_nil
    end

    it "clears the context when the block raises, and lets the exception through" do
      expect do
        StaticTracing.with_trace_context(trace_id, span_id) { raise IOError, "boom" }
      end.to raise_error(IOError, "boom")
      expect(StaticTracing.current_trace_context).to be_nil
    end

    it "clears the context when the block breaks, throws, returns, or its fiber yields" do
      expect(StaticTracing.with_trace_context(trace_id, span_id) { break 5 }).to eq(5)
      expect(catch(:out) { StaticTracing.with_trace_context(trace_id, span_id) { throw :out, 7 } }).to eq(7)
      returning = Class.new { def call(ids) = StaticTracing.with_trace_context(*ids) { return 9 } }
      expect(returning.new.call([trace_id, span_id])).to eq(9)
      expect(StaticTracing.current_trace_context).to be_nil
      fiber = Fiber.new do
        StaticTracing.with_trace_context(trace_id, span_id) do
          Fiber.yield(StaticTracing.current_trace_context.trace_id)
          :done
        end
      end
      expect(fiber.resume).to eq(trace_id)
      expect(StaticTracing.current_trace_context).to be_nil
      expect(fiber.resume).to eq(:done)
    end

    it "refuses ids that are not W3C ids, saying the form expected, and sets nothing" do
      [["4bf9", span_id, /a trace id is 32 lowercase hex digits.*got "4bf9" \(4 characters\)/],
       [trace_id.upcase, span_id, /character 2 is an upper-case digit/],
       [trace_id, "00f067aa0ba902bz", /a span id is 16 lowercase hex digits.*character 16 is not a hex digit/],
       ["0" * 32, span_id, /trace id.*all zero/],
       [trace_id, "0" * 16, /span id.*all zero/]].each do |trace, span, message|
        expect { StaticTracing.with_trace_context(trace, span) { :ran } }.to raise_error(ArgumentError, message)
      end
      expect { StaticTracing.set_trace_context(1, span_id) }.to raise_error(TypeError, /a trace id is a String/)
      expect { StaticTracing.with_trace_context(trace_id, span_id) }.to raise_error(ArgumentError, /needs a block/)
      expect(StaticTracing.current_trace_context).to be_nil
    end

    it "refuses a context cleared out of order, twice, or where it was not set, and changes nothing" do
      outer = set_context(trace_id, span_id)
      inner = set_context(other_trace, other_span)
      inner_context = StaticTracing.current_trace_context
      out_of_order = "the trace #{trace_id} span #{span_id} was cleared before the contexts set inside it, " \
                     "still set: trace #{other_trace} span #{other_span}; clear those first"
      expect { StaticTracing.clear_trace_context(outer) }
        .to raise_error(StaticTracing::TraceContextError, out_of_order)
      expect(StaticTracing.current_trace_context).to eq(inner_context)

      elsewhere = Thread.new { StaticTracing.clear_trace_context(inner) rescue $ERROR_INFO }.value # rubocop:disable Style/RescueModifier
      expect(elsewhere).to be_a(StaticTracing::TraceContextError)
      expect(elsewhere.message)
        .to match(/was set on another thread: clear a context on the thread and fiber that set it/)
      fiber = Fiber.new { StaticTracing.clear_trace_context(inner) rescue $ERROR_INFO }.resume # rubocop:disable Style/RescueModifier
      expect(fiber.message).to eq("the trace #{other_trace} span #{other_span} was set on another fiber of this " \
                                  "thread: clear a context on the thread and fiber that set it")
      expect(StaticTracing.current_trace_context).to eq(inner_context)

      StaticTracing.clear_trace_context(inner)
      expect { StaticTracing.clear_trace_context(inner) }
        .to raise_error(StaticTracing::TraceContextError, "the trace #{other_trace} span #{other_span} was " \
                                                          "cleared already")
      expect(StaticTracing.current_trace_context).to have_attributes(trace_id:, span_id:)
      expect { StaticTracing.clear_trace_context(outer + 1_000) }
        .to raise_error(StaticTracing::TraceContextError, /no context was set with token #{outer + 1_000}/o)
      ["context", -1, 2**64, 1.0, nil].each do |wrong|
        expect { StaticTracing.clear_trace_context(wrong) }
          .to raise_error(TypeError, /takes the token set_trace_context returned, got/)
      end
      expect(StaticTracing.current_trace_context).to have_attributes(trace_id:, span_id:)
    end

    it "deals in a token from set_trace_context, and gives a frozen TraceContext of the ids, which only it makes" do
      token = set_context(trace_id, span_id)
      expect(token).to be_an(Integer)
      context = StaticTracing.current_trace_context
      expect(context).to be_a(StaticTracing::TraceContext).and be_frozen
      expect(context).to have_attributes(trace_id:, span_id:, to_s: "trace #{trace_id} span #{span_id}")
      expect(context).to eq(StaticTracing.current_trace_context)
      expect(context).not_to respond_to(:trace_id=)
      expect { StaticTracing::TraceContext.new(trace_id, span_id) }.to raise_error(NoMethodError)
      StaticTracing.clear_trace_context(set.pop)
      expect(StaticTracing.current_trace_context).to be_nil
    end

    it "clears contexts a block left set inside it, and says so" do
      expect do
        StaticTracing.with_trace_context(trace_id, span_id) { set_context(other_trace, other_span) }
      end.to raise_error(StaticTracing::TraceContextError,
                         /contexts set inside .* were left set, and are cleared: trace #{other_trace}/o)
      expect(StaticTracing.current_trace_context).to be_nil
      expect { StaticTracing.clear_trace_context(set.pop) }
        .to raise_error(StaticTracing::TraceContextError, "the trace #{other_trace} span #{other_span} was " \
                                                          "cleared already")
    end

    it "keeps a context per thread and per fiber" do
      StaticTracing.with_trace_context(trace_id, span_id) do
        expect(Thread.new { StaticTracing.current_trace_context }.value).to be_nil
        expect(Fiber.new { StaticTracing.current_trace_context }.resume).to be_nil
      end
    end

    it "parses a traceparent as W3C Trace Context level 1 says, ignoring an invalid one" do
      parse = ->(header) { StaticTracing::TraceContext.parse_traceparent(header) }
      expect(parse["00-#{trace_id}-#{span_id}-01"]).to eq([trace_id, span_id])
      expect(parse["cc-#{trace_id}-#{span_id}-01-future"]).to eq([trace_id, span_id])
      ["00-#{trace_id}-#{span_id}-01-extra", "00-#{trace_id.upcase}-#{span_id}-01", "ff-#{trace_id}-#{span_id}-01",
       "00-#{"0" * 32}-#{span_id}-01", "00-#{trace_id}-#{span_id}", "", nil, 42].each do |header|
        expect(parse[header]).to be_nil, header.inspect
      end
    end
  end

  describe "in a recording" do
    include_context "with the recorder of this process"

    let(:tracepoint) { StaticTracing::Tracepoint.new(:ctx_app, :call, Integer) }
    let(:text) { StaticTracing::Tracepoint.new(:ctx_app, :text, String) }

    def ring
      StaticTracing::CLI::TraceFile.read(StaticTracing::Recorder.status.fetch("ring"))
    end

    def contexts(trace)
      trace.records.map { |record| [record.args.first, record.context] }
    end

    it "ties each record to the context its fiber was in, none outside any" do
      StaticTracing::Recorder.start(probes: ["ctx_app:*"])
      tracepoint.fire(1)
      StaticTracing.with_trace_context(trace_id, span_id) do
        tracepoint.fire(2)
        text.fire("three")
        Fiber.new do
          tracepoint.fire(4)
          StaticTracing.with_trace_context(other_trace, other_span) { tracepoint.fire(5) }
        end.resume
        tracepoint.fire(6)
      end
      tracepoint.fire(7)

      expect(contexts(ring)).to eq([[1, nil], [2, [trace_id, span_id]], ["three", [trace_id, span_id]],
                                    [4, nil], [5, [other_trace, other_span]], [6, [trace_id, span_id]], [7, nil]])
      expect(ring.lost).to eq(0)
    end

    it "keeps each fiber's context through GC.compact" do
      skip "GC.compact is not available here" unless GC.respond_to?(:compact)

      StaticTracing::Recorder.start(probes: ["ctx_app:*"])
      fiber = Fiber.new do
        StaticTracing.with_trace_context(other_trace, other_span) do
          Fiber.yield
          tracepoint.fire(2)
        end
      end
      StaticTracing.with_trace_context(trace_id, span_id) do
        fiber.resume
        GC.compact
        tracepoint.fire(1)
        fiber.resume
      end
      expect(contexts(ring)).to eq([[1, [trace_id, span_id]], [2, [other_trace, other_span]]])
    end

    # A record in the context of the thread's last record is told apart by
    # the running fiber's key alone: fibers that take turns, each in its
    # own context and none setting one between turns, must still each get
    # their own, as must a fiber that ended and one that reuses its stack.
    it "keeps fibers taking turns, ending and starting, each in its own context" do
      ids = Array.new(4) { |index| [format("%032x", index + 1), format("%016x", index + 1)] }
      StaticTracing::Recorder.start(probes: ["ctx_app:*"])
      fibers = ids.each_with_index.map do |(trace, span), index|
        Fiber.new do
          StaticTracing.with_trace_context(trace, span) do
            3.times do |turn|
              tracepoint.fire((10 * turn) + index)
              Fiber.yield
            end
          end
        end
      end
      StaticTracing.with_trace_context(trace_id, span_id) do
        4.times do
          fibers.each { |fiber| fiber.resume if fiber.alive? }
          tracepoint.fire(-1)
        end
        Fiber.new { tracepoint.fire(99) }.resume
        tracepoint.fire(-2)
      end

      expected = Array.new(3) do |turn|
        ids.each_with_index.map { |(trace, span), index| [(10 * turn) + index, [trace, span]] } +
          [[-1, [trace_id, span_id]]]
      end
      expect(contexts(ring)).to eq(expected.flatten(1) + [[-1, [trace_id, span_id]], [99, nil],
                                                          [-2, [trace_id, span_id]]])
    end

    # The first context a process sets works out how fibers are told apart,
    # by running fibers, at whose switches Ruby may run another thread:
    # threads setting their first contexts at once must neither wait on it
    # forever nor get another's records.
    context "in a process whose threads set its first contexts at once", :child_process do
      after { stop_started_processes }

      it "ties each thread's and fiber's records to its own context" do
        app = ruby_repl(<<~RUBY)
          require "static_tracing/cli"
          StaticTracing::Configuration.mode = :off
          $point = StaticTracing::Tracepoint.new(:first_ctx, :call, Integer)
        RUBY
        records = app.evaluate(<<~'RUBY', timeout: 60)
          StaticTracing::Recorder.start(probes: ["first_ctx:*"])
          start = Queue.new
          threads = Array.new(8) do |index|
            Thread.new do
              start.pop
              StaticTracing.with_trace_context(format("%032x", index + 1), format("%016x", index + 1)) do
                $point.fire(index)
                Fiber.new { $point.fire(100 + index) }.resume
                $point.fire(200 + index)
              end
            end
          end
          8.times { start << :go }
          threads.each { |thread| thread.join(30) or raise "a thread setting its first context never ended" }
          trace = StaticTracing::CLI::TraceFile.read(StaticTracing::Recorder.status.fetch("ring"))
          trace.records.map { |record| [record.args.first, record.context] }.sort_by(&:first)
        RUBY
        expect(records).to eq(Array.new(8) do |index|
          ids = [format("%032x", index + 1), format("%016x", index + 1)]
          [[index, ids], [100 + index, nil], [200 + index, ids]]
        end.flatten(1).sort_by(&:first))
      end
    end

    it "gives a context set before the recording started to the thread's first records" do
      StaticTracing.with_trace_context(trace_id, span_id) do
        StaticTracing::Recorder.start(probes: ["ctx_app:*"])
        tracepoint.fire(1)
        Thread.new { tracepoint.fire(2) }.join
      end
      expect(contexts(ring)).to eq([[1, [trace_id, span_id]], [2, nil]])
    end

    it "names the slow call's trace id in a trigger's line, and its snapshot holds the call's context" do
      dir = Dir.mktmpdir("ctx_trigger")
      stderr = $stderr
      $stderr = StringIO.new
      request = StaticTracing::Tracepoint.new(:ctx_rack, :request, Integer, latency: 0)
      StaticTracing::Recorder.start(probes: ["ctx_rack:*"], dump_when: "ctx_rack:request > 1ms", dump_dir: dir,
                                    size: "64K")
      request.fire(10_000)
      StaticTracing.with_trace_context(trace_id, span_id) { request.fire(5_000_000) }

      snapshot = eventually("the snapshot") { Dir[File.join(dir, "*.trace")].first }
      expect(contexts(StaticTracing::CLI::TraceFile.read(snapshot)))
        .to eq([[10_000, nil], [5_000_000, [trace_id, span_id]]])
      eventually("the snapshot's warning") { $stderr.string.end_with?("\n") }
      expect($stderr.string).to eq("static_tracing: ctx_rack:request took 5ms (trace #{trace_id}) " \
                                   "(ctx_rack:request > 1ms): wrote #{snapshot}\n")
    ensure
      $stderr = stderr
      FileUtils.rm_rf(dir)
    end

    it "says context unknown for a record whose context record a flight ring overwrote" do
      StaticTracing::Recorder.start(probes: ["ctx_app:*"], flight: true, size: "64K")
      StaticTracing.with_trace_context(trace_id, span_id) do
        5000.times { |value| tracepoint.fire(value) }
      end
      records = ring.records
      expect(records.first.args.first).to be > 0
      expect(records.map(&:context).uniq).to eq([:unknown])
    end
  end
end
