# frozen_string_literal: true

require "fileutils"
require "tmpdir"

# The gem's own compile-time probes (provider static_tracing, in the native
# extension), seen by bpftrace in a live child.
RSpec.describe "static_tracing's internal probes", :e2e do
  let(:probes) { %w[load-error provider-load provider-unload state-publish stub-fallback tracing-toggle] }

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
