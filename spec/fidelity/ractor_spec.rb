# frozen_string_literal: true

# Tracing never raises into application code running in a non-main Ractor:
# the extension is not Ractor-safe, so wrappers call through untraced there.
RSpec.describe "Traced methods in a non-main Ractor" do
  after { StaticTracing.disable! }

  it "return what they return untraced, for every tracer kind" do
    stub_const("FidelityRactorLatency", Class.new { def double(value) = value * 2 })
    stub_const("FidelityRactorStack", Class.new { def triple(value) = value * 3 })
    StaticTracing.latency(FidelityRactorLatency, :double)
    FidelityRactorStack.include(StaticTracing::StackTracer)
    StaticTracing.enable!
    expect(FidelityRactorLatency.instance_method(:double).owner).to be_a(StaticTracing::MethodTracing::Wrappers)

    ractor = Ractor.new { [FidelityRactorLatency.new.double(21), FidelityRactorStack.new.triple(2)] }
    expect(ractor.take).to eq([42, 6])
  end
end
