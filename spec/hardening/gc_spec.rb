# frozen_string_literal: true

require "json"
require "objspace"
require "open3"
require "rbconfig"

# The native objects under a collector that runs at every allocation, and
# after compaction has moved everything it can.
RSpec.describe "Native objects under GC.stress and GC.compact" do
  def address(object)
    JSON.parse(ObjectSpace.dump(object)).fetch("address")
  end

  # Compaction that moves every object it can, toward empty pages.
  def compact!
    GC.verify_compaction_references(double_heap: true, toward: :empty)
  end

  # A child with a small heap: a collection at every allocation is quick there.
  context "in a process collecting and compacting at every allocation", :child_process do
    include E2E::Helpers
    after { stop_started_processes }

    let(:app) do
      ruby_repl(<<~'RUBY')
        def under_gc_stress
          GC.auto_compact = true
          GC.stress = true
          yield
        ensure
          GC.stress = false
          GC.auto_compact = false
        end

        def failure
          yield
          nil
        rescue StandardError => e
          "#{e.class}: #{e.message}"
        end
      RUBY
    end

    it "declares, loads, fires, grows, unloads and unregisters providers" do
      rounds = app.evaluate(<<~'RUBY', timeout: 120)
        under_gc_stress do
          Array.new(10) do |round|
            provider = StaticTracing::Provider.register(:"stressed_#{round}")
            points = Array.new(3) { |index| provider.add_tracepoint(:"probe_#{index}", Integer, String, Float) }
            unloaded = points.map { |point| point.fire(round, "text #{round}" * 3, 1.5) }
            provider.load
            path = provider.path
            loaded = points.map { |point| [point.fire(-round, "loaded", 2.5), point.enabled?] }
            late = provider.add_tracepoint(:late, String)
            grown = [provider.path == path, late.fire("x" * 100), late.enabled?]
            errors = [
              failure { points.first.fire("1", "a", 1.0) },
              failure { points.last.fire(1) },
              failure { provider.add_tracepoint(:bad, Symbol) },
              failure { late.fire(2**64) }
            ]
            described = (points + [late]).map { |point| [point.name, point.types, point.provider.equal?(provider)] }
            provider.unload
            gone = [provider.loaded?, provider.path, File.exist?(path), points.first.fire(1, "unloaded", 0.0)]
            provider.unregister
            [unloaded, loaded, grown, errors, described, gone, StaticTracing.providers.key?(:"stressed_#{round}")]
          end
        end
      RUBY
      expect(rounds.size).to eq(10)
      rounds.each_with_index do |round, index|
        expect(round).to eq(
          [
            [false] * 3, [[false, false]] * 3, [true, false, false],
            [
              "TypeError: tracepoint stressed_#{index}:probe_0 argument 1 must be an Integer, got String (\"1\")",
              "ArgumentError: tracepoint stressed_#{index}:probe_2 takes 3 arguments (Integer, String, Float), 1 given",
              "ArgumentError: tracepoint stressed_#{index}:bad argument 1 type must be Integer, String or Float, " \
              "got Symbol",
              "TypeError: tracepoint stressed_#{index}:late argument 1 must be a String, " \
              "got Integer (18446744073709551616)"
            ],
            Array.new(3) { |point| [:"probe_#{point}", [Integer, String, Float], true] } + [[:late, [String], true]],
            [false, nil, false, false],
            false
          ]
        )
      end
    end

    it "wraps, calls and unwraps traced methods" do
      result = app.evaluate(<<~'RUBY', timeout: 120)
        class Traced
          include StaticTracing::LatencyTracer
          def add(left, right = 2, *rest, scale: 1, &block) = ((left + right + rest.sum) * scale).then(&block || :itself)
        end
        under_gc_stress do
          StaticTracing.enable!
          wrapped = Traced.instance_method(:add).owner != Traced
          sums = Array.new(5) { |index| Traced.new.add(index, 2, 3, scale: 2) { |sum| sum + 1 } }
          StaticTracing.disable!
          [wrapped, sums, Traced.instance_method(:add).owner == Traced, StaticTracing.providers[:traced].loaded?]
        end
      RUBY
      expect(result).to eq([true, [11, 13, 15, 17, 19], true, false])
    end
  end

  it "keeps tracepoints, providers and wrapped methods right after compaction moves them" do
    provider = StaticTracing::Provider.register(:compacted)
    points = Array.new(50) { |index| provider.add_tracepoint(:"probe_#{index}", Integer, String) }
    provider.load
    traced = Class.new do
      include StaticTracing::LatencyTracer.with(provider: :compacted_methods)
      def twice(value) = value * 2
      def hidden = :hidden
    end
    StaticTracing.enable!
    before = points.map { |point| address(point) }

    compact!

    expect(points.map { |point| address(point) }).not_to eq(before)
    expect(points.map(&:name)).to eq(Array.new(50) { |index| :"probe_#{index}" })
    expect(points.map(&:types).uniq).to eq([[Integer, String]])
    expect(points.map(&:provider).uniq).to eq([provider])
    expect(points.map { |point| point.fire(1, "after compaction") }.uniq).to eq([false])
    expect(provider.tracepoints.values).to eq(points)
    expect(traced.new.twice(21)).to eq(42)
    # A visibility change goes through the native hook to MethodTracing.
    traced.send(:private, :hidden)
    expect { traced.new.hidden }.to raise_error(NoMethodError, /private method/)
    expect(traced.new.send(:hidden)).to eq(:hidden)
    # Declaring and growing after compaction.
    late = provider.add_tracepoint(:late, Float)
    compact!
    expect([late.name, late.types, late.provider, late.fire(1.5)]).to eq([:late, [Float], provider, false])
    expect(StaticTracing.providers[:compacted_methods].tracepoints.keys).to contain_exactly(:twice, :hidden)
  ensure
    StaticTracing.disable!
  end

  context "with bpftrace attached", :child_process, :e2e do
    it "fires exact values from a process that collects and compacts at every allocation" do
      app = ruby_repl(<<~RUBY)
        StaticTracing::Configuration.mode = :on
        class Stressed
          include StaticTracing::LatencyTracer
          def call(text) = text.upcase
        end
        $point = StaticTracing::Tracepoint.new(:stressed_app, :event, Integer, String, Float)
        $point.load
      RUBY
      program = 'usdt:*:stressed_app:event { printf("%ld|%s|%lu\n", arg0, str(arg1), arg2); } ' \
                "usdt:*:stressed:call { @calls = count(); }"
      tracer = attach_bpftrace(app.pid, program)
      fired = app.evaluate(<<~RUBY, timeout: 120)
        GC.auto_compact = true
        GC.stress = true
        begin
          40.times.map do |index|
            text = "value \#{index} " + ("x" * (index * 4))
            Stressed.new.call(text)
            $point.fire(index, text, index * 0.5)
          end
        ensure
          GC.stress = false
          GC.auto_compact = false
        end
      RUBY
      expect(fired).to eq([true] * 40)
      output = tracer.finish
      expected = Array.new(40) do |index|
        "#{index}|value #{index} #{"x" * (index * 4)}|#{[index * 0.5].pack("D").unpack1("Q")}"
      end
      expect(output.lines.map(&:chomp).grep(/\|/)).to eq(expected)
      expect(output).to include("@calls: 40")
    end
  end

  # This file's own in-process examples among them.
  context "when the provider and tracepoint specs run with GC.stress around every native call", :child_process do
    it "passes them all" do
      stress = File.join(__dir__, "support", "gc_stress.rb")
      specs = %w[provider_spec.rb tracepoint_spec.rb].map { |name| File.join(E2E::ROOT, "spec", name) } + [__FILE__]
      out, status = Open3.capture2e(RbConfig.ruby, "-S", "rspec", "--require", stress, "--tag", "~child_process",
                                    *specs, chdir: E2E::ROOT)
      expect(status).to be_success, out
      expect(out).to match(/\d+ examples, 0 failures/)
      expect(Integer(out[/native calls under GC.stress: (\d+)$/, 1])).to be > 100
    end
  end
end
