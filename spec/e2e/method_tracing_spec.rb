# frozen_string_literal: true

# Method tracing seen by the real bpftrace: a unicorn worker toggled with
# SIGTRAP, block probes, stacks, and wrappers that change nothing but time.
RSpec.describe "Tracing methods with bpftrace", :e2e do
  def probe_counts(output)
    counts = output.scan(/^@\[usdt:[^\]]*:(\w+):(\w+)\]: (\d+)$/)
    counts.to_h { |provider, probe, count| ["#{provider}:#{probe}", count.to_i] }
  end

  it "traces a unicorn worker's actions from the first SIGTRAP to the second" do
    unicorn = start_unicorn
    worker = unicorn.worker_pids.first
    expect(unicorn.tracing_state).to include("enabled" => "false", "wrapped" => "false", "mode" => "signal")
    expect(bpftrace_list(worker, "usdt:*:my_controller:*")).to be_empty

    Process.kill("TRAP", worker)
    eventually("the worker lists its probes") { bpftrace_list(worker, "usdt:*:my_controller:*").size == 4 }
    expect(unicorn.tracing_state).to include("enabled" => "true", "wrapped" => "true")

    tracer = attach_bpftrace(worker, "usdt:*:my_controller:* { @[probe] = count(); } " \
                                     "usdt:*:my_controller:slow { @slow_ns = hist(arg0); }")
    30.times { unicorn.get("/") }
    12.times { |id| unicorn.get("/items/#{id}") }
    5.times { unicorn.get("/slow") }
    output = tracer.finish
    expect(probe_counts(output))
      .to eq("my_controller:index" => 30, "my_controller:show" => 12, "my_controller:slow" => 5)
    # A 5 ms sleep lands in [4M, 8M); on a busy machine one may overrun.
    buckets = output[/^@slow_ns: ?\n(.*?)(?:\n\n|\z)/m, 1].scan(/^\[(\S+), (\S+)\)\s+(\d+)/)
    expect(buckets.first.first(2)).to eq(%w[4M 8M])
    expect(buckets.max_by { |_, _, count| count.to_i }.first(2)).to eq(%w[4M 8M])

    Process.kill("TRAP", worker)
    eventually("the probes are gone") { bpftrace_list(worker, "usdt:*:my_controller:*").empty? }
    expect(unicorn.tracing_state).to include("enabled" => "false", "wrapped" => "false")
  end

  context "with a Ruby child" do
    let(:app) do
      ruby_repl(<<~RUBY)
        StaticTracing::Configuration.mode = :on
        $runs = 0
      RUBY
    end

    it "times blocks with StaticTracing.latency, whatever they return or raise" do
      app.evaluate(<<~RUBY)
        def work(seconds) = StaticTracing.latency(name: :work, provider: :blocks) { sleep(seconds); :done }
      RUBY
      expect(app.evaluate("work(0)")).to eq(:done)
      tracer = attach_bpftrace(app.pid, 'usdt:*:blocks:work { printf("%ld\n", arg0); }')
      expect(app.evaluate("3.times.map { work(0.002) }")).to eq(%i[done done done])
      expect(app.evaluate(<<~RUBY)).to eq("failed")
        begin
          StaticTracing.latency(name: :work, provider: :blocks) { raise "failed" }
        rescue => e
          e.message
        end
      RUBY
      latencies = tracer.finish(after: /(^\d+\n){4}/).lines.grep(/\A\d+$/).map(&:to_i)
      expect(latencies.size).to eq(4)
      expect(latencies.first(3)).to all(be_between(2_000_000, 500_000_000))
    end

    it "runs custom block probes while a tracer is attached, and unattached only once, to check them" do
      call = "StaticTracing.tracepoint(:custom, :event, Integer, String) { $runs += 1; [$runs, \"run \#{$runs}\"] }"
      2.times { expect(app.evaluate(call)).to be_nil }
      expect(app.evaluate("$runs")).to eq(1)
      tracer = attach_bpftrace(app.pid, 'usdt:*:custom:event { printf("%ld %s\n", arg0, str(arg1)); }')
      expect(app.evaluate(call)).to eq([2, "run 2"])
      expect(app.evaluate(call)).to eq([3, "run 3"])
      expect(tracer.finish(after: /^3 run 3$/).lines.map(&:chomp).grep(/run/)).to eq(["2 run 2", "3 run 3"])
      enabled = "StaticTracing.providers[:custom].tracepoints[:event].enabled?"
      eventually("the tracer is gone") { app.evaluate(enabled) == false }
      expect(app.evaluate(call)).to be_nil
      expect(app.evaluate("$runs")).to eq(3)
    end

    it "fires folded stacks that bpftrace reads, innermost frames kept" do
      app.evaluate(<<~RUBY)
        class StackDemo
          include StaticTracing::StackTracer
          def outer = middle
          def middle = inner
          def inner = :inner
        end
      RUBY
      wait_until_listed(app.pid, "usdt:*:stack_demo_stack:*", count: 3)
      tracer = attach_bpftrace(app.pid, 'usdt:*:stack_demo_stack:inner { printf("%s\n", str(arg0)); }')
      expect(app.evaluate("StackDemo.new.outer")).to eq(:inner)
      # Room for the two innermost frames (32 bytes) and the root that says
      # the stack was cut (12), not for one more frame.
      app.evaluate("StaticTracing::StackTracer.max_bytes = 50")
      app.evaluate("StackDemo.new.outer")
      stacks = tracer.finish(after: /(.*StackDemo.*\n){2}/).lines.map(&:chomp).grep(/StackDemo/)
      expect(stacks.size).to eq(2)
      expect(stacks.first).to start_with("<main>;")
      expect(stacks.first).to end_with(";StackDemo#outer;StackDemo#middle;StackDemo#inner")
      expect(stacks.first).not_to include("Wrappers")
      expect(stacks.first).not_to include("static_tracing")
      expect(stacks.last).to eq("[truncated];StackDemo#middle;StackDemo#inner")
    end
  end

  describe "the method signature matrix" do
    # Each call: method, positional args, keyword args, block, whether the wrapper is reached.
    calls = [
      [:none, [], {}, nil, true],
      [:required, [1, 2], {}, nil, true],
      [:required, [1], {}, nil, false],
      [:optional, [1], {}, nil, true],
      [:optional, [1, 2], {}, nil, true],
      [:rest, [], {}, nil, true],
      [:rest, [1, 2, { hash: 3 }], {}, nil, true],
      [:post, [1, 2], {}, nil, true],
      [:post, [1, 2, 3, 4], {}, nil, true],
      [:keywords, [1], { req: 2 }, nil, true],
      [:keywords, [1], { req: 2, opt: 3 }, nil, true],
      [:keywords, [1], {}, nil, false],
      [:keywords, [1], { req: 2, bogus: 3 }, nil, false],
      [:keyword_rest, [], { any: 1, other: 2 }, nil, true],
      [:positional_hash, [{ hash: 1 }], {}, nil, true],
      [:everything, [1, 2, 3, 4], { req: 5, extra: 6 }, :block, true],
      [:block_taker, [], {}, :block, true],
      [:yielder, [], {}, :block, true],
      [:raiser, [], {}, nil, true],
      [:hidden, [], {}, nil, false],
      [:predicate?, [], {}, nil, true],
      [:setter=, [7], {}, nil, true]
    ]
    subject_class = <<~RUBY
      class MatrixSubject
        include StaticTracing::LatencyTracer
        def none = :none
        def required(a, b) = [a, b]
        def optional(a, b = :default) = [a, b]
        def rest(*args) = args
        def post(a, *rest, z) = [a, rest, z]
        def keywords(a, req:, opt: :opt) = [a, req, opt]
        def keyword_rest(**options) = options
        def positional_hash(hash) = hash
        def everything(a, b = :b, *rest, z, req:, opt: :o, **more, &block) = [a, b, rest, z, req, opt, more, block&.call]
        def block_taker(&block) = block.call(2)
        def yielder = yield(3)
        def raiser = raise(ArgumentError, "raised on purpose")
        def predicate? = true
        def setter=(value)
          @set = value
        end
        private def hidden = :hidden
      end

      def run_matrix(calls)
        subject = MatrixSubject.new
        calls.map do |name, args, kwargs, block, _|
          block = block && proc { |x = 1| [:block, x] }
          subject.public_send(name, *args, **kwargs, &block)
        rescue StandardError => e
          [e.class.name, e.message.sub(/ for #<MatrixSubject.*/, "")]
        end
      end
    RUBY

    it "gives the same results disarmed, armed and attached, and fires exactly once per call" do
      app = ruby_repl(subject_class)
      run = "run_matrix(#{calls.inspect})"
      disarmed = app.evaluate(run)
      expect(app.evaluate("MatrixSubject.ancestors.first.inspect")).to eq("MatrixSubject")

      app.evaluate("StaticTracing.enable!")
      expect(app.evaluate("MatrixSubject.ancestors.first.inspect"))
        .to eq("StaticTracing::MethodTracing::Wrappers(MatrixSubject, latency)")
      armed = app.evaluate(run)

      tracer = attach_bpftrace(app.pid, "usdt:*:matrix_subject:* { @[probe] = count(); }")
      attached = app.evaluate(run)
      counts = probe_counts(tracer.finish)

      expect(armed).to eq(disarmed)
      expect(attached).to eq(disarmed)
      expect(disarmed.count { |result| result.is_a?(Array) && result.first.to_s.end_with?("Error") }).to eq(5)
      expected = calls.select(&:last).map(&:first).tally
                      .transform_keys { |name| "matrix_subject:#{StaticTracing::MethodTracing.probe_name_for(name)}" }
      expect(counts).to eq(expected)
    end
  end
end
