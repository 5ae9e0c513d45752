# frozen_string_literal: true

require "json"

# Attach mode seen by the real bpftrace: every probe listed from boot, and a
# method wrapped only while a tracer is attached to its own probe.
RSpec.describe "Attach mode with bpftrace", :e2e do
  include CLIHelpers

  def counts(output)
    output.scan(/^@(\w*)(?:\[[^\]]*\])?: (\d+)$/).to_h.transform_values(&:to_i)
  end

  # What `static-tracing list PID --json` says is armed, as "provider:probe".
  def armed(pid)
    result = run_cli("list", pid, "--json")
    raise "static-tracing list #{pid}: #{result.stderr}" unless result.exitstatus.zero?

    JSON.parse(result.stdout).dig("tracing", "armed")
  end

  context "in a Ruby process with three traced methods" do
    let(:app) do
      ruby_repl(<<~RUBY, env: { "STATIC_TRACING_MODE" => "attach" })
        class Shop
          include StaticTracing::LatencyTracer
          def buy = :bought
          def sell = :sold
          def browse = :browsed
        end
        def wrapped = %i[buy sell browse].reject { |name| Shop.instance_method(name).owner == Shop }
        def scans = StaticTracing::Native.attach_poller.last
      RUBY
    end

    it "lists every probe from boot, and wraps only the method a tracer attaches to, while it is attached" do
      # The first method loads the provider; the other two join it within
      # attach_delay (one reload for both), so boot lists all three.
      listed = wait_until_listed(app.pid, "usdt:*:shop:*", count: 3)
      expect(listed.map { |line| line[/\w+\z/] }).to match_array(%w[buy sell browse])
      expect(app.evaluate("wrapped")).to eq([])
      expect(armed(app.pid)).to eq([])

      tracer = attach_bpftrace(app.pid, "usdt:*:shop:buy { @buys = count(); @ns = sum(arg0); }")
      eventually("buy is wrapped") { app.evaluate("wrapped") == [:buy] }
      expect(armed(app.pid)).to eq(["shop:buy"])

      expect(app.evaluate("17.times { Shop.new.buy; Shop.new.sell }; :done")).to eq(:done)
      output = tracer.finish
      expect(counts(output)["buys"]).to eq(17)
      expect(counts(output)["ns"]).to be_positive

      eventually("buy is unwrapped") { app.evaluate("wrapped") == [] }
      expect(armed(app.pid)).to eq([])
    end

    it "keeps a method armed while a second tracer stays attached to its probe" do
      wait_until_listed(app.pid, "usdt:*:shop:sell")
      first = attach_bpftrace(app.pid, "usdt:*:shop:sell { @sells = count(); }")
      second = attach_bpftrace(app.pid, "usdt:*:shop:sell { @sells = count(); }")
      eventually("sell is wrapped") { app.evaluate("wrapped") == [:sell] }

      first.finish
      # Two scans after the first tracer left have seen the semaphore at 1.
      scans = app.evaluate("scans")
      eventually("two more scans") { app.evaluate("scans") >= scans + 2 }
      expect(app.evaluate("wrapped")).to eq([:sell])
      expect(app.evaluate("9.times { Shop.new.sell }; :done")).to eq(:done)
      expect(counts(second.finish)["sells"]).to eq(9)
    end

    it "times latency blocks with no signal, declared and loaded as they first run" do
      app.evaluate("def pay = StaticTracing.latency(name: :pay, provider: :checkout) { :paid }")
      expect(app.evaluate("pay")).to eq(:paid)
      wait_until_listed(app.pid, "usdt:*:checkout:pay")
      tracer = attach_bpftrace(app.pid, "usdt:*:checkout:pay { @pays = count(); }")
      expect(app.evaluate("5.times { pay }; :done")).to eq(:done)
      expect(counts(tracer.finish)["pays"]).to eq(5)
    end

    it "gives distinct methods whose names map alike distinct probes, and counts each apart" do
      app.evaluate(<<~RUBY)
        class FooBar; include StaticTracing::LatencyTracer; def index = 1; end
        module Foo; class Bar; include StaticTracing::LatencyTracer; def index = 2; def valid? = true; def valid_p = 3; end; end
      RUBY
      probes = wait_until_listed(app.pid, "usdt:*:foo_bar:*", count: 4).map { |line| line[/\w+\z/] }
      expect(probes).to match_array(%w[index index_2 valid_p valid_p_2])

      tracer = attach_bpftrace(app.pid, "usdt:*:foo_bar:index_2 { @second = count(); }")
      eventually("Foo::Bar#index is wrapped") { app.evaluate("Foo::Bar.instance_method(:index).owner != Foo::Bar") }
      expect(app.evaluate("3.times { Foo::Bar.new.index }; 5.times { FooBar.new.index }; :done")).to eq(:done)
      expect(counts(tracer.finish)["second"]).to eq(3)
    end

    it "traces class methods, also those defined after the rule" do
      app.evaluate(<<~RUBY)
        class Report
          class << self
            include StaticTracing::LatencyTracer
          end
          def self.build = :built
        end
      RUBY
      expect(bpftrace_list(app.pid, "usdt:*:report:*").map { |line| line[/\w+\z/] }).to eq(["self_build"])
      tracer = attach_bpftrace(app.pid, "usdt:*:report:self_build { @builds = count(); }")
      eventually("Report.build is wrapped") { app.evaluate("Report.method(:build).owner != Report.singleton_class") }
      expect(app.evaluate("4.times { Report.build }; :done")).to eq(:done)
      expect(counts(tracer.finish)["builds"]).to eq(4)
    end
  end

  it "arms only the unicorn worker a tracer attaches to" do
    unicorn = start_unicorn(workers: 2, env: { "STATIC_TRACING_MODE" => "attach" })
    traced, other = unicorn.worker_pids
    expect(bpftrace_list(other, "usdt:*:my_controller:*").size).to eq(4)
    tracer = attach_bpftrace(traced, "usdt:*:my_controller:slow { @slow = count(); }")
    eventually("the traced worker is armed") { armed(traced) == ["my_controller:slow"] }
    expect(armed(other)).to eq([])

    served = unicorn.serve_until("/slow") { |pids| pids.count(traced) >= 10 }
    expect(served.count(traced)).to be >= 10
    expect(served - [traced, other]).to eq([])
    expect(counts(tracer.finish)["slow"]).to eq(served.count(traced))
  end
end
