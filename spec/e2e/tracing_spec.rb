# frozen_string_literal: true

require "etc"
require "static_tracing/cli"

# Real bpftrace attached to a real Ruby process that defines its probes at
# run time. Runs as root; see spec/support/e2e.rb.
RSpec.describe "Tracing runtime probes with bpftrace", :e2e do
  let(:setup) do
    <<~RUBY
      provider = StaticTracing::Provider.register(:e2e_app)
      hello = provider.add_tracepoint(:hello, Integer, String, Float)
      provider.load
    RUBY
  end
  let(:app) { ruby_repl(setup) }
  let(:stub_path) { app.evaluate("provider.path") }

  it "reads Integer, String and Float arguments back exactly" do
    tracer = attach_bpftrace(app.pid, 'usdt:*:e2e_app:hello { printf("%ld|%s|%lu\n", arg0, str(arg1), arg2); }')
    values = [[-1, "minus one"], [0, "zero"], [(2**63) - 1, "max with spaces"], [-2**63, "min"], [42, ""]]
    fired = app.evaluate("#{values.inspect}.map { |number, text| hello.fire(number, text, 1.5) }")
    expect(fired).to all(be(true))

    lines = tracer.finish(after: /^42\|\|/).lines.map(&:chomp).grep(/\|/)
    float_bits = [1.5].pack("D").unpack1("Q")
    expect(lines).to eq(values.map { |number, text| "#{number}|#{text}|#{float_bits}" })
  end

  it "passes strings up to their first NUL byte, and strings that are not NUL-terminated in Ruby" do
    tracer = attach_bpftrace(app.pid, 'usdt:*:e2e_app:hello { printf("<%s>\n", str(arg1)); }')
    app.evaluate('hello.fire(1, "before\0after", 0.0)')
    app.evaluate('hello.fire(2, "a slice of a longer string"[2, 5], 0.0)')
    app.evaluate('hello.fire(3, "frozen".freeze, 0.0)')
    expect(tracer.finish(after: /^<frozen>$/).lines.map(&:chomp).grep(/^</)).to eq(%w[<before> <slice> <frozen>])
  end

  it "is enabled only while a tracer is attached" do
    expect(app.evaluate("hello.enabled?")).to be(false)
    expect(app.evaluate("hello.fire(1, 'unseen', 0.0)")).to be(false)
    tracer = attach_bpftrace(app.pid, "usdt:*:e2e_app:hello { @hits = count(); }")
    expect(app.evaluate("hello.enabled?")).to be(true)
    tracer.finish
    eventually("the probe is disabled after bpftrace exits") { app.evaluate("hello.enabled?") == false }
    expect(app.evaluate("hello.fire(1, 'unseen', 0.0)")).to be(false)
  end

  # x86-64 probe sites are the 5-byte NOP. A kernel that optimizes uprobes
  # (Linux 6.18 and later on x86-64) rewrites it into a call to a
  # trampoline it maps into the process, after the first hit; older ones
  # trap on an int3 in its first byte. Either way every hit is seen, and
  # the gem and the command see the probe as attached.
  it "sits on a 5-byte NOP, which kernels that optimize uprobes turn into a trampoline call" do
    skip "the 5-byte NOP is x86-64's" unless RbConfig::CONFIG["host_cpu"] == "x86_64"

    tracer = attach_bpftrace(app.pid, "usdt:*:e2e_app:hello { @sum = sum(arg0); @hits = count(); }")
    expect(app.evaluate("(1..1000).each { |i| hello.fire(i, 'x', 0.0) }; hello.enabled?")).to be(true)
    site = StaticTracing::CLI::Target.new(app.pid).probe_states.find { |state| state.probe.name == "hello" }
    expect(site).to have_attributes(attached: true, breakpoint: true)
    maps = File.read("/proc/#{app.pid}/maps")
    kernel = Gem::Version.new(Etc.uname[:release][/\A\d+\.\d+/])
    expect(maps).to include("[uprobes-trampoline]") if kernel >= Gem::Version.new("6.18")

    output = tracer.finish
    expect(output).to match(/^@hits: 1000$/).and match(/^@sum: 500500$/)
  end

  it "is listed by bpftrace -l with -p and by bcc's tplist, and found by wildcards" do
    app.evaluate("provider.add_tracepoint(:bye)")
    listed = wait_until_listed(app.pid, "usdt:*:e2e_app:*", count: 2)
    expect(listed).to contain_exactly(
      "usdt:/proc/#{app.pid}/root#{stub_path}:e2e_app:hello", "usdt:/proc/#{app.pid}/root#{stub_path}:e2e_app:bye"
    )
    expect(bpftrace_list(app.pid)).to include(*listed)

    require_command!("tplist-bpfcc")
    tplist, = Open3.capture2e("tplist-bpfcc", "-l", stub_path, "-vv")
    expect(tplist).to include("e2e_app:hello", "e2e_app:bye", "8 signed   bytes @ di", "8 unsigned bytes @ si")

    tracer = attach_bpftrace(app.pid, "usdt:*:e2e_app:* { @[probe] = count(); }")
    app.evaluate("3.times { hello.fire(1, 'x', 0.0) }; provider.tracepoints[:bye].fire")
    output = tracer.finish
    expect(output).to include("@[usdt:/proc/#{app.pid}/root#{stub_path}:e2e_app:hello]: 3")
    expect(output).to include("@[usdt:/proc/#{app.pid}/root#{stub_path}:e2e_app:bye]: 1")
  end

  it "is recorded by perf through its SDT support" do
    require_command!("perf")
    path = stub_path
    event = "sdt_e2e_app:hello"
    # perf's probe events are the system's, named after the probe: two runs
    # at once (the matrix lane's Rubies) take turns.
    recorder = nil
    holding_the_systems_probe_events do
      # One left by a run that was killed before its end would refuse ours.
      Open3.capture2e("perf", "probe", "-d", event)
      Dir.mktmpdir do |dir|
        # A cache of our own: perf's shared one remembers stubs of processes
        # long gone, and refuses to add an SDT event while it does.
        perf = lambda do |*args|
          output, status = Open3.capture2e("perf", "--buildid-dir", File.join(dir, "cache"), *args)
          expect(status).to be_success, "perf #{args.join(" ")}: #{output}"
          output
        end
        perf.call("buildid-cache", "--add", path)
        perf.call("probe", "-x", path, "-a", event)
        data = File.join(dir, "perf.data")
        control, acknowledged = %w[control ack].map { |name| File.join(dir, name).tap { File.mkfifo(_1) } }
        # Started with its event off (-D -1), perf turns it on when told on
        # its control FIFO and answers "ack" once it has: every call after
        # that answer is one perf must record.
        recorder = E2E::Child.new("perf", "record", "-q", "-D", "-1", "--control", "fifo:#{control},#{acknowledged}",
                                  "-e", event, "-p", app.pid.to_s, "-o", data)
        started_processes << recorder
        eventually("perf registered the probe") { app.evaluate("hello.enabled?") }
        perf_enable(control, acknowledged, recorder)
        fired = app.evaluate("(1..300).map { |n| hello.fire(n, 'perf', 0.0) }")
        expect(fired).to all(be(true))
        recorder.stop("INT")
        script = perf.call("script", "-i", data, "-F", "event,trace")
        seen = script.scan(/#{event}: \(\h+\) arg1=(\d+)/).flatten.map(&:to_i)
        expect(seen).to eq((1..300).to_a)
      ensure
        # The event cannot be removed while a perf record holds it.
        recorder&.kill
        Open3.capture2e("perf", "probe", "-d", event)
      end
    end
  end

  # Tells perf record, started with --control fifo:CONTROL,ACK, to turn its
  # events on, and returns once it answers that it has (30 s at most).
  def perf_enable(control, acknowledged, recorder)
    # Opened for reading and writing, as perf opens them: neither open waits for the other end.
    File.open(acknowledged, File::RDWR | File::NONBLOCK) do |answers|
      File.open(control, File::RDWR) { |commands| commands.write("enable\n") }
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
      answer = +""
      # perf answers "ack\n" and the string's NUL.
      until answer.include?("\n")
        left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        raise "perf exited (#{recorder.wait.inspect}) before it turned its event on:\n#{recorder.output}" unless
          recorder.alive?
        raise "perf did not turn its event on within 30 s:\n#{recorder.output}" unless left.positive?

        chunk = answers.wait_readable([left, 0.1].min) && answers.read_nonblock(64, exception: false)
        answer << chunk if chunk.is_a?(String)
      end
      expect(answer).to start_with("ack\n")
    end
  end

  # Yields while no other run of this spec holds the kernel's uprobe events
  # (a lock on the tracefs file that lists them: the same file for every
  # root of this kernel), 120 s at most.
  def holding_the_systems_probe_events
    events = %w[/sys/kernel/tracing/uprobe_events /sys/kernel/debug/tracing/uprobe_events].find { File.exist?(_1) }
    return yield unless events

    File.open(events) do |file|
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 120
      until file.flock(File::LOCK_EX | File::LOCK_NB)
        raise "another run held #{events} for 120 s" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

        sleep 0.1
      end
      yield
    end
  end

  # A debugger reads the loader's list of objects from outside the process
  # and opens each name itself: a stub listed by the descriptor it was
  # opened through (/proc/self/fd/N) made gdb read its own descriptor N and
  # hang, the process stopped under it.
  it "can be debugged: gdb attaches, lists the stub by its file and leaves the process running" do
    require_command!("gdb")
    output, status = Open3.capture2e("timeout", "--signal=KILL", "60", "gdb", "--nx", "--batch",
                                     "-p", app.pid.to_s, "-ex", "info sharedlibrary")
    expect(status).to be_success, "gdb did not finish (#{status.inspect}):\n#{output}"
    expect(output.lines.grep(/static_tracing|e2e_app/).join).to include(stub_path)
    expect(output).not_to include("/proc/self/")
    expect(app.evaluate("hello.fire(1, 'after gdb', 0.0)")).to be(false)
  end

  it "makes a tracepoint added after load attachable, and keeps an attached tracer counting across the reload" do
    counter = attach_bpftrace(app.pid, "usdt:*:e2e_app:hello { @hello = count(); }")
    expect(app.evaluate("3.times.map { hello.fire(1, 'before', 0.0) }")).to eq([true] * 3)
    app.evaluate("late = provider.add_tracepoint(:late, Integer)")
    expect(app.evaluate("provider.path")).to eq(stub_path)
    expect(app.evaluate("4.times.map { hello.fire(1, 'after', 0.0) }")).to eq([true] * 4)

    expect(wait_until_listed(app.pid,
                             "usdt:*:e2e_app:late")).to eq(["usdt:/proc/#{app.pid}/root#{stub_path}:e2e_app:late"])
    late = attach_bpftrace(app.pid, 'usdt:*:e2e_app:late { printf("late %ld\n", arg0); }')
    expect(app.evaluate("late.fire(77)")).to be(true)
    expect(late.finish(after: /^late 77$/)).to include("late 77")
    expect(counter.finish).to include("@hello: 7")
  end

  it "removes the probes on unload; fire is then harmless, even with a tracer attached" do
    path = stub_path
    tracer = attach_bpftrace(app.pid, "usdt:*:e2e_app:hello { @hits = count(); }")
    expect(app.evaluate("hello.fire(1, 'seen', 0.0)")).to be(true)
    app.evaluate("provider.unload")
    expect(app.evaluate("hello.fire(1, 'unseen', 0.0)")).to be(false)
    expect(app.evaluate("hello.enabled?")).to be(false)
    expect(bpftrace_list(app.pid, "usdt:*:e2e_app:*")).to be_empty
    expect(File.exist?(path)).to be(false)
    expect(tracer.finish).to include("@hits: 1")
    expect(app.evaluate("Process.pid")).to eq(app.pid)
  end

  it "keeps the stub in a private directory as a real file, mapped without (deleted)" do
    maps = File.readlines("/proc/#{app.pid}/maps").grep(/#{Regexp.escape(stub_path)}/)
    expect(maps).not_to be_empty
    expect(maps).to all(satisfy { |line| !line.include?("(deleted)") })
    expect(maps).to all(satisfy { |line| !line.split[1].include?("wx") })
    directory = File.stat(File.dirname(stub_path))
    expect(directory.mode & 0o777).to eq(0o700)
    expect(directory.uid).to eq(Process.euid)
    expect(File.stat(stub_path)).to be_file
  end

  it "removes the stub when the process exits" do
    path = stub_path
    app.stop("TERM")
    expect(File.exist?(path)).to be(false)
  end
end
