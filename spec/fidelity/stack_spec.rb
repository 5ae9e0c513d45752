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

  it "keep the innermost frames that fit, under a root that says the stack was cut" do
    whole = StaticTracing::Native.folded_stack("leaf", 1, 100_000)
    frames = whole.split(";")
    # Room for the marker, the leaf and its caller's frame, not one more.
    room = "[truncated];".bytesize + frames.last(2).join(";").bytesize
    cut = StaticTracing::Native.folded_stack("leaf", 1, room + 1)
    expect(cut).to eq("[truncated];#{frames.last(2).join(";")}")
    # No room for the marker beside the leaf: the leaf alone.
    expect(StaticTracing::Native.folded_stack("leaf", 1, 6)).to eq("leaf")
    # A stack that fits is whole, with no marker.
    expect(StaticTracing::Native.folded_stack("leaf", 1, whole.bytesize)).to eq(whole)
  end
end
