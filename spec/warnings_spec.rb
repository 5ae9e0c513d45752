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
