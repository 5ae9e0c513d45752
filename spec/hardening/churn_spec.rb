# frozen_string_literal: true

# What is done thousands of times in a long-lived process leaves it as it
# was: its memory, descriptors and mappings stay flat.
RSpec.describe "Churn" do
  describe "wrapping and unwrapping", :subprocess do
    include_context "with a private stub directory"

    # Each wrap of a method with keywords compiled its wrapper anew, and
    # Ruby 3.1 and 3.2 never free the keyword data of a call site they
    # compiled (ruby/ruby#8556): with the 7 call sites that pass keywords
    # here, these 10,000 wraps held 5 MB more on Ruby 3.1. With the
    # compiled wrapper put back, the process holds what it held after
    # warming up (its Ruby heap has all the pages it needs by then, and
    # measures 0 kB more): 1 MB of slack, for the allocator, is a fifth of
    # that leak.
    it "wraps and unwraps a method with keywords 10,000 times, in no more memory" do
      child = ruby_process(<<~'RUBY', env: { "STATIC_TRACING_DIR" => @stub_dir })
        class Rewrapped
          include StaticTracing::LatencyTracer
          def scale(value, by: 2, plus: 0, minus: 0) = (value * by) + plus - minus
        end
        point = StaticTracing.providers[:rewrapped].tracepoints[:scale]
        rss = -> { GC.start; File.read("/proc/self/status")[/^VmRSS:\s+(\d+)/, 1].to_i }
        cycle = -> { point.load; point.unload; Rewrapped.new.scale(1, by: 3, minus: 1) }
        500.times { cycle.call }
        before = rss.call
        results = Array.new(10_000) { cycle.call }.uniq
        puts "DONE #{rss.call - before} #{results.inspect}"
      RUBY
      grown, results = child.wait_for(/^DONE (\d+) (.*)$/, timeout: 60).captures
      expect(results).to eq("[2]")
      expect(Integer(grown)).to be < 1024
    end
  end
end
