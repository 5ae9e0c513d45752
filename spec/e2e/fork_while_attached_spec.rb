# frozen_string_literal: true

require "json"

# A child forked while a tracer is attached to its parent starts with
# nothing attached and nothing armed: the tracer is the parent's (bpftrace
# -p PARENT), even though the child's memory is a copy of the parent's,
# raised semaphores and breakpoints included.
RSpec.describe "A child forked while a tracer is attached to its parent", :e2e do
  include CLIHelpers

  let(:setup) do
    <<~'RUBY' + E2E::FORKING_REPL
      class Shop
        include StaticTracing::LatencyTracer
        def buy = :bought
      end
      EVENT = StaticTracing::Tracepoint.new(:shop_events, :event, Integer)
      def wrapped? = Shop.instance_method(:buy).owner != Shop
      def buy_probe = StaticTracing.providers[:shop].tracepoints[:buy]
      # What the child says of itself: tracing on, method wrapped, each probe
      # enabled?, what fire returns, and the method's own value.
      def self_view = [StaticTracing.enabled?, wrapped?, buy_probe.enabled?, EVENT.enabled?, EVENT.fire(1), Shop.new.buy]
    RUBY
  end

  let(:program) { "usdt:*:shop:buy { @buys = count(); } usdt:*:shop_events:event { @events = count(); }" }

  def counts(output)
    output.scan(/^@(\w+): (\d+)$/).to_h.transform_values(&:to_i)
  end

  # `static-tracing list PID --json`: attached per probe, and the tracing state.
  def listing(pid)
    result = run_cli("list", pid, "--json")
    raise "static-tracing list #{pid}: #{result.stderr}" unless result.exitstatus.zero?

    document = JSON.parse(result.stdout)
    attached = document["providers"].flat_map { |provider| provider["probes"].map { |probe| probe["attached"] } }
    [attached, document["tracing"]]
  end

  it "in attach mode: the child has nothing armed and no probe attached, and the tracer counts the parent only" do
    parent = ruby_repl(setup, env: { "STATIC_TRACING_MODE" => "attach" })
    wait_until_listed(parent.pid, "usdt:*:shop*:*", count: 2)
    tracer = attach_bpftrace(parent.pid, program)
    eventually("the parent's method is armed") { parent.evaluate("wrapped?") }
    expect(parent.evaluate("[buy_probe.enabled?, EVENT.enabled?]")).to eq([true, true])

    kid = parent.evaluate("$kid = Kid.new; $kid.pid")
    expect(parent.evaluate("$kid.eval('self_view')")).to eq([false, false, false, false, false, :bought])
    attached, tracing = listing(kid)
    expect(attached).to eq([false, false])
    expect(tracing).to include("mode" => "attach", "armed" => [])

    parent.evaluate("3.times { Shop.new.buy; EVENT.fire(2) }")
    parent.evaluate("$kid.eval('5.times { Shop.new.buy; EVENT.fire(3) }')")
    expect(counts(tracer.finish)).to eq("buys" => 3, "events" => 3)
    expect(parent.evaluate("$kid.finish.exitstatus")).to eq(0)
  end

  it "in signal mode: the child keeps tracing on, as its parent had it, with no probe attached" do
    parent = ruby_repl(setup)
    expect(parent.evaluate("StaticTracing.enable!")).to be(true)
    tracer = attach_bpftrace(parent.pid, program)
    expect(parent.evaluate("[wrapped?, buy_probe.enabled?, EVENT.enabled?]")).to eq([true, true, true])

    kid = parent.evaluate("$kid = Kid.new; $kid.pid")
    expect(parent.evaluate("$kid.eval('self_view')")).to eq([true, true, false, false, false, :bought])
    attached, tracing = listing(kid)
    expect(attached).to eq([false, false])
    expect(tracing).to include("mode" => "signal", "enabled" => true)

    parent.evaluate("2.times { Shop.new.buy; EVENT.fire(2) }")
    parent.evaluate("$kid.eval('4.times { Shop.new.buy; EVENT.fire(3) }')")
    expect(counts(tracer.finish)).to eq("buys" => 2, "events" => 2)
  end
end
