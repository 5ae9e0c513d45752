# frozen_string_literal: true

require "json"

# Real signals sent to real Ruby processes: SIGNAL mode toggles tracing once
# per signal received, whatever the main thread is doing, next to the
# handlers the application installed, in forked children too. Every wait is
# on state the child reports, and bounded.
module SignalToggleSpec
  # Loaded in each child: a traced class, and the tracing state read as one
  # (the signal thread changes it under STATE_LOCK). `handled` counts the
  # runs of the application's own handlers.
  SETUP = <<~'RUBY'
    Process.setrlimit(:CORE, 0)
    $handled = 0
    def handled = $handled

    class Traced
      include StaticTracing::LatencyTracer
      def work = :done
    end

    def state
      StaticTracing::STATE_LOCK.synchronize do
        { enabled: StaticTracing.enabled?, received: StaticTracing::SignalToggle.received,
          wrapped: Traced.instance_method(:work).owner != Traced,
          loaded: StaticTracing.providers[:traced].loaded?, handled: handled }
      end
    end

    # The signal thread waits on its pipe and nothing is left in it.
    def settled?
      watcher = StaticTracing::SignalToggle.instance_variable_get(:@watcher)
      reader = StaticTracing::SignalToggle.instance_variable_get(:@pipe).first
      watcher.status == "sleep" && !reader.ready?
    end

    # For a forked child: prints the state each time it changes, until killed.
    def report_changes(tag)
      $stdin.close
      last = nil
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
      while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
        now = state
        puts "#{tag} #{Process.pid} #{now.map { |key, value| "#{key}=#{value}" }.join(" ")}" if now != last
        last = now
        sleep 0.01
      end
      exit!(0)
    end
  RUBY

  # A handler installed with sigaction(2), not by Ruby, counting its calls.
  NATIVE_HANDLER = <<~C
    #include <signal.h>
    #include <string.h>

    static volatile sig_atomic_t hits;

    static void on_signal(int signal) { (void)signal; hits++; }

    int install_handler(int signal) {
      struct sigaction action;
      memset(&action, 0, sizeof action);
      action.sa_handler = on_signal;
      sigemptyset(&action.sa_mask);
      return sigaction(signal, &action, 0);
    }

    int handler_hits(void) { return hits; }
  C

  def self.reporting(state)
    state.map { |key, value| "#{key}=#{value}" }.join(" ")
  end
end

