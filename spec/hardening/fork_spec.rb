# frozen_string_literal: true

require "socket"
require "tmpdir"

# A provider loaded before fork: each process is traced by its own PID, a
# child never removes its parent's stub, and a parent that grows the
# provider while a child maps it leaves the child's copy alone.
RSpec.describe "Providers across fork", :e2e do
  # The parent: a REPL with a loaded provider, and a way to fork children
  # that evaluate what the parent sends them over a pipe.
  let(:parent) do
    ruby_repl(<<~'RUBY' + E2E::FORKING_REPL)
      $provider = StaticTracing::Provider.register(:forked)
      $hello = $provider.add_tracepoint(:hello, Integer)
      $provider.load
    RUBY
  end

  let(:path) { parent.evaluate("$provider.path") }

  # Gone, or a zombie: an orphan is reaped by whoever adopted it.
  def exited?(pid)
    File.read("/proc/#{pid}/stat")[/\) (\w)/, 1] == "Z"
  rescue Errno::ENOENT, Errno::ESRCH
    true
  end

  def hits_by_pid(output)
    output.scan(/^@hits\[(\d+)\]: (\d+)$/).to_h { |pid, count| [pid.to_i, count.to_i] }
  end

  it "traces a forked child by its PID, and counts none of the parent's fires" do
    kid = parent.evaluate("$kid = Kid.new; $kid.pid")
    expect(bpftrace_list(kid, "usdt:*:forked:*")).to eq(["usdt:/proc/#{kid}/root#{path}:forked:hello"])
    tracer = attach_bpftrace(kid, "usdt:*:forked:hello { @hits[pid] = count(); }")
    expect(parent.evaluate("$kid.eval('7.times.map { |i| $hello.fire(i) }')")).to eq([true] * 7)
    parent_fired = parent.evaluate("5.times.map { |i| $hello.fire(i) }")
    expect(parent.evaluate("$kid.eval('[$hello.fire(8), Process.pid]')")).to eq([true, kid])
    expect(hits_by_pid(tracer.finish)).to eq(kid => 8)
    # The uprobe is the child's alone: the parent's probe stayed disarmed.
    expect(parent_fired).to eq([false] * 5)
  end

  [
    ["exits normally", "$kid.finish.exitstatus", 0],
    ["calls exit!", "$kid.send_code('exit!(3)'); $kid.wait.exitstatus", 3],
    ["is killed with SIGKILL", "Process.kill(:KILL, $kid.pid); $kid.wait.termsig", 9]
  ].each do |how, finish, status|
    it "keeps the parent's stub file and state when a child #{how}" do
      state = parent.evaluate("StaticTracing::State.path")
      kid = parent.evaluate("$kid = Kid.new; $kid.pid")
      expect(parent.evaluate("$kid.eval('[$provider.path, $hello.enabled?]')")).to eq([path, false])
      expect(parent.evaluate(finish)).to eq(status)
      expect(File.exist?("/proc/#{kid}")).to be(false)

      expect(File.exist?(path)).to be(true)
      expect(File.exist?(state)).to be(true)
      expect(parent.evaluate("[$provider.path, $provider.loaded?]")).to eq([path, true])
      tracer = attach_bpftrace(parent.pid, "usdt:*:forked:hello { @hits[pid] = count(); }")
      expect(parent.evaluate("3.times.map { $hello.fire(1) }")).to eq([true] * 3)
      # Nobody else maps the file now: growing the provider rewrites it in place.
      inode = File.stat(path).ino
      parent.evaluate("$provider.add_tracepoint(:later); $provider.load")
      expect(parent.evaluate("$provider.path")).to eq(path)
      expect(File.stat(path).ino).to eq(inode)
      expect(parent.evaluate("$hello.fire(1)")).to be(true)
      expect(hits_by_pid(tracer.finish)).to eq(parent.pid => 4)
    end
  end

  it "leaves the parent's file alone when a child grows and unloads the provider it inherited" do
    path = parent.evaluate("$provider.path")
    kid = parent.evaluate("$kid = Kid.new; $kid.pid")
    kid_path = parent.evaluate("$kid.eval('$provider.add_tracepoint(:kid_only); $provider.load.path')")
    expect(File.basename(kid_path)).to match(StubNames.stub_file_pattern("forked", kid))
    tracer = attach_bpftrace(kid, "usdt:*:forked:kid_only { @hits[pid] = count(); }")
    expect(parent.evaluate("$kid.eval('$provider.tracepoints[:kid_only].fire')")).to be(true)
    expect(hits_by_pid(tracer.finish)).to eq(kid => 1)

    parent.evaluate("$kid.eval('$provider.unload')")
    expect(File.exist?(kid_path)).to be(false)
    expect(parent.evaluate("$kid.finish.exitstatus")).to eq(0)
    expect(File.exist?(path)).to be(true)
    expect(parent.evaluate("[$provider.path, $provider.tracepoints.key?(:kid_only), $hello.enabled?]"))
      .to eq([path, false, false])
  end

  it "moves a parent's reload to a fresh file while a child maps the old one, and the child keeps firing" do
    path = parent.evaluate("$provider.path")
    kid = parent.evaluate("$kid = Kid.new; $kid.pid")
    kid_tracer = attach_bpftrace(kid, "usdt:*:forked:hello { @hits[pid] = count(); }")
    expect(parent.evaluate("$kid.eval('2.times.map { $hello.fire(1) }')")).to eq([true] * 2)

    parent.evaluate("$late = $provider.add_tracepoint(:late, String); $provider.load")
    fresh = parent.evaluate("$provider.path")
    expect(fresh).not_to eq(path)
    expect(File.basename(fresh)).to match(StubNames.stub_file_pattern("forked", parent.pid))
    expect(File.exist?(path)).to be(true)
    expect(File.readlines("/proc/#{kid}/maps").grep(/#{Regexp.escape(path)}/)).not_to be_empty
    expect(File.readlines("/proc/#{parent.pid}/maps").grep(/#{Regexp.escape(path)}/)).to be_empty

    # The child still fires through its copy of the old image, which its tracer watches.
    expect(parent.evaluate("$kid.eval('3.times.map { $hello.fire(1) }')")).to eq([true] * 3)
    expect(parent.evaluate("$kid.eval('$provider.path')")).to eq(path)
    # The parent's new image is attachable on its own.
    parent_tracer = attach_bpftrace(parent.pid, "usdt:*:forked:late { @late[pid] = count(); }")
    expect(parent.evaluate("$late.fire('x')")).to be(true)
    expect(parent_tracer.finish).to include("@late[#{parent.pid}]: 1")
    expect(hits_by_pid(kid_tracer.finish)).to eq(kid => 5)

    # Once the child is gone, the old file goes with the parent's next load.
    expect(parent.evaluate("$kid.finish.exitstatus")).to eq(0)
    expect(File.exist?(path)).to be(true)
    parent.evaluate("StaticTracing::Provider.load(:forked_other)")
    expect(File.exist?(path)).to be(false)
    expect(File.exist?(fresh)).to be(true)
  end

  it "keeps a child that outlives its parent traceable, and sweeps the stub once both are gone" do
    Dir.mktmpdir("hardening") do |dir|
      env = { "STATIC_TRACING_DIR" => File.join(dir, "stubs") }
      socket = File.join(dir, "kid.sock")
      # The child serves "fire" requests on a socket, so it can be driven
      # after its parent, whose pipes it lets go of, is gone.
      parent = ruby_process(<<~RUBY, env:)
        require "socket"
        $stdout.sync = true
        provider = StaticTracing::Provider.register(:outlived)
        hello = provider.add_tracepoint(:hello, Integer)
        provider.load
        server = UNIXServer.new(#{socket.inspect})
        kid = fork do
          [$stdin, $stdout, $stderr].each { |io| io.reopen(File::NULL) }
          client = server.accept
          while (line = client.gets)
            client.puts(Array.new(Integer(line)) { hello.fire(1) }.inspect)
          end
        end
        server.close
        puts "READY \#{kid} \#{provider.path}"
        $stdin.gets
      RUBY
      kid, path = parent.wait_for(/^READY (\d+) (\S+)$/).captures
      kid = Integer(kid)
      begin
        parent.puts("exit")
        expect(parent.wait).to be_success
        expect(File.exist?(path)).to be(true)

        tracer = attach_bpftrace(kid, "usdt:*:outlived:hello { @hits[pid] = count(); }")
        UNIXSocket.open(socket) do |client|
          client.puts("3")
          expect(client.gets).to eq("[true, true, true]\n")
        end
        expect(hits_by_pid(tracer.finish)).to eq(kid => 3)
      ensure
        Process.kill("KILL", kid)
      end
      eventually("the child has exited") { exited?(kid) }
      later = ruby_repl("", env:)
      expect(later.evaluate("StaticTracing::State.path")).to start_with(env["STATIC_TRACING_DIR"])
      expect(File.exist?(path)).to be(false)
    end
  end

  it "traces each preloaded unicorn worker by its own PID" do
    unicorn = start_unicorn(workers: 2, env: { "STATIC_TRACING_MODE" => "on" })
    workers = unicorn.worker_pids
    stub = File.read("/proc/#{unicorn.pid}/maps")[%r{\S+/my_controller-#{StubNames.process_key(unicorn.pid)}-\d+\.so$}]
    expect(stub).not_to be_nil
    workers.each do |worker|
      expect(bpftrace_list(worker, "usdt:*:my_controller:index"))
        .to eq(["usdt:/proc/#{worker}/root#{stub}:my_controller:index"])
    end
    tracers = workers.to_h do |worker|
      [worker, attach_bpftrace(worker, "usdt:*:my_controller:slow { @hits[pid] = count(); }")]
    end

    served = unicorn.serve_until("/slow") { |pids| pids.uniq.size == workers.size }.tally
    expect(served.keys).to match_array(workers)

    workers.each do |worker|
      expect(hits_by_pid(tracers.fetch(worker).finish)).to eq(worker => served[worker])
    end
    expect(unicorn.tracing_state).to include("enabled" => "true", "wrapped" => "true")
  end
end
