# frozen_string_literal: true

require "tmpdir"
require "static_tracing/cli"

# Where `record` writes its trace is checked before anything is recorded:
# a destination its user may not write to is refused at once, in one line,
# never after --seconds of recording that would then be lost. Run as a user
# with no privilege, recording a process of its own.
RSpec.describe "Where record writes, checked first", :subprocess do
  include CLIHelpers
  include E2E::Recording

  let(:unprivileged) { E2E::Unprivileged }

  before { require_unprivileged! }

  # A process of that user with a latency probe.
  let(:app) do
    E2E::Child.new(*unprivileged.command, RbConfig.ruby, "-I", File.join(E2E.portable_root, "lib"),
                   "-r", "static_tracing", "-e", <<~'RUBY', env: unprivileged::ENV_RESET, chdir: "/")
                     class PathApp
                       include StaticTracing::LatencyTracer
                       def index = nil
                     end
                     StaticTracing::State.publish
                     $stdout.puts "ready"
                     $stdout.flush
                     sleep
                   RUBY
              .tap { |child| started_processes << child }
  end

  # `static-tracing ARGS` as that user, in +dir+.
  def record_as_unprivileged(dir, *args)
    run_cli(*args, command: [*unprivileged.command, "sh", "-c", "cd \"$0\" && exec \"$@\"", dir, RbConfig.ruby,
                             portable_exe], timeout: 30)
  end

  def monotonic
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # Refused at once (long before --seconds 30), and nothing recorded.
  def expect_refused_before_recording(started, result)
    expect(result).to have_attributes(exitstatus: 1, stdout: "")
    expect(result.stderr.lines.size).to eq(1), result.stderr
    expect(monotonic - started).to be < 20
    expect(published_state(app.pid).recorder).to be_nil
  end

  it "refuses -o into a directory the user may not write to" do
    app.wait_for(/^ready$/)
    Dir.mktmpdir("static_tracing-root-only") do |dir|
      File.chmod(0o755, dir)
      started = monotonic
      result = record_as_unprivileged("/", "record", app.pid, "--seconds", "30", "-o", File.join(dir, "x.trace"))

      expect_refused_before_recording(started, result)
      expect(result.stderr).to eq("static-tracing: cannot write #{File.join(dir, "x.trace")}: uid " \
                                  "#{unprivileged::UID} may not create files in #{dir}\n")
    end
  end

  it "refuses the default name in a directory the user may not write to, naming the directory" do
    app.wait_for(/^ready$/)
    Dir.mktmpdir("static_tracing-read-only") do |dir|
      File.chmod(0o755, dir)
      started = monotonic
      result = record_as_unprivileged(dir, "record", app.pid, "--seconds", "30")

      expect_refused_before_recording(started, result)
      expect(result.stderr).to match(/\Astatic-tracing: cannot write static-tracing-#{app.pid}-\d+-\d+\.trace: /)
      expect(result.stderr).to end_with(": uid #{unprivileged::UID} may not create files in #{dir}\n")
      expect(Dir.children(dir)).to be_empty
    end
  end

  it "refuses it before starting a COMMAND" do
    Dir.mktmpdir("static_tracing-read-only") do |dir|
      File.chmod(0o755, dir)
      marker = File.join(Dir.tmpdir, "static_tracing-never-#{Process.pid}")
      result = record_as_unprivileged(dir, "record", "--", "sh", "-c", "touch #{marker}")

      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to match(/\Astatic-tracing: cannot write static-tracing-0-\S+\.trace: uid \d+ may not/)
      expect(File.exist?(marker)).to be(false)
    end
  end
end
