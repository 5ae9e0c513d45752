# frozen_string_literal: true

require "fileutils"

# Providers come and go under a live tracer, thousands of times, and at
# process exit; nothing crashes, nothing is left behind.
RSpec.describe "Provider lifecycle", :e2e do
  include_context "with a private stub directory"

  let(:env) { { "STATIC_TRACING_DIR" => @stub_dir } }

  let(:app) do
    ruby_repl(<<~RUBY, env:)
      $provider = StaticTracing::Provider.register(:life)
      $hello = $provider.add_tracepoint(:hello, Integer)
      $provider.load

      # What this process holds open, maps and has on disk in its stub directory.
      def footprint
        dir = File.dirname(StaticTracing::State.path)
        {
          fds: Dir.children("/proc/self/fd").size,
          maps: File.readlines("/proc/self/maps").count { |line| line.include?(dir) },
          files: Dir.children(dir).sort
        }
      end
    RUBY
  end

  # Gone, or a zombie: an orphan is reaped by whoever adopted it.
  def exited?(pid)
    File.read("/proc/#{pid}/stat")[/\) (\w)/, 1] == "Z"
  rescue Errno::ENOENT, Errno::ESRCH
    true
  end

  describe "under bpftrace" do
    it "survives an unload while bpftrace is attached: the tracer keeps running and its count stops" do
      path = app.evaluate("$provider.path")
      tracer = attach_bpftrace(app.pid, 'usdt:*:life:hello { @hits = count(); printf("hit %d\n", arg0); }')
      expect(app.evaluate("3.times.map { |i| $hello.fire(i) }")).to eq([true] * 3)
      tracer.wait_for(/^hit 2$/)

      app.evaluate("$provider.unload")
      expect(File.exist?(path)).to be(false)
      expect(app.evaluate("100.times.map { |i| $hello.fire(i) }.uniq")).to eq([false])
      expect(app.evaluate("$hello.enabled?")).to be(false)
      # Loaded again, the provider is a new file the old tracer is not attached to.
      app.evaluate("$provider.load")
      expect(app.evaluate("$provider.path")).not_to eq(path)
      expect(app.evaluate("100.times.map { |i| $hello.fire(i) }.uniq")).to eq([false])

      expect(tracer).to be_alive
      expect(app.evaluate("Process.pid")).to eq(app.pid)
      output = tracer.finish
      expect(output).to include("@hits: 3")
      expect(output.scan(/^hit \d+$/)).to eq(["hit 0", "hit 1", "hit 2"])

      fresh = attach_bpftrace(app.pid, "usdt:*:life:hello { @hits = count(); }")
      expect(app.evaluate("2.times.map { |i| $hello.fire(i) }")).to eq([true] * 2)
      expect(fresh.finish).to include("@hits: 2")
    end

    it "gives a name unregistered and registered again a new provider, which can be attached" do
      old_path = app.evaluate("$provider.path")
      tracer = attach_bpftrace(app.pid, "usdt:*:life:hello { @hits = count(); }")
      app.evaluate("$old = $provider; $provider.unregister")
      expect(app.evaluate("[$old.loaded?, $old.registered?, $hello.fire(1)]")).to eq([false, false, false])
      expect(File.exist?(old_path)).to be(false)
      expect(tracer).to be_alive

      app.evaluate(<<~RUBY)
        $provider = StaticTracing::Provider.register(:life)
        $again = $provider.add_tracepoint(:hello, Integer)
        $provider.load
      RUBY
      identities = "[$provider.equal?($old), $again.equal?($hello), StaticTracing.providers[:life].equal?($provider)]"
      expect(app.evaluate(identities)).to eq([false, false, true])
      path = app.evaluate("$provider.path")
      expect(bpftrace_list(app.pid, "usdt:*:life:*")).to eq(["usdt:/proc/#{app.pid}/root#{path}:life:hello"])
      # No hit: bpftrace 0.17 prints a count never taken as "@hits: 0", later versions leave it out.
      expect(tracer.finish).not_to match(/^@hits: [1-9]/)

      fresh = attach_bpftrace(app.pid, "usdt:*:life:hello { @hits = count(); }")
      expect(app.evaluate("[$again.fire(1), $again.fire(2), $hello.fire(3)]")).to eq([true, true, false])
      expect(fresh.finish).to include("@hits: 2")
    end
  end

  describe "repeated" do
    # The watcher's thread and pipe (three descriptors) live as long as the
    # process: a first declaration into the loaded provider starts them
    # before the baseline is taken.
    it "grows a loaded provider by 1,000 in-place reloads without leaking a descriptor, mapping or file" do
      before = app.evaluate("$provider.add_tracepoint(:starts_the_watcher); $provider.load.unload; footprint")
      during, after = app.evaluate(<<~RUBY, timeout: 120)
        $provider.load
        path = $provider.path
        1_000.times { |i| $provider.add_tracepoint(:"grown_\#{i}", Integer).provider.load }
        raise "reloaded elsewhere: \#{$provider.path}" unless $provider.path == path

        during = footprint
        $provider.unload
        [during, footprint]
      RUBY
      # While loaded: one more descriptor (the image file), one file, its mappings.
      expect(during[:fds]).to eq(before[:fds] + 1)
      expect(during[:files].size).to eq(before[:files].size + 1)
      expect(during[:maps]).to be_between(1, 8)
      expect(after).to eq(before)
    end

    it "loads and unloads 1,000 times, and registers and unregisters 1,000 names, without leaking" do
      before = app.evaluate("$provider.add_tracepoint(:starts_the_watcher); $provider.load.unload; " \
                            "[footprint, StaticTracing.providers.size]")
      after = app.evaluate(<<~RUBY, timeout: 120)
        1_000.times do |i|
          $provider.load
          $provider.add_tracepoint(:"cycle_\#{i}")
          $provider.unload
        end
        1_000.times do |i|
          provider = StaticTracing::Provider.register(:"life_\#{i}")
          provider.add_tracepoint(:hello, Integer)
          provider.load
          provider.add_tracepoint(:bye)
          provider.unregister
        end
        GC.start
        [footprint, StaticTracing.providers.size]
      RUBY
      expect(after).to eq(before)
      expect(stub_files(app.pid)).to be_empty
    end
  end

  describe "at exit" do
    it "removes every stub and the state file of a process that exits normally" do
      child = ruby_process(<<~'RUBY', env:)
        $stdout.sync = true
        one = StaticTracing::Provider.register(:exit_one)
        one.add_tracepoint(:hello)
        one.load
        one.add_tracepoint(:grown)
        two = StaticTracing::Provider.load(:exit_two)
        three = StaticTracing::Provider.load(:exit_three)
        three.unload
        puts "READY #{StaticTracing::State.path} #{one.path} #{two.path}"
        $stdin.gets
      RUBY
      state, *stubs = child.wait_for(/^READY (\S+) (\S+) (\S+)$/).captures
      expect(File.basename(state)).to eq(StubNames.state_file(child.pid))
      expect([state, *stubs]).to all(satisfy { |path| File.exist?(path) })
      expect(stub_files(child.pid).size).to eq(2)

      key = StubNames.process_key(child.pid)
      child.puts("exit")
      expect(child.wait).to be_success
      expect(Dir.children(@stub_dir).grep(/(\A|-)#{key}[.-]/)).to be_empty
    end

    it "sweeps the stubs and state files no live process holds when a process starts, whatever pid they name" do
      holder = ruby_repl("StaticTracing::Provider.load(:held)", env:)
      held = holder.evaluate("[StaticTracing::State.path, StaticTracing.providers[:held].path]")
      dead = Process.spawn("true")
      Process.wait(dead)
      namespace = StubNames.pid_namespace
      planted = ["gone-#{dead}-#{namespace}-0.so", "gone_too-#{dead}-#{namespace}-17.so", "#{dead}-#{namespace}.state",
                 "unheld-1-#{namespace}-0.so", "1-#{namespace}.state", ".#{dead}-#{namespace}.state.new"]
      kept = ["notes.txt", "not_a_stub-#{dead}.so", "#{dead}.state"]
      (planted + kept).each { |name| File.write(File.join(@stub_dir, name), "x") }

      expect(app.evaluate("$provider.loaded?")).to be(true)
      left = Dir.children(@stub_dir)
      expect(left & planted).to be_empty
      expect(left).to include(*kept, *held.map { |path| File.basename(path) })
    end

    it "does not sweep the stub of a dead creator while its forked child still maps it" do
      creator = ruby_repl("", env:)
      survivor = nil
      path, survivor = creator.evaluate(<<~RUBY)
        provider = StaticTracing::Provider.load(:orphaned)
        provider.add_tracepoint(:hello)
        [provider.path, fork { [$stdin, $stdout, $stderr].each { |io| io.reopen(File::NULL) }; sleep }]
      RUBY
      Process.kill("KILL", creator.pid)
      creator.wait
      expect(File.exist?(path)).to be(true)

      later = ruby_repl("StaticTracing::Provider.load(:later)", env:)
      expect(later.evaluate("StaticTracing.providers[:later].loaded?")).to be(true)
      expect(File.exist?(path)).to be(true)
      expect(File.read("/proc/#{survivor}/maps")).to include(path)

      Process.kill("KILL", survivor)
      eventually("the survivor has exited") { exited?(survivor) }
      last = ruby_repl("", env:)
      expect(last.evaluate("1")).to eq(1)
      expect(File.exist?(path)).to be(false)
    ensure
      Process.kill("KILL", survivor) if survivor && !exited?(survivor)
    end
  end
end