RSpec.describe StaticTracing::SignalToggle, :subprocess do
  include_context "with a temporary directory", "signal_toggle_spec"

  let(:trap_number) { Signal.list["TRAP"] }
  let(:usr2_number) { Signal.list["USR2"] }

  def repl(extra_setup = "", env: {})
    ruby_repl("#{SignalToggleSpec::SETUP}\n#{extra_setup}", env:)
  end

  def state(child)
    child.evaluate("state")
  end

  # The state after +received+ toggle signals, starting from off.
  def expected(received, handled: 0)
    on = received.odd?
    { enabled: on, received:, wrapped: on, loaded: on, handled: }
  end

  def await_state(child, expected, timeout: 10)
    last = nil
    eventually("process #{child.pid} is in state #{expected}", timeout:) { (last = state(child)) == expected }
  rescue RuntimeError => e
    raise e.exception("#{e.message}; last seen #{last}")
  end

  # Sends +signal+ once, then waits until the child is in the +expected+
  # state: one signal at a time, so that none is merged with another.
  def signal_and_wait(child, signal, expected)
    Process.kill(signal, child.pid)
    await_state(child, expected)
  end

  def configuration(child)
    child.evaluate("c = StaticTracing::Configuration; " \
                   "[c.mode, c.signal, StaticTracing::SignalToggle.signal, StaticTracing::Native.armed_signal]")
  end

  # Whether the stub of provider +provider+ is mapped into process +pid+:
  # seen from outside, without the child's main thread.
  def stub_mapped?(pid, provider = "traced")
    File.foreach("/proc/#{pid}/maps").any? do |line|
      File.basename(line.split(" ", 6)[5].to_s.strip).start_with?("#{provider}-")
    end
  end

  # Runs +code+ in the child from another thread, since it blocks the child.
  def evaluate_in_background(child, code, marker)
    mark = child.output.size
    thread = Thread.new { child.evaluate(code, timeout: 40) }
    thread.report_on_exception = false
    child.wait_for(/^#{marker}$/, from: mark)
    thread
  end

  # Opens +fifo+ for writing once the child has it open for reading.
  def write_fifo(fifo, data)
    eventually("a reader has opened #{fifo}") do
      File.open(fifo, File::WRONLY | File::NONBLOCK) { |io| io.write(data) }
    rescue Errno::ENXIO
      false
    end
  end

  def native_handler_library
    skip "no C compiler" unless system("command -v cc >/dev/null 2>&1")
    source = File.join(@dir, "handler.c")
    library = File.join(@dir, "handler.so")
    File.write(source, SignalToggleSpec::NATIVE_HANDLER)
    raise "cc failed" unless system("cc", "-shared", "-fPIC", "-o", library, source)

    library
  end

  def with_native_handler
    <<~RUBY
      require "fiddle"
      native = Fiddle.dlopen(#{native_handler_library.inspect})
      INSTALL_HANDLER = Fiddle::Function.new(native["install_handler"], [Fiddle::TYPE_INT], Fiddle::TYPE_INT)
      HANDLER_HITS = Fiddle::Function.new(native["handler_hits"], [], Fiddle::TYPE_INT)
      def handled = HANDLER_HITS.call
    RUBY
  end

  describe "in SIGNAL mode" do
    it "turns tracing on and off once per SIGTRAP: wrappers and providers follow" do
      child = repl
      expect(configuration(child)).to eq([:signal, "TRAP", "TRAP", trap_number])
      expect(state(child)).to eq(expected(0))
      1.upto(6) do |received|
        signal_and_wait(child, "TRAP", expected(received))
        expect(child.evaluate("Traced.new.work")).to eq(:done)
      end
      expect(child).to be_alive
    end

    it "applies the toggle in Ruby, on its own thread, not in a trap handler on the main thread" do
      child = repl(<<~RUBY)
        $toggled_on = []
        StaticTracing::Switch.singleton_class.prepend(Module.new do
          def toggle!
            $toggled_on << [Thread.current.name, Thread.current == Thread.main]
            super
          end
        end)
      RUBY
      signal_and_wait(child, "TRAP", expected(1))
      signal_and_wait(child, "TRAP", expected(2))
      expect(child.evaluate("$toggled_on")).to eq([["static_tracing signal", false]] * 2)
    end

    # How soon is a speed (docs/modes.md: a fraction of a second), not
    # bounded here: what is checked is that the toggle does not wait for
    # the main thread, busy or blocked, to stop.
    it "toggles while the main thread is busy running Ruby, which sees it on before it gives up" do
      child = repl
      busy = evaluate_in_background(child, <<~RUBY, "BUSY")
        puts "BUSY"
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
        spins = 0
        spins += 1 until (seen_on = StaticTracing.enabled?) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        [seen_on, spins]
      RUBY
      Process.kill("TRAP", child.pid)
      enabled, spins = busy.value
      expect(enabled).to be(true)
      expect(spins).to be_positive
      expect(state(child)).to eq(expected(1))
    end

    it "toggles while the main thread is blocked reading a pipe, seen from outside the process" do
      fifo = File.join(@dir, "fifo")
      File.mkfifo(fifo)
      child = repl
      blocked = evaluate_in_background(child, "puts 'BLOCKED'; File.read(#{fifo.inspect})", "BLOCKED")
      [true, false].each do |mapped|
        Process.kill("TRAP", child.pid)
        eventually("the stub is #{mapped ? "" : "un"}mapped") { stub_mapped?(child.pid) == mapped }
      end
      expect(blocked).to be_alive
      write_fifo(fifo, "done")
      expect(blocked.value).to eq("done")
      expect(state(child)).to eq(expected(2))
    end

    it "toggles while the main thread sleeps" do
      fifo = File.join(@dir, "fifo")
      File.mkfifo(fifo)
      child = repl
      child.evaluate("$waker = Thread.new { File.read(#{fifo.inspect}); Thread.main.wakeup }")
      sleeping = evaluate_in_background(child, "puts 'SLEEPING'; sleep(30)", "SLEEPING")
      [true, false, true].each do |mapped|
        Process.kill("TRAP", child.pid)
        eventually("the stub is #{mapped ? "" : "un"}mapped") { stub_mapped?(child.pid) == mapped }
      end
      write_fifo(fifo, "wake up")
      expect(sleeping.value).to be < 30
      expect(state(child)).to eq(expected(3))
    end

    it "survives a burst of 200 SIGTRAPs in a consistent state, and toggles once per signal afterwards" do
      child = repl
      200.times { Process.kill("TRAP", child.pid) }
      last = nil
      settled = eventually("the burst is applied", interval: 0.1) do
        now, quiet = child.evaluate("[state, settled?]")
        stable = quiet && now == last
        last = now
        stable && now
      end
      expect(child).to be_alive
      # Signals sent together may be merged by the kernel: how many arrive
      # varies, but the state always says whether an odd number did.
      expect(settled[:received]).to be_between(1, 200)
      expect(settled).to eq(expected(settled[:received]))
      signal_and_wait(child, "TRAP", expected(settled[:received] + 1))
      signal_and_wait(child, "TRAP", expected(settled[:received] + 2))
    end

    it "toggles on another signal than SIGTRAP without being killed by it" do
      child = repl("StaticTracing::Configuration.signal = :USR2")
      expect(configuration(child)).to eq([:signal, "USR2", "USR2", usr2_number])
      1.upto(4) { |received| signal_and_wait(child, "USR2", expected(received)) }
      expect(child).to be_alive
    end
  end

  describe "changing the signal at run time" do
    it "gives SIGTRAP back: switched to SIGUSR2, a SIGTRAP has its default effect" do
      child = repl
      signal_and_wait(child, "TRAP", expected(1))
      child.evaluate("StaticTracing::Configuration.signal = :USR2")
      expect(configuration(child)).to eq([:signal, "USR2", "USR2", usr2_number])
      signal_and_wait(child, "USR2", expected(2))
      Process.kill("TRAP", child.pid)
      status = child.wait(timeout: 10)
      expect(status.termsig).to eq(trap_number)
    end

    it "gives SIGUSR2 back to Ruby, whose default raises SignalException, when switching away from it" do
      child = repl("StaticTracing::Configuration.signal = :USR2")
      signal_and_wait(child, "USR2", expected(1))
      child.evaluate("StaticTracing::Configuration.signal = :TRAP")
      expect(configuration(child)).to eq([:signal, "TRAP", "TRAP", trap_number])
      signal_and_wait(child, "TRAP", expected(2))
      waiting = evaluate_in_background(child, <<~RUBY, "WAITING")
        begin
          puts "WAITING"
          sleep 30
        rescue SignalException => e
          "rescued \#{e.message}"
        end
      RUBY
      Process.kill("USR2", child.pid)
      expect(waiting.value).to eq("rescued SIGUSR2")
      expect(state(child)).to eq(expected(2))
    end

    it "gives the signal back to a trap the application had on it, which no longer toggles" do
      child = repl(<<~RUBY)
        Signal.trap("USR2") { $handled += 1 }
        StaticTracing::Configuration.signal = :USR2
      RUBY
      signal_and_wait(child, "USR2", expected(1, handled: 1))
      child.evaluate("StaticTracing::Configuration.signal = :TRAP")
      signal_and_wait(child, "USR2", expected(1, handled: 2))
      signal_and_wait(child, "TRAP", expected(2, handled: 2))
      expect(child).to be_alive
    end

    it "takes a signal again after its first handler was replaced, and no longer runs the replaced one" do
      child = repl(<<~RUBY)
        Signal.trap("USR1") { $handled += 1 }
        StaticTracing::Configuration.signal = :USR1
        StaticTracing::Configuration.signal = :TRAP
        Signal.trap("USR1", "SYSTEM_DEFAULT")
      RUBY
      child.evaluate("StaticTracing::Configuration.signal = :USR1")
      expect(configuration(child)).to eq([:signal, "USR1", "USR1", Signal.list["USR1"]])
      signal_and_wait(child, "USR1", expected(1))
      signal_and_wait(child, "USR1", expected(2))
      Process.kill("TRAP", child.pid)
      expect(child.wait(timeout: 10).termsig).to eq(trap_number)
    end

    it "gives the signal back when the mode becomes ON or OFF" do
      %w[on off].each do |mode|
        child = repl
        signal_and_wait(child, "TRAP", expected(1))
        child.evaluate("StaticTracing::Configuration.mode = :#{mode}")
        expect(configuration(child)).to eq([mode.to_sym, "TRAP", nil, 0])
        expect(child.evaluate("StaticTracing.enabled?")).to be(mode == "on")
        Process.kill("TRAP", child.pid)
        expect(child.wait(timeout: 10).termsig).to eq(trap_number)
      end
    end
  end

  describe "chained with the application's handlers" do
    def expect_both_to_run(child, signal: "TRAP")
      signal_and_wait(child, signal, expected(1, handled: 1))
      signal_and_wait(child, signal, expected(2, handled: 2))
      signal_and_wait(child, signal, expected(3, handled: 3))
      child.evaluate("StaticTracing::Configuration.mode = :off")
      signal_and_wait(child, signal, expected(3, handled: 4).merge(enabled: false, wrapped: false, loaded: false))
      expect(child).to be_alive
    end

    it "runs a Signal.trap installed before the gem took the signal, and toggles too" do
      child = repl(<<~RUBY, env: { "STATIC_TRACING_MODE" => "off" })
        Signal.trap("TRAP") { $handled += 1 }
        StaticTracing::Configuration.mode = :signal
      RUBY
      expect_both_to_run(child)
    end

    it "runs a Signal.trap installed while the gem had given the signal back" do
      child = repl(<<~RUBY)
        StaticTracing::Configuration.mode = :off
        Signal.trap("TRAP") { $handled += 1 }
        StaticTracing::Configuration.mode = :signal
      RUBY
      expect(configuration(child)).to eq([:signal, "TRAP", "TRAP", trap_number])
      expect_both_to_run(child)
    end

    it "takes the signal back, chained, from a Signal.trap installed over it when configured again" do
      child = repl(<<~RUBY)
        Signal.trap("TRAP") { $handled += 1 }
        StaticTracing.configure { |c| c.mode = :signal }
      RUBY
      expect_both_to_run(child)
    end

    it "runs a trap on a Ruby-handled signal (SIGUSR1) and toggles too" do
      child = repl(<<~RUBY)
        Signal.trap("USR1") { $handled += 1 }
        StaticTracing::Configuration.signal = :USR1
      RUBY
      expect_both_to_run(child, signal: "USR1")
    end

    it "runs a native handler installed before the gem took the signal, and toggles too" do
      child = repl(<<~RUBY, env: { "STATIC_TRACING_MODE" => "off" })
        #{with_native_handler}
        INSTALL_HANDLER.call(Signal.list["TRAP"]).zero? or raise "sigaction failed"
        StaticTracing::Configuration.mode = :signal
      RUBY
      expect_both_to_run(child)
    end

    it "runs a native handler installed while the gem had given the signal back" do
      child = repl(<<~RUBY)
        #{with_native_handler}
        StaticTracing::Configuration.mode = :off
        INSTALL_HANDLER.call(Signal.list["TRAP"]).zero? or raise "sigaction failed"
        StaticTracing::Configuration.mode = :signal
      RUBY
      expect_both_to_run(child)
    end
  end

  describe "in forked children" do
    def reported(tag, pid, state)
      /^#{tag} #{pid} #{Regexp.escape(SignalToggleSpec.reporting(state))}$/
    end

    def lines_of(child, tag, pid)
      child.output.lines.grep(/^#{tag} #{pid} /).map(&:chomp)
    end

    it "toggles a fork on its own signals, independently of its parent" do
      child = repl
      pid = child.evaluate("fork { report_changes('FORKED') }")
      child.wait_for(reported("FORKED", pid, expected(0)))
      Process.kill("TRAP", pid)
      child.wait_for(reported("FORKED", pid, expected(1)))
      expect(state(child)).to eq(expected(0))
      signal_and_wait(child, "TRAP", expected(1))
      signal_and_wait(child, "TRAP", expected(2))
      Process.kill("TRAP", pid)
      child.wait_for(reported("FORKED", pid, expected(2)))
      expect(lines_of(child, "FORKED", pid)).to eq(
        (0..2).map { |received| "FORKED #{pid} #{SignalToggleSpec.reporting(expected(received))}" }
      )
      expect(state(child)).to eq(expected(2))
    end

    it "lets a fork of a traced process turn tracing off for itself only" do
      child = repl
      signal_and_wait(child, "TRAP", expected(1))
      path = child.evaluate("StaticTracing.providers[:traced].path")
      pid = child.evaluate("fork { report_changes('FORKED') }")
      inherited_on = expected(1).merge(received: 0)
      child.wait_for(reported("FORKED", pid, inherited_on))
      Process.kill("TRAP", pid)
      child.wait_for(reported("FORKED", pid, expected(0).merge(received: 1)))
      expect(state(child)).to eq(expected(1))
      expect(child.evaluate("StaticTracing.providers[:traced].path")).to eq(path)
      expect(File.exist?(path)).to be(true)
      expect(stub_mapped?(child.pid)).to be(true)
    end

    it "toggles a daemonized child on its own signals" do
      child = repl
      child.evaluate("fork { Process.daemon(true, true); report_changes('DAEMON') }")
      pid = Integer(child.wait_for(/^DAEMON (\d+) /)[1])
      begin
        child.wait_for(reported("DAEMON", pid, expected(0)))
        state_file = File.join(File.dirname(child.evaluate("StaticTracing::State.path")), StubNames.state_file(pid))
        expect(JSON.parse(File.read(state_file))).to include("pid" => pid, "enabled" => false)
        Process.kill("TRAP", pid)
        child.wait_for(reported("DAEMON", pid, expected(1)))
        Process.kill("TRAP", pid)
        child.wait_for(reported("DAEMON", pid, expected(2)))
        expect(state(child)).to eq(expected(0))
      ensure
        Process.kill("KILL", pid)
      end
    end

    it "takes the signal back in a fork after the application replaced the handler in the parent" do
      child = repl(<<~RUBY)
        Signal.trap("USR1") { $handled += 1 }
        StaticTracing::Configuration.signal = :USR1
        Signal.trap("USR1", "SYSTEM_DEFAULT")
      RUBY
      pid = child.evaluate("fork { report_changes('FORKED') }")
      child.wait_for(reported("FORKED", pid, expected(0)))
      Process.kill("USR1", pid)
      child.wait_for(reported("FORKED", pid, expected(1)))
      expect(child.output).not_to include("does not toggle tracing")
    end
  end

  describe "the environment, read at require" do
    # Requires the gem in a new process with +env+; returns what it printed
    # (stdout and stderr), ending with the configuration in effect.
    def require_with(env)
      script = <<~'RUBY'
        begin
          require "static_tracing"
          $stderr.flush
          puts "loaded: #{StaticTracing::Configuration.mode} #{StaticTracing::SignalToggle.signal}"
        rescue ArgumentError => e
          puts "#{e.class}: #{e.message}"
        end
      RUBY
      process = E2E::Child.new(RbConfig.ruby, "-I", E2E::LIB, "-e", script, env:)
      started_processes << process
      expect(process.wait(timeout: 20)).to be_success
      process.output.chomp
    end

    let(:valid_signals) do
      StaticTracing::Configuration::Modes::SIGNALS.names.map { |name| "SIG#{name}" }.join(", ")
    end

    it "STATIC_TRACING_MODE=on traces from the start and leaves SIGTRAP alone" do
      child = repl(env: { "STATIC_TRACING_MODE" => "on" })
      expect(configuration(child)).to eq([:on, "TRAP", nil, 0])
      expect(state(child)).to eq(expected(1).merge(received: 0))
      Process.kill("TRAP", child.pid)
      expect(child.wait(timeout: 10).termsig).to eq(trap_number)
    end

    it "STATIC_TRACING_MODE=off does not trace and leaves SIGTRAP alone" do
      child = repl(env: { "STATIC_TRACING_MODE" => "OFF" })
      expect(configuration(child)).to eq([:off, "TRAP", nil, 0])
      expect(state(child)).to eq(expected(0))
      Process.kill("TRAP", child.pid)
      expect(child.wait(timeout: 10).termsig).to eq(trap_number)
    end

    it "STATIC_TRACING_SIGNAL=USR2 toggles on SIGUSR2 and leaves SIGTRAP alone" do
      child = repl(env: { "STATIC_TRACING_SIGNAL" => "USR2" })
      expect(configuration(child)).to eq([:signal, "USR2", "USR2", usr2_number])
      signal_and_wait(child, "USR2", expected(1))
      Process.kill("TRAP", child.pid)
      expect(child.wait(timeout: 10).termsig).to eq(trap_number)
    end

    it "STATIC_TRACING_SIGNAL also takes a number" do
      child = repl(env: { "STATIC_TRACING_SIGNAL" => usr2_number.to_s, "STATIC_TRACING_MODE" => "signal" })
      expect(configuration(child)).to eq([:signal, "USR2", "USR2", usr2_number])
    end

    # A tracing library must never stop the application from booting.
    it "boots with a bad STATIC_TRACING_MODE: one warning naming the variable, the value and the valid modes" do
      output = require_with("STATIC_TRACING_MODE" => "bogus")
      warning, loaded, *rest = output.lines
      expect(warning).to include('STATIC_TRACING_MODE "bogus"', ":on, :off, :signal and :attach", "default")
      expect([loaded, rest]).to eq(["loaded: signal TRAP", []])
    end

    it "boots with a reserved, system-sent or unknown STATIC_TRACING_SIGNAL, warning once and taking SIGTRAP" do
      %w[KILL CHLD 99 nonsense].each do |value|
        output = require_with("STATIC_TRACING_SIGNAL" => value, "STATIC_TRACING_MODE" => "signal")
        warning, loaded, *rest = output.lines
        expect(warning).to include(%(STATIC_TRACING_SIGNAL "#{value}"), valid_signals, "default")
        expect([loaded, rest]).to eq(["loaded: signal TRAP", []]), "STATIC_TRACING_SIGNAL=#{value}: #{output}"
      end
    end

    it "loads with no variable set" do
      expect(require_with({})).to eq("loaded: signal TRAP")
    end
  end
end
