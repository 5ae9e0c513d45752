# frozen_string_literal: true

# StaticTracing::RackMiddleware in a Ruby child serving requests through
# Rack::MockRequest, with bpftrace attached to the child's rack:request.
RSpec.describe "StaticTracing::RackMiddleware under bpftrace", :e2e do
  let(:setup) do
    <<~RUBY
      require "rack"
      ROUTES = {
        "/items/42" => ->(_env) { [200, { "content-type" => "text/plain" }, ["item"]] },
        "/slow" => ->(_env) { sleep 0.005; [201, {}, ["slow"]] },
        "/boom" => ->(_env) { raise "boom" }
      }.freeze
      APP = Rack::Builder.new do
        use StaticTracing::RackMiddleware
        run ->(env) { (ROUTES[env["PATH_INFO"]] || ->(_) { [404, {}, []] }).call(env) }
      end.to_app
      CLIENT = Rack::MockRequest.new(APP)
    RUBY
  end

  # One string a printf: two of bpftrace's 200-byte strings in one would
  # overflow the BPF stack.
  let(:program) do
    'usdt:*:rack:request { printf("REQUEST %s ", str(arg0)); printf("%s %d %d\n", str(arg1), arg2, arg3); }'
  end

  def requests(bpftrace, count)
    eventually("bpftrace printed #{count} requests") do
      fired = bpftrace.output.scan(/^REQUEST (\S+) (\S+) (\d+) (\d+)$/).map do |method, path, status, latency|
        [method, path, Integer(status), Integer(latency)]
      end
      fired if fired.size >= count
    end
  end

  it "fires method, path, status and latency for each request, raising ones included" do
    child = ruby_repl(setup, env: { "STATIC_TRACING_MODE" => "on" })
    expect(child.evaluate("StaticTracing.providers[:rack].loaded?")).to be(true)
    bpftrace = attach_bpftrace(child.pid, program)

    statuses = child.evaluate(<<~RUBY)
      [CLIENT.get("/items/42?verbose=1").status, CLIENT.post("/slow").status,
       (begin; CLIENT.delete("/boom"); rescue RuntimeError => e; e.message; end), CLIENT.get("/nowhere").status]
    RUBY
    expect(statuses).to eq([200, 201, "boom", 404])

    fired = requests(bpftrace, 4)
    expect(fired.map { |request| request.take(3) }).to eq(
      [["GET", "/items/42", 200], ["POST", "/slow", 201], ["DELETE", "/boom", 500], ["GET", "/nowhere", 404]]
    )
    latencies = fired.map(&:last)
    expect(latencies).to all(be_positive.and(be < 5_000_000_000))
    expect(latencies[1]).to be >= 5_000_000
  end

  it "loads with the mode: in mode signal, only once tracing is enabled" do
    child = ruby_repl(setup)
    expect(child.evaluate("StaticTracing.providers[:rack].loaded?")).to be(false)
    expect(bpftrace_list(child.pid, "usdt:*:rack:*")).to be_empty

    child.evaluate("StaticTracing.enable!")
    expect(child.evaluate("StaticTracing.providers[:rack].loaded?")).to be(true)
    expect(bpftrace_list(child.pid, "usdt:*:rack:*")).to contain_exactly(end_with(":rack:request"))

    bpftrace = attach_bpftrace(child.pid, program)
    child.evaluate('CLIENT.put("/items/42")')
    expect(requests(bpftrace, 1).first.take(3)).to eq(["PUT", "/items/42", 200])
  end
end
