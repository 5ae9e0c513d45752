# frozen_string_literal: true

require "tmpdir"
require "static_tracing/cli"

# A typo in what to record is said before anything starts, by the command
# or the process, in one line naming what is wrong and what there is:
# never a recording of nothing, nor a trigger that can never fire, nor
# snapshots that fail later on the application's stderr.
RSpec.describe "Recording what does not exist", :subprocess do
  include CLIHelpers
  include E2E::Recording

  let(:setup) do
    <<~'RUBY'
      class TypoApp
        include StaticTracing::LatencyTracer
        def index(value) = value
        def slow(seconds) = sleep(seconds)
      end
      EVENT = StaticTracing::Tracepoint.new(:typo_events, :event, Integer)
      def wrapped?(name) = TypoApp.instance_method(name).owner != TypoApp
    RUBY
  end

  let(:app) { ruby_repl(setup) }
  let(:dir) { Dir.mktmpdir("static_tracing-typos") }
  let(:probes) { "its 3 probes: typo_app:index, typo_app:slow, typo_events:event" }

  after { FileUtils.rm_rf(dir) }

  def recorder_status
    app.evaluate("StaticTracing::Recorder.status")
  end

  # Nothing started: no recording, nothing wrapped, no file written.
  def expect_nothing_started
    expect(recorder_status).to be_nil
    expect(app.evaluate("wrapped?(:index)")).to be(false)
    expect(Dir.children(dir)).to be_empty
  end

  def refusal(result)
    expect(result).to have_attributes(exitstatus: 1, stdout: "")
    expect(result.stderr.lines.size).to eq(1), result.stderr
    result.stderr
  end

  describe "a probe pattern that matches no probe" do
    it "is refused, listing the probes the process has, for a streaming recording and a flight one" do
      trace = File.join(dir, "typo.trace")
      [["nosuch:*", "-o", trace, "--seconds", "5"], ["typo_app:indx", "--flight"]].each do |args|
        said = refusal(run_cli("record", app.pid, *args))
        expect(said).to eq("static-tracing: process #{app.pid} refused: no probe matches #{args.first} " \
                           "(#{probes}); to record probes declared later, give --wait-for-probes\n")
        expect_nothing_started
      end
    end

    it "is refused among patterns that match, naming only those that do not" do
      said = refusal(run_cli("record", app.pid, "typo_app:index", "typo_ap:*", "nosuch", "--flight"))
      expect(said).to include("refused: no probes match typo_ap:*, nosuch:* (#{probes})")
      expect_nothing_started
    end

    it "waits for the probes declared later with --wait-for-probes, and says so" do
      trace = File.join(dir, "later.trace")
      command = start_record(app.pid, "typo_later:*", "--wait-for-probes", "-o", trace)
      app.evaluate("LATER = StaticTracing::Tracepoint.new(:typo_later, :event, Integer); 3.times { LATER.fire(_1) }")
      output = interrupt_record(command)

      expect(output).to match(/^Recording 0 probes \(typo_later:\*, and any declared later\)/)
      expect(recorded_calls(read_trace(trace))).to eq("typo_later:event" => 3)
    end
  end

  describe "a trigger" do
    it "is refused when no latency probe among those recorded matches it" do
      {
        "nosuch:x > 1ms" => "its 2 latency probes: typo_app:index, typo_app:slow",
        "typo_events:event > 1ms" => "its 2 latency probes: typo_app:index, typo_app:slow"
      }.each do |trigger, latency|
        said = refusal(run_cli("record", app.pid, "--dump-when", trigger))
        expect(said).to eq("static-tracing: process #{app.pid} refused: the trigger #{trigger} matches no latency " \
                           "probe among those recorded (#{latency}); to record probes declared later, give " \
                           "--wait-for-probes\n")
        expect_nothing_started
      end

      said = refusal(run_cli("record", app.pid, "typo_app:index", "--dump-when", "typo_app:slow > 1ms"))
      expect(said).to include("the trigger typo_app:slow > 1ms matches no latency probe among those recorded " \
                              "(its 1 latency probe: typo_app:index)")
      expect_nothing_started
    end
  end

  describe "--dump-dir" do
    it "is refused by the command when it does not exist or is no directory" do
      missing = File.join(dir, "missing")
      said = refusal(run_cli("record", app.pid, "--dump-when", "typo_app:slow > 1ms", "--dump-dir", missing))
      expect(said).to eq("static-tracing: process #{app.pid} could not write snapshots into #{missing}: it does " \
                         "not exist (--dump-dir)\n")
      file = File.join(dir, "file")
      File.write(file, "")
      said = refusal(run_cli("record", app.pid, "--dump-when", "typo_app:slow > 1ms", "--dump-dir", file))
      expect(said).to include("into #{file}: it is not a directory (--dump-dir)")
      expect(recorder_status).to be_nil
    end

    it "is made absolute by the command, from its own working directory" do
      Dir.mkdir(File.join(dir, "snapshots"))
      result = run_cli("record", app.pid, "--dump-when", "typo_app:slow > 1ms", "--dump-dir", "snapshots",
                       command: ["sh", "-c", "cd \"$0\" && exec \"$@\"", dir, RbConfig.ruby, CLIHelpers::EXE])
      expect(result.exitstatus).to eq(0), result.stderr
      expect(recorder_status["dump_dir"]).to eq(File.join(dir, "snapshots"))
      expect(result.stdout).to include("into #{File.join(dir, "snapshots")}.")
    ensure
      run_cli("record", app.pid, "--stop")
    end

    it "is checked again by the process, which makes a relative one absolute where it is" do
      missing = File.join(dir, "missing")
      error = app.evaluate(<<~RUBY)
        begin
          StaticTracing::Recorder.start(dump_when: "typo_app:slow > 1ms", dump_dir: #{missing.dump})
        rescue StaticTracing::RecorderError => e
          e.message
        end
      RUBY
      expect(error).to eq("cannot write snapshots into #{missing}: it does not exist")
      expect(recorder_status).to be_nil

      status = app.evaluate("Dir.chdir(#{dir.dump}) { Dir.mkdir('own'); StaticTracing::Recorder.start(" \
                            "dump_when: 'typo_app:slow > 1ms', dump_dir: 'own') }")
      expect(status["dump_dir"]).to eq(File.join(dir, "own"))
    ensure
      app.evaluate("StaticTracing::Recorder.stop")
    end

    it "is refused when the process's user may not write to it, checked from the command as root" do
      require_unprivileged!
      child = E2E::Child.new(*E2E::Unprivileged.command, RbConfig.ruby, "-I", File.join(E2E.portable_root, "lib"),
                             "-r", "static_tracing", "-e", <<~'RUBY', env: E2E::Unprivileged::ENV_RESET, chdir: "/")
                               class TypoApp
                                 include StaticTracing::LatencyTracer
                                 def slow = nil
                               end
                               StaticTracing::State.publish
                               $stdout.puts "ready"
                               $stdout.flush
                               sleep
                             RUBY
      started_processes << child
      child.wait_for(/^ready$/)
      File.chmod(0o755, dir)
      said = refusal(run_cli("record", child.pid, "--dump-when", "typo_app:slow > 1ms", "--dump-dir", dir))
      expect(said).to start_with("static-tracing: process #{child.pid} could not write snapshots into #{dir}: " \
                                 "uid #{E2E::Unprivileged::UID}, which process #{child.pid} runs as, may not " \
                                 "create files in it (mode 0755, owner 0")
      expect(published_state(child.pid).recorder).to be_nil
    end
  end
end
