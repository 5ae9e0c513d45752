# frozen_string_literal: true

require "static_tracing/cli"

# A ring that takes the process longer to make than the command waits for
# an answer (gigabytes, reserved before use): the command waits as long as
# it takes, and says so; a request it gives up on, at Ctrl-C or because the
# process never read it in time, is cancelled and never carried out late.
# The process's slowness is played by a gate its ring's making waits on.
RSpec.describe "Starting a recording that takes time", :subprocess do
  include CLIHelpers
  include E2E::Recording

  let(:app) do
    ruby_repl(<<~'RUBY')
      class SlowApp
        include StaticTracing::LatencyTracer
        def index = nil
      end
      GATE = Queue.new
      # The ring is made once the spec opens the gate.
      StaticTracing::Native.singleton_class.prepend(Module.new do
        def recorder_start(*args)
          GATE.pop
          super
        end
      end)
      def open_gate = GATE << :open
    RUBY
  end

  let(:channel) { StaticTracing::CLI::ControlChannel }
  # Past it, a command that had no answer gives up.
  let(:patience) { channel::REPLY_TIMEOUT + channel::ANSWER_GRACE }

  def recorder_status
    app.evaluate("StaticTracing::Recorder.status")
  end

  def start_command(*args)
    E2E::Child.new(RbConfig.ruby, CLIHelpers::EXE, *args.map(&:to_s)).tap { |command| started_processes << command }
  end

  def monotonic
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # Waits until +seconds+ have passed since +since+, the command still
  # waiting all along.
  def still_waiting_after(command, since, seconds)
    eventually("#{seconds}s have passed, #{command.name} waiting", timeout: seconds + 5) do
      raise "#{command.name} exited:\n#{command.output}" unless command.alive?

      monotonic - since > seconds
    end
  end

  # The state's answer to the last request, once it is final.
  def last_answer
    reply = raw_state(app.pid)["recorder_reply"]
    reply unless reply.nil? || reply["pending"]
  end

  it "waits past the reply timeout for a ring being made, says so, and starts" do
    app
    started = monotonic
    command = start_command("record", app.pid, "--flight", "--size", "1M")
    command.wait_for(/^Process #{app.pid} is making its ring \(1M, all of it reserved now\): waiting until it is ready/)
    still_waiting_after(command, started, patience)
    app.evaluate("open_gate")

    expect(command.wait).to be_success, command.output
    expect(command.output).to include("Process #{app.pid} keeps a flight recording of 1 probe")
    expect(recorder_status).to include("flight" => true)
  end

  it "cancels at Ctrl-C: the ring made meanwhile is let go of, and the recording never starts" do
    command = start_command("record", app.pid, "--flight", "--size", "1M")
    command.wait_for(/is making its ring/)
    Process.kill("INT", command.pid)
    status = command.wait

    expect(status.exitstatus).to eq(130)
    expect(command.output).to include("static-tracing: interrupted while process #{app.pid} carried out the " \
                                      "request; it is cancelled: the process will not carry it out late")
    app.evaluate("open_gate")
    answer = eventually("the process answers the request it was carrying out") { last_answer }
    expect(answer).to include("ok" => false,
                              "message" => "the command that asked for it gave up waiting for it, and it was not " \
                                           "started")
    expect(recorder_status).to be_nil
    expect(app.evaluate("SlowApp.instance_method(:index).owner.name")).to eq("SlowApp")
    expect(File.exist?(ring_path(app.pid))).to be(false)
  end

  it "refuses a request it reads after the command gave up on it, which the command said it would" do
    app.evaluate(<<~'RUBY')
      HELD = Queue.new
      StaticTracing::Control.singleton_class.prepend(Module.new do
        def receive
          HELD.pop if HELD.empty? && !$released
          $released = true
          super
        end
      end)
      def release = HELD << :go
      nil
    RUBY
    result = run_cli("record", app.pid, "--flight", "--size", "1M", timeout: 30)

    expect(result.exitstatus).to eq(1)
    expect(result.stderr).to eq("static-tracing: process #{app.pid} did not answer within 5s: it may be busy (its " \
                                "static_tracing thread needs the GVL: a long request holds it), stopped, or stuck; " \
                                "try again; it is cancelled: the process will not carry it out late\n")
    app.evaluate("release; open_gate")
    answer = eventually("the process answers the cancel") { last_answer&.fetch("message") == "nothing to cancel" }
    expect(answer).to be(true)
    expect(recorder_status).to be_nil
  end
end
