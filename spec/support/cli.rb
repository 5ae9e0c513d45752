# frozen_string_literal: true

require "open3"
require "rbconfig"
require "stringio"

# Runs the `static-tracing` executable for the examples under spec/cli/:
# as a subprocess, as an operator would, or in-process through CLI.run.
module CLIHelpers
  EXE = File.expand_path("../../exe/static-tracing", __dir__)

  Result = Struct.new(:stdout, :stderr, :status) do
    # In-process runs return the status as an Integer.
    def exitstatus
      status.is_a?(Integer) ? status : status.exitstatus
    end
  end

  # `static-tracing ARGS` run to completion, killed if it takes longer than
  # +timeout+ seconds.
  # The command from a copy any user can read, for running it as another user.
  def portable_exe
    File.join(E2E.portable_root, "exe", "static-tracing")
  end

  def run_cli(*args, env: {}, timeout: 30, command: [RbConfig.ruby, EXE])
    Open3.popen3(env, *command, *args.map(&:to_s), pgroup: true) do |stdin, stdout, stderr, thread|
      stdin.close
      readers = [stdout, stderr].map { |io| Thread.new { io.read } }
      unless thread.join(timeout)
        kill_group(thread.pid)
        raise "static-tracing #{args.join(" ")} did not finish within #{timeout}s"
      end
      Result.new(*readers.map(&:value), thread.value)
    end
  end

  # StaticTracing::CLI.run in this process, with its output captured.
  def cli(*args, env: ENV)
    out = StringIO.new
    err = StringIO.new
    status = StaticTracing::CLI.run(args.map(&:to_s), out:, err:, env:)
    Result.new(out.string, err.string, status)
  end

  # A pid that no process has: one that just exited and was reaped.
  def dead_pid
    pid = Process.spawn(RbConfig.ruby, "-e", "exit")
    Process.wait(pid)
    pid
  end

  private

  def kill_group(pid)
    Process.kill("KILL", -pid)
  rescue Errno::ESRCH
    nil
  end
end

RSpec.configure do |config|
  config.include CLIHelpers, file_path: %r{/spec/cli/}
end
