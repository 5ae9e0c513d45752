# frozen_string_literal: true

# A warning is given once per process, whichever part of the gem gives it:
# the gem keeps one table of the warnings it gave.
RSpec.describe "Warnings" do
  it "are given once per key, by the gem and by method tracing alike" do
    key = [:spec_once, Object.new.object_id]
    expect { StaticTracing.warn_once(key, "static_tracing: first") }.to output("static_tracing: first\n").to_stderr
    expect { StaticTracing::MethodTracing.send(:warn_once, key, "static_tracing: again") }.not_to output.to_stderr
    other = [:spec_once, Object.new.object_id]
    expect { StaticTracing::MethodTracing.send(:warn_once, other, "static_tracing: other") }
      .to output("static_tracing: other\n").to_stderr
    expect { StaticTracing.warn_once(other, "static_tracing: other") }.not_to output.to_stderr
  end
end

# Ruby warns about removing `initialize`, `object_id` or `__send__`, which
# is how a traced one's wrapper goes when tracing is switched off: the gem
# says nothing the application did not cause.
RSpec.describe "Switching tracing off on a traced initialize" do
  it "warns about nothing, in a process run with and without -w" do
    script = <<~'RUBY'
      class Shop
        include StaticTracing::LatencyTracer
        def initialize = nil
      end
      2.times { StaticTracing.enable!; StaticTracing.disable! }
      puts Shop.instance_method(:initialize).owner
    RUBY
    [[], ["-w"]].each do |flags|
      out, err, status = Open3.capture3(RbConfig.ruby, *flags, "-I", E2E::LIB, "-rstatic_tracing", "-e", script)
      expect([status.success?, out, err]).to eq([true, "Shop\n", ""])
    end
  end
end
