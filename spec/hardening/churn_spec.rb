# frozen_string_literal: true

# What is done thousands of times in a long-lived process leaves it as it
# was: its memory, descriptors and mappings stay flat, and every call
# returns what it should.
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
    # that leak. Under YJIT each wrap and unwrap also throws away the code
    # compiled for the method's callers, which YJIT keeps until its memory
    # limit (docs/limits.md, spec/yjit_spec.rb): there the child runs with
    # a small limit, and warms up until YJIT holds all it may.
    it "wraps and unwraps a method with keywords 10,000 times, in no more memory" do
      env = { "STATIC_TRACING_DIR" => @stub_dir }
      env["RUBYOPT"] = "#{ENV.fetch("RUBYOPT", nil)} --yjit-exec-mem-size=2" if YJIT.enabled?
      child = ruby_process(<<~'RUBY', env:)
        class Rewrapped
          include StaticTracing::LatencyTracer
          def scale(value, by: 2, plus: 0, minus: 0) = (value * by) + plus - minus
        end
        point = StaticTracing.providers[:rewrapped].tracepoints[:scale]
        rss = -> { GC.start; File.read("/proc/self/status")[/^VmRSS:\s+(\d+)/, 1].to_i }
        cycle = -> { point.load; point.unload; Rewrapped.new.scale(1, by: 3, minus: 1) }
        500.times { cycle.call }
        if defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled?
          yjit = -> { RubyVM::YJIT.runtime_stats.values_at(:code_region_size, :yjit_alloc_size).sum }
          40.times { held = yjit.call; 1000.times { cycle.call }; break if yjit.call == held }
        end
        before = rss.call
        results = Array.new(10_000) { cycle.call }.uniq
        puts "DONE #{rss.call - before} #{results.inspect}"
      RUBY
      grown, results = child.wait_for(/^DONE (\d+) (.*)$/, timeout: 60).captures
      expect(results).to eq("[2]")
      expect(Integer(grown)).to be < 1024
    end
  end

  # The short form of `rake soak` (soak/churn.rb): the scenarios and bounds
  # of spec/support/churn.rb, with the counts of Churn::SHORT. When one
  # fails, the message is the whole table, the broken bound at its end.
  describe "tracers, reloads and forks", :e2e do
    include_context "with a temporary directory", "churn"

    let(:report) { Churn::Report.new }
    let(:processes) { Churn::Processes.new }

    after { processes.kill_all }

    def run_scenario(scenario, counts)
      scenario.new(report, processes:, root: @dir, attach_delay: Churn::ATTACH_DELAY).run(**counts)
      expect(report.failures).to be_empty, -> { "#{report}\n" }
    end

    it "follows #{Churn::SHORT[:attach][:semaphore_cycles]} attach/detach cycles of semaphores and " \
       "#{Churn::SHORT[:attach][:bpftrace_cycles]} of bpftrace, four threads calling, and holds nothing more" do
      run_scenario(Churn::AttachChurn, Churn::SHORT[:attach])
    end

    it "keeps a method wrapped while one of two tracers on its probe stays, whichever leaves first" do
      run_scenario(Churn::TwoTracers, Churn::SHORT[:two])
    end

    it "reloads a provider #{Churn::SHORT[:reload][:reloads]} times in place, named by its path by dladdr, gdb " \
       "and perf, and holds what it would loaded once" do
      %w[gdb perf].each { |command| require_command!(command) }
      run_scenario(Churn::ReloadChurn, Churn::SHORT[:reload])
    end

    it "arms attach mode for the parent only, forking a child every 10 ms under a tracer that comes and goes" do
      run_scenario(Churn::ForkChurn, Churn::SHORT[:fork])
    end
  end
end
