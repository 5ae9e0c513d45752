# frozen_string_literal: true

require "tmpdir"

# A stub directory whose path holds a control character is refused: tracers
# find stubs by the paths in /proc/PID/maps, which escape such characters,
# so no tracer could attach to a stub there. The next candidate is used.
RSpec.describe "Control characters in stub directory settings" do
  around do |example|
    Dir.mktmpdir("control") do |dir|
      @runtime = File.join(dir, "runtime")
      Dir.mkdir(@runtime, 0o700)
      @bad = File.join(dir, "bad\ndir")
      example.run
    end
  end

  let(:env) { { "STATIC_TRACING_DIR" => @bad, "XDG_RUNTIME_DIR" => @runtime } }
  let(:fallback) { File.join(@runtime, "static_tracing") }

  def start(child_env = env)
    ruby_repl(<<~RUBY, env: child_env)
      $provider = StaticTracing::Provider.register(:escaped)
      $provider.add_tracepoint(:hello)
      $provider.load
    RUBY
  end

  def expect_skipped_with_reason(child, setting)
    warning = child.wait_for(/^static_tracing: stub directory skipped: .*$/)[0]
    expect(warning).to include(setting)
    expect(warning).to include(@bad.dump)
    expect(warning).to match(/control character 0x0a/)
    expect(warning).to match(%r{tracers cannot name .*/proc/PID/maps})
    expect(File.exist?(@bad)).to be(false)
  end

  describe "in a child process", :subprocess do
    it "skips $STATIC_TRACING_DIR with a newline, says why, and loads the stub from the next candidate" do
      child = start
      expect_skipped_with_reason(child, "$STATIC_TRACING_DIR")
      path = child.evaluate("$provider.path")
      expect(File.dirname(path)).to eq(fallback)
      expect(path).not_to match(/[[:cntrl:]]/)
      expect(child.evaluate("File.read('/proc/self/maps')")).to include(path)
      expect(File.dirname(child.evaluate("StaticTracing::State.path"))).to eq(fallback)
    end

    it "skips $XDG_RUNTIME_DIR with a control character the same way" do
      Dir.mkdir(@bad, 0o700)
      xdg = File.join(@bad, "static_tracing")
      @bad = xdg
      child = start({ "STATIC_TRACING_DIR" => nil, "XDG_RUNTIME_DIR" => File.dirname(xdg) })
      expect_skipped_with_reason(child, "$XDG_RUNTIME_DIR")
      expect(File.dirname(child.evaluate("$provider.path"))).to eq("/tmp/static_tracing-#{Process.euid}")
    end
  end

  describe "under bpftrace", :e2e do
    it "lists the probe under a path without control characters" do
      child = start
      listed = bpftrace_list(child.pid, "usdt:*:escaped:*")
      expect(listed.size).to eq(1)
      expect(listed.first).to end_with("#{child.evaluate("$provider.path")}:escaped:hello")
      expect(listed.first).not_to match(/[[:cntrl:]]|\\/)
    end
  end
end
