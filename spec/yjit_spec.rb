# frozen_string_literal: true

# Tracing code that YJIT compiled: what a JIT can change under the gem.
# YJIT compiles a caller against the method it finds, and throws that code
# away (invalidates it) when a method is defined or removed on the path, as
# a wrapper's coming and going does; it calls C methods from its own code,
# reads frames as its code left them, and moves nothing the GC does not
# tell it of. Each example runs a child with every method compiled on its
# first call (YJIT::CHILD_OPTIONS): what it calls is the compiled code from
# the start, before the wrapper comes and after. Skipped where the Ruby has
# no YJIT; the matrix lane's 3.4-yjit suite runs them
# (STATIC_TRACING_REQUIRE_YJIT=1 fails them instead).
RSpec.describe "Tracing code YJIT compiled", :yjit do
  # YJIT's counters of the child: compiled code there, and thrown away.
  let(:stats) { "RubyVM::YJIT.runtime_stats.slice(:compiled_iseq_count, :invalidation_count)" }

  def yjit_process(setup, env: {})
    ruby_repl(<<~RUBY, env: { "RUBYOPT" => YJIT::CHILD_OPTIONS }.merge(env))
      raise "YJIT is off in the child: \#{RUBY_DESCRIPTION}" unless RubyVM::YJIT.enabled?
      #{setup}
    RUBY
  end

  def counts(output)
    output.scan(/^@(\w+): (\d+)$/).to_h.transform_values(&:to_i)
  end

  describe "without a tracer", :subprocess do
    it "records every call compiled callers make through the wrapper the recorder puts in, and keeps their " \
       "results through the wrapper's coming and going" do
      app = yjit_process(<<~RUBY)
        require "static_tracing/cli"
        class Till
          include StaticTracing::LatencyTracer
          def price(amount, tax: 0) = amount + tax
        end
        def total(count) = count.times.sum { |index| Till.new.price(index, tax: 1) }
        def wrapped = Till.instance_method(:price).owner != Till
        def recorded(ring) = StaticTracing::CLI::TraceFile.read(ring).records.map { |record| record.probe.label }.tally
      RUBY
      expect(app.evaluate("total(100)")).to eq(5050)
      compiled = app.evaluate(stats)
      expect(compiled[:compiled_iseq_count]).to be_positive

      ring = app.evaluate('StaticTracing::Recorder.start(probes: ["till:price"], flight: true)["ring"]')
      expect(app.evaluate("wrapped")).to be(true)
      armed = app.evaluate(stats)
      expect(armed[:invalidation_count]).to be > compiled[:invalidation_count]
      expect(app.evaluate("total(250)")).to eq(31_375)
      expect(app.evaluate("recorded(#{ring.inspect})")).to eq("till:price" => 250)

      expect(app.evaluate("StaticTracing::Recorder.stop; wrapped")).to be(false)
      expect(app.evaluate(stats)[:invalidation_count]).to be > armed[:invalidation_count]
      expect(app.evaluate("total(100)")).to eq(5050)
    end

    # The same script under the interpreter and under YJIT: the frames a
    # traced method sees (caller_locations) and those StackTracer folds,
    # wrapped with nothing attached (the wrapper's tail call), armed (the
    # timed call's wrapper frame) and unwrapped again.
    it "shows a traced method, and StackTracer, the frames the interpreter shows" do
      script = <<~'RUBY'
        StaticTracing::Configuration.mode = :on
        class Depot
          include StaticTracing::LatencyTracer
          def fetch(depth) = depth.zero? ? where : fetch(depth - 1)
          def where
            [caller_locations(0).map { |frame| [frame.label, frame.path, frame.lineno] },
             StaticTracing::Native.folded_stack("leaf", 1, 10_000)]
          end
        end
        def visit = [1].each { 2.times { return Depot.new.fetch(2) } }
        seen = [visit]
        StaticTracing::Recorder.start(flight: true, size: "64K")
        seen << visit
        StaticTracing::Recorder.stop
        StaticTracing.disable!
        seen << visit
        puts "yjit=#{RubyVM::YJIT.enabled?}", seen.inspect
      RUBY
      runs = { "--disable-yjit" => false, YJIT::CHILD_OPTIONS => true }.map do |options, yjit|
        out, status = Open3.capture2e({ "RUBYOPT" => options }, RbConfig.ruby, "-I", E2E::LIB, "-r", "static_tracing",
                                      "-e", script)
        expect(status).to be_success, out
        expect(out.lines.first.chomp).to eq("yjit=#{yjit}")
        out.lines.drop(1).join
      end
      expect(runs.last).to eq(runs.first)
      expect(runs.last).to include("<internal:static_tracing method wrapper>") # the armed call's frame
    end

    it "keeps $~ where compiled callers of a traced C method read it, through a heap compaction" do
      app = yjit_process(<<~RUBY)
        StaticTracing::Configuration.mode = :on
        class Text < String
          %i[gsub sub].each { |name| define_method(name, String.instance_method(name)) }
        end
        %i[gsub sub].each { |name| StaticTracing.latency(Text, name) }
        def swap(text) = text.gsub(/(\\w)(\\w)/) { "\#{$2}\#{$1}" }
        def matched(text) = (text.sub(/(b)/, "q"); $~ && $~[1])
        def both(count) = Array.new(count) { [swap(Text.new("ab cd")), matched(Text.new("xbz"))] }.uniq
      RUBY
      expect(app.evaluate("Text.instance_method(:sub).owner.inspect")).to end_with("Wrappers(Text, latency)")
      expect(app.evaluate("both(200)")).to eq([["ba dc", "b"]])
      app.evaluate("GC.verify_compaction_references(expand_heap: true, toward: :empty); nil")
      expect(app.evaluate("both(200)")).to eq([["ba dc", "b"]])
    end
  end

  # Each wrap and unwrap throws away the code compiled against the method
  # it replaces (its callers'), which YJIT (3.4) keeps: about a kB a cycle
  # for one caller, until its memory limit, past which it compiles nothing
  # more and the process stops growing (docs/limits.md).
  it "keeps the code each wrap and unwrap throws away, up to its memory limit, past which it compiles no more",
     :subprocess do
    app = yjit_process(<<~RUBY, env: { "RUBYOPT" => "#{YJIT::CHILD_OPTIONS} --yjit-exec-mem-size=2" })
      class Rewrapped
        include StaticTracing::LatencyTracer
        def scale(value, by: 2) = value * by
      end
      POINT = StaticTracing.providers[:rewrapped].tracepoints[:scale]
      def cycles(count) = Array.new(count) { POINT.load; POINT.unload; Rewrapped.new.scale(1, by: 3) }.uniq
      def held = RubyVM::YJIT.runtime_stats.values_at(:code_region_size, :yjit_alloc_size).sum
      def full = 40.times.find { before = held; cycles(1000); held == before }
    RUBY
    expect(app.evaluate("cycles(100)")).to eq([3])
    before = app.evaluate("held")
    expect(app.evaluate("cycles(1000)")).to eq([3])
    expect(app.evaluate("held") - before).to be > 200 * 1000

    expect(app.evaluate("full")).to be_a(Integer)
    invalidated = app.evaluate(stats)[:invalidation_count]
    expect(app.evaluate("cycles(1000)")).to eq([3])
    expect(app.evaluate(stats)[:invalidation_count]).to eq(invalidated)
  end

  describe "with bpftrace attached", :e2e do
    # Attach mode: the method is wrapped by the watcher thread as bpftrace
    # attaches, while two threads run compiled code calling it, and
    # unwrapped as it leaves.
    it "counts exactly the calls compiled code makes while bpftrace is attached in attach mode, from threads " \
       "that keep calling across the wrapping and unwrapping" do
      app = yjit_process(<<~RUBY, env: { "STATIC_TRACING_MODE" => "attach" })
        class YjitShop
          include StaticTracing::LatencyTracer
          def buy(item) = item + 1
        end
        def burst(count) = count.times.count { |item| YjitShop.new.buy(item) == item + 1 }
        def wrapped = YjitShop.instance_method(:buy).owner != YjitShop
        $wrong = 0
        $calls = [0, 0]
        $stop = false
        $workers = 2.times.map do |worker|
          Thread.new do
            item = 0
            until $stop
              $wrong += 1 unless YjitShop.new.buy(item) == item + 1
              item += 1
              $calls[worker] += 1
            end
          end
        end
      RUBY
      wait_until_listed(app.pid, "usdt:*:yjit_shop:buy")
      expect(app.evaluate("burst(1000)")).to eq(1000)
      before = app.evaluate(stats)
      tracer = attach_bpftrace(app.pid, "usdt:*:yjit_shop:buy /tid == #{app.pid}/ { @burst = count(); } " \
                                        "usdt:*:yjit_shop:buy { @all = count(); @ns = sum(arg0); }")
      eventually("buy is wrapped") { app.evaluate("wrapped") }
      calls_when_wrapped = app.evaluate("$calls.dup")
      expect(app.evaluate("burst(5000)")).to eq(5000)
      eventually("both threads call through the wrapper") do
        app.evaluate("$calls").zip(calls_when_wrapped).all? { |now, when_wrapped| now > when_wrapped }
      end
      output = tracer.finish
      expect(counts(output)["burst"]).to eq(5000)
      expect(counts(output)["all"]).to be > 5000
      expect(counts(output)["ns"]).to be_positive
      expect(app.evaluate(stats)[:invalidation_count]).to be > before[:invalidation_count]

      eventually("buy is unwrapped") { !app.evaluate("wrapped") }
      expect(app.evaluate("burst(1000)")).to eq(1000)
      expect(app.evaluate("$stop = true; $workers.each(&:join); [$wrong, $calls.map(&:positive?)]"))
        .to eq([0, [true, true]])
    end

    it "fires every probe with its arguments from compiled code after the heap is compacted under it" do
      app = yjit_process(<<~RUBY)
        StaticTracing::Configuration.mode = :on
        class Ledger
          include StaticTracing::LatencyTracer
          def post(amount) = amount
        end
        class Audit
          include StaticTracing::StackTracer
          def check(amount) = amount
        end
        NOTE = StaticTracing::Tracepoint.new(:yjit_ledger, :note, Integer, String)
        def book(count)
          total = entry = 0
          while entry < count
            NOTE.fire(entry, "entry")
            total += Audit.new.check(Ledger.new.post(entry))
            entry += 1
          end
          total
        end
      RUBY
      expect(app.evaluate("book(100)")).to eq(4950)
      wait_until_listed(app.pid, "usdt:*:audit_stack:check")
      tracer = attach_bpftrace(app.pid, "usdt:*:ledger:post { @posts = count(); } " \
                                        "usdt:*:yjit_ledger:note { @notes[str(arg1), arg0 < 300] = count(); } " \
                                        "usdt:*:audit_stack:check { @stacks[str(arg0)] = count(); }")
      app.evaluate("GC.verify_compaction_references(expand_heap: true, toward: :empty); nil")
      expect(app.evaluate("book(300)")).to eq(44_850)
      output = tracer.finish
      expect(counts(output)["posts"]).to eq(300)
      expect(output.scan(/^@notes\[(.*)\]: (\d+)$/)).to eq([["entry, true", "300"]])
      stacks = output.scan(/^@stacks\[(.*)\]: (\d+)$/)
      expect(stacks.map(&:last)).to eq(["300"])
      expect(stacks.first.first).to end_with(";Object#book;Audit#check")
    end
  end
end
