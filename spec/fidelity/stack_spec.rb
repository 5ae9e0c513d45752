# frozen_string_literal: true

# StackTracer's folded stacks start where Ruby's own backtrace starts.
RSpec.describe "Folded stacks" do
  it "have the root frame once, as the backtrace does" do
    frames = StaticTracing::Native.folded_stack("leaf", 1, 100_000).split(";")
    root = caller_locations.last.label
    expect(root).to eq("<main>")
    expect(frames.first).to eq(root)
    expect(frames.count(root)).to eq(1)
  end

  it "have the root frame once in a script's own process" do
    script = <<~RUBY
      class App
        def call = StaticTracing::Native.folded_stack("leaf", 1, 1000)
      end
      puts App.new.call
    RUBY
    out, status = Open3.capture2e(RbConfig.ruby, "-I", E2E::LIB, "-r", "static_tracing", "-e", script)
    expect(status).to be_success, out
    expect(out.lines.last.chomp).to eq("<main>;App#call;leaf")
  end
end
