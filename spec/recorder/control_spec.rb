# frozen_string_literal: true

require "json"
require "securerandom"
require "tmpdir"
require "static_tracing/cli"

# Requests written by hand into a live process's control FIFO, as anyone
# who may write to it could: valid JSON that no command would send. Each is
# refused with a reason and changes nothing, and the thread that reads them
# goes on serving the command, following tracers and writing triggered
# snapshots.
RSpec.describe "The control channel of a live process", :subprocess do
  include CLIHelpers
  include E2E::Recording

  let(:setup) do
    <<~'RUBY'
      class CtlApp
        include StaticTracing::LatencyTracer
        def buy(value) = value
        def slow(seconds) = sleep(seconds)
      end
      APP = CtlApp.new
      def wrapped?(name) = CtlApp.instance_method(name).owner != CtlApp
    RUBY
  end

  let(:app) { ruby_repl(setup) }
  let(:dir) { Dir.mktmpdir("static_tracing-control") }
  # What `record --flight --size 64K` sends, for requests spoiled one field at a time.
  let(:settings) { StaticTracing::RecordingOptions.settings(flight: true, size: "64K").to_h }

  after { FileUtils.rm_rf(dir) }

  # Writes +request+ (a Hash, or a line as it is) into the process's
  # control FIFO in one write, as the command does.
  def write_request(request)
    line = request.is_a?(String) ? request : JSON.generate(request)
    control = eventually("process #{app.pid} opens its control channel") { published_state(app.pid).control }
    File.open(control, File::WRONLY | File::NONBLOCK) { |fifo| fifo.syswrite("#{line}\n") }
  end

  # The process's answer to the request with +id+, once it is in its state file.
  def reply_to(id)
    eventually("process #{app.pid} answers request #{id.inspect}", timeout: 10) do
      reply = raw_state(app.pid)["recorder_reply"]
      reply if reply && reply["id"] == id && !reply["pending"]
    end
  end

  # Sends +fields+ as a request of format 1 with an id of its own; returns the answer.
  def request(fields)
    id = SecureRandom.hex(8)
    write_request({ "format" => 1, "id" => id }.merge(fields))
    reply_to(id)
  end

  def recorder_status
    app.evaluate("StaticTracing::Recorder.status")
  end

  # The command records and stops as it would have without the bad request.
  def expect_the_command_served
    result = run_cli("record", app.pid, "--flight", "--size", "64K", timeout: 30)
    expect(result.exitstatus).to eq(0), result.stderr
    expect(result.stdout).to include("Process #{app.pid} keeps a flight recording")
    expect(run_cli("record", app.pid, "--stop").stdout).to eq("Stopped recording in process #{app.pid}.\n")
    expect(recorder_status).to be_nil
  end

  # A record request spoiled one field at a time (given what the command
  # would send), and how the process says why it refuses it.
  {
    "a lease that is a list" =>
      [->(_) { { "lease" => [] } }, /\Ainvalid lease \[\]: give seconds above 0 and at most 3600\z/],
    "a lease that is true" => [->(_) { { "lease" => true } }, /\Ainvalid lease true/],
    "a lease of a year" => [->(_) { { "lease" => 31_536_000 } }, /\Ainvalid lease 31536000/],
    "a lease below zero" => [->(_) { { "lease" => -1 } }, /\Ainvalid lease -1/],
    "a trigger threshold that does not fit in 64 bits of nanoseconds" =>
      [->(sent) { { "settings" => sent.merge("dump_when" => "ctl_app:buy > 99999999999s") } },
       /\Atrigger threshold "99999999999s" in .* is out of range: .*at most 86400s/],
    "settings that are a number" =>
      [->(_) { { "settings" => 5 } }, /\Arecording settings must be a JSON object, got 5\z/],
    "an action that is an object" => [->(_) { { "action" => { "x" => 1 } } }, /\Aunknown action \{"x"\s?=>\s?1\}\z/],
    "probes that are an object" =>
      [->(sent) { { "settings" => sent.merge("probes" => { "ctl_app" => 1 }) } }, /\Ainvalid probe pattern/],
    "a size that is a list" =>
      [->(sent) { { "settings" => sent.merge("size" => [65_536]) } }, /\Ainvalid ring size \[65536\]/],
    "a dump interval that is an object" =>
      [->(sent) { { "settings" => sent.merge("dump_interval" => {}) } }, /\Ainvalid dump interval \{\}/],
    "a number of dumps that is a word" =>
      [->(sent) { { "settings" => sent.merge("max_dumps" => "many") } }, /\Ainvalid maximum of dumps "many"/],
    "a dump directory that is a number" =>
      [->(sent) { { "settings" => sent.merge("dump_dir" => 7) } }, /\Ainvalid dump directory 7/],
    "a stop naming its recording by an object" =>
      [->(_) { { "action" => "stop", "recording" => { "id" => 1 } } },
       /\Arequest id \{"id"\s?=>\s?1\} is not a hexadecimal string\z/]
  }.each do |what, (spoil, reason)|
    it "refuses #{what} with a reason, changes nothing, and goes on serving the command" do
      answer = request({ "action" => "record", "settings" => settings, "lease" => 10.0 }.merge(spoil.call(settings)))

      expect(answer).to include("ok" => false)
      expect(answer["message"]).to match(reason)
      expect(recorder_status).to be_nil
      expect(app.evaluate("wrapped?(:buy)")).to be(false)
      expect_the_command_served
    end
  end

  it "answers a request whose id is not UTF-8, and publishes its state as before" do
    write_request(%({"format":1,"id":"\xFFab","action":"stop"}).b)
    # Refused, whether JSON takes such a string or not; what matters is
    # that the process goes on answering, and publishing its state.
    expect(request({ "action" => "stop" })).to include("ok" => true, "message" => "nothing was recording")
    expect_the_command_served
  end

  it "refuses a request that fails for no reason it was checked against, naming the error" do
    app.evaluate(<<~'RUBY')
      StaticTracing::Recorder.singleton_class.prepend(Module.new do
        def renew(_id) = raise(NoMethodError, "undefined method `fetch' for nil")
      end)
      nil
    RUBY
    answer = request({ "action" => "renew" })

    expect(answer).to include(
      "ok" => false, "message" => "could not carry out the request: NoMethodError: undefined method `fetch' for nil"
    )
    expect_the_command_served
  end

  it "answers a line that is no request, and one that is JSON but no object" do
    write_request("{not json")
    write_request("[1, 2]")
    answer = request({ "action" => "stop" })
    expect(answer).to include("ok" => true, "message" => "nothing was recording")
    expect_the_command_served
  end

  it "is refused a threshold by the command itself, before anything is sent" do
    result = run_cli("record", app.pid, "--dump-when", "ctl_app:buy > 99999999999s")

    expect(result).to have_attributes(exitstatus: 2, stdout: "")
    expect(result.stderr).to match(/\Astatic-tracing record: trigger threshold "99999999999s" .* at most 86400s/)
    expect(result.stderr.lines.size).to eq(1)
    expect(recorder_status).to be_nil
  end

  context "with requests that once ended the thread that serves them" do
    let(:app) { ruby_repl(setup, env: { "STATIC_TRACING_MODE" => "attach" }) }

    before do
      answers = [
        request({ "action" => "record", "settings" => settings, "lease" => [] }),
        request({ "action" => "record", "lease" => 10.0,
                  "settings" => settings.merge("dump_when" => "ctl_app:buy > 99999999999s") })
      ]
      expect(answers).to all(include("ok" => false))
    end

    it "still writes a triggered snapshot" do
      result = run_cli("record", app.pid, "--dump-when", "ctl_app:slow > 50ms", "--dump-dir", dir, "--size", "64K")
      expect(result.exitstatus).to eq(0), result.stderr
      app.evaluate("APP.slow(0.1)")

      said = app.wait_for(/static_tracing: ctl_app:slow took \S+ \(ctl_app:slow > 50ms\): wrote (\S+)$/)
      expect(File.exist?(said[1])).to be(true)
      expect(run_cli("record", app.pid, "--stop").stdout).to eq("Stopped recording in process #{app.pid}.\n")
    end

    it "still wraps a method when a tracer attaches to its probe, and unwraps it when it leaves" do
      # Declared probes load in one burst, a moment after the class: the
      # semaphore is where the stub that holds both says it is.
      eventually("ctl_app's stub holds both its probes") do
        StaticTracing::CLI::Target.new(app.pid).stubs.any? do |stub|
          stub.provider == "ctl_app" && stub.probes.map(&:name).sort == %w[buy slow]
        end
      end
      semaphores = Churn::Semaphores.new(app.pid, :ctl_app, [:buy])
      semaphores.set(1)
      expect(eventually("ctl_app:buy is wrapped") { app.evaluate("wrapped?(:buy)") }).to be(true)
      semaphores.set(0)
      expect(eventually("ctl_app:buy is unwrapped") { !app.evaluate("wrapped?(:buy)") }).to be(true)
    ensure
      semaphores&.close
    end
  end

  describe "the thread that serves requests" do
    it "goes on after a pass that fails, says so once, and does not spin when it fails every time" do
      app.evaluate(<<~'RUBY')
        $failed_at = []
        $failing = true
        StaticTracing::Control.singleton_class.prepend(Module.new do
          def receive
            return super unless $failing

            $failed_at << Process.clock_gettime(Process::CLOCK_MONOTONIC)
            raise TypeError, "no implicit conversion of Array into Float"
          end
        end)
        nil
      RUBY
      # Never read, the line keeps the channel readable: every pass fails.
      write_request(JSON.generate("format" => 1, "id" => "ab", "action" => "stop"))
      eventually("six passes failed") { app.evaluate("$failed_at.size") >= 6 }
      app.evaluate("StaticTracing::Watcher.soon(:control_spec, 0) { $job_ran = true }; nil")
      expect(eventually("a job runs while requests fail") { app.evaluate("$job_ran") }).to be(true)

      gaps = app.evaluate("$failed_at.first(6).each_cons(2).map { |a, b| b - a }")
      expect(gaps).to all(be >= 0.09)
      warning = "static_tracing: process #{app.pid} failed to serve a static-tracing request and goes on " \
                "(said once): TypeError: no implicit conversion of Array into Float"
      expect(app.output.scan(warning).size).to eq(1)

      app.evaluate("$failing = false")
      expect(reply_to("ab")).to include("ok" => true, "message" => "nothing was recording")
      expect_the_command_served
    end

    it "says so when it ends by anything but its pipe closing" do
      eventually("process #{app.pid} opens its control channel") { published_state(app.pid).control }
      app.evaluate(<<~'RUBY')
        Thread.list.find { |thread| thread.name == "static_tracing watcher" }.raise(Interrupt, "from outside")
        nil
      RUBY

      said = "static_tracing: process #{app.pid} stopped serving static-tracing requests, following tracers and " \
             "writing triggered snapshots: its thread ended with Interrupt: from outside"
      app.wait_for(/^#{Regexp.escape(said)}$/)
    end
  end
end
