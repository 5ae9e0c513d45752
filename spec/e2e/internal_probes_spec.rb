# frozen_string_literal: true

require "fileutils"
require "tmpdir"

# The gem's own compile-time probes (provider static_tracing, in the native
# extension), seen by bpftrace in a live child.
RSpec.describe "static_tracing's internal probes", :e2e do
  let(:probes) do
    %w[load-error provider-load provider-unload state-publish stub-fallback trace-context tracing-toggle]
  end

  # One string a printf: two of bpftrace's 200-byte strings in one would
  # overflow the BPF stack.
  let(:program) do
    <<~BPF
      usdt:*:static_tracing:provider-load { printf("LOAD %s ", str(arg0)); printf("%s %d\\n", str(arg1), arg2); }
      usdt:*:static_tracing:provider-unload { printf("UNLOAD %s\\n", str(arg0)); }
      usdt:*:static_tracing:tracing-toggle { printf("TOGGLE %d\\n", arg0); }
      usdt:*:static_tracing:state-publish { printf("PUBLISH %s\\n", str(arg0)); }
      usdt:*:static_tracing:stub-fallback { printf("FALLBACK %s | ", str(arg0)); printf("%s\\n", str(arg1)); }
      usdt:*:static_tracing:load-error { printf("LOAD_ERROR %s | ", str(arg0)); printf("%s\\n", str(arg1)); }
    BPF
  end

  it "lists them, named with dashes, in the extension" do
    child = ruby_repl
    listed = bpftrace_list(child.pid, "usdt:*:static_tracing:*")
    expect(listed.map { |line| line.split(":").last }).to match_array(probes)
    expect(listed).to all(match(%r{\Ausdt:\S*/static_tracing\.so:static_tracing:}))
  end

  it "reports providers loaded, reloaded and unloaded, and tracing switched" do
    child = ruby_repl
    tracer = attach_bpftrace(child.pid, program)

    path = child.evaluate(<<~RUBY)
      provider = StaticTracing::Provider.register(:internal_demo)
      provider.add_tracepoint(:one, Integer)
      provider.add_tracepoint(:two, String, Float)
      provider.load.path
    RUBY
    tracer.wait_for(/^LOAD internal_demo #{Regexp.escape(path)} 2$/)

    reloaded = child.evaluate("StaticTracing.providers[:internal_demo].tap { |p| p.add_tracepoint(:three) }.path")
    tracer.wait_for(/^LOAD internal_demo #{Regexp.escape(reloaded)} 3$/)

    child.evaluate("StaticTracing.providers[:internal_demo].unload")
    tracer.wait_for(/^UNLOAD internal_demo$/)

    # Enabling loads the provider again, for tracing, and publishes the
    # new state; disabling unloads it.
    mark = tracer.output.size
    state_file = child.evaluate("StaticTracing.enable!; StaticTracing::State.path")
    tracer.wait_for(/^LOAD internal_demo \S+ 3\nTOGGLE 1\nPUBLISH #{Regexp.escape(state_file)}$/, from: mark)

    mark = tracer.output.size
    child.evaluate("StaticTracing.disable!")
    tracer.wait_for(/^UNLOAD internal_demo\nTOGGLE 0\nPUBLISH #{Regexp.escape(state_file)}$/, from: mark)
    expect(tracer.finish).not_to match(/^LOAD_ERROR/)
  end

  # docs/recording.md's one-liner, run as it is written there.
  it "gives a script each thread's trace context: slow calls printed with their trace ids" do
    line = File.readlines(File.expand_path("../../docs/recording.md", __dir__))
               .find { |each| each.start_with?("bpftrace") && each.include?("static_tracing:trace-context") }
    program = line[/-e '(.*)'$/, 1] or raise "no bpftrace one-liner of trace-context in docs/recording.md"
    child = ruby_repl(<<~RUBY)
      class MyController
        include StaticTracing::LatencyTracer
        def index(seconds) = sleep(seconds)
      end
      StaticTracing.enable!
      APP = MyController.new
    RUBY
    wait_until_listed(child.pid, "usdt:*:my_controller:index")
    # With bpftrace's default string length, as an operator runs it (a
    # 200-byte string in a map and a printf exceed bpftrace 0.17's BPF stack).
    defaults = %w[env BPFTRACE_STRLEN=64 BPFTRACE_MAX_STRLEN=64] << E2E.bpftrace
    tracer = attach_bpftrace(child.pid, program, bpftrace: defaults)
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    child.evaluate(<<~RUBY)
      StaticTracing.with_trace_context("#{trace_id}", "00f067aa0ba902b7") { APP.index(0.15) }
      APP.index(0)
      APP.index(0.15)
      nil
    RUBY
    tracer.wait_for(/^slow call: 1\d\d ms, trace #{trace_id}\nslow call: 1\d\d ms, trace \n/)
    expect(tracer.finish.scan("slow call").size).to eq(2)
  end

  it "reports each stub directory skipped, and why" do
    shared = Dir.mktmpdir("internal_probes")
    File.chmod(0o755, shared)
    child = ruby_repl("", env: { "STATIC_TRACING_DIR" => shared })
    tracer = attach_bpftrace(child.pid, program)

    path = child.evaluate("StaticTracing::Provider.register(:internal_fallback)" \
                          ".tap { |p| p.add_tracepoint(:tick, Integer) }.load.path")
    expect(File.dirname(path)).not_to eq(shared)
    tracer.wait_for(/^FALLBACK #{Regexp.escape(shared)} \(\$STATIC_TRACING_DIR\) \| its mode is 0755: /)
    tracer.wait_for(/^LOAD internal_fallback #{Regexp.escape(path)} 1$/)
  ensure
    FileUtils.rm_rf(shared) if shared
  end
end
