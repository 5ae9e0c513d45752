# frozen_string_literal: true

require "tmpdir"
require "static_tracing/cli"

# `static-tracing record [options] -- COMMAND ARGS...`, as perf and rbspy
# run a program: it records from the program's first probe, follows it
# until it exits, writes the trace and exits as the program did; Ctrl-C
# (here SIGINT sent to the command, which has no terminal) reaches the
# program.
RSpec.describe "Recording a program from its start", :subprocess do
  include CLIHelpers
  include E2E::Recording

  let(:dir) { Dir.mktmpdir("static_tracing-launch") }

  after { FileUtils.rm_rf(dir) }

  # A Ruby program with the gem that calls a latency method +calls+ times
  # as it starts, then runs +rest+.
  def program(calls, rest = "")
    script = <<~RUBY
      $stdout.sync = true
      class LaunchApp
        include StaticTracing::LatencyTracer
        def index(value) = value
      end
      #{calls}.times { |i| LaunchApp.new.index(i) }
      #{rest}
    RUBY
    [RbConfig.ruby, "-I", E2E::LIB, "-r", "static_tracing", "-e", script]
  end

  def start_command(*args)
    E2E::Child.new(RbConfig.ruby, CLIHelpers::EXE, "record", *args.map(&:to_s), chdir: dir)
              .tap { |command| started_processes << command }
  end

  it "records a program from its first probe to its exit, writes the trace and exits with its status" do
    trace = File.join(dir, "program.trace")
    result = run_cli("record", "-o", trace, "--", *program(250, "exit 3"), timeout: 60)

    expect(result.exitstatus).to eq(3), result.stderr
    expect(result.stderr).to match(/^Recording probes \(every probe, and any declared later\) in process \d+ \(.*ruby/)
    expect(result.stdout).to match(wrote_line(250, trace, "the process exited"))
    expect(result.stdout).to match(/^launch_app:index  250 calls, p50 /)
    expect(recorded_calls(read_trace(trace))).to eq("launch_app:index" => 250)
  end

  it "passes SIGINT on to the program, and writes what it recorded once it exits" do
    trace = File.join(dir, "interrupted.trace")
    command = start_command("launch_app:*", "-o", trace, "--",
                            *program(40, <<~'RUBY'))
                              begin
                                puts "program ready"
                                sleep
                              rescue Interrupt
                                puts "program interrupted"
                                exit 4
                              end
                            RUBY
    command.wait_for(/^program ready$/)
    command.wait_for(/^Recording probes/)
    Process.kill("INT", command.pid)

    expect(command.wait.exitstatus).to eq(4), command.output
    expect(command.output).to include("program interrupted")
    expect(command.output).to match(wrote_line(40, trace, "the process exited"))
    expect(recorded_calls(read_trace(trace))).to eq("launch_app:index" => 40)
  end

  # As a supervisor does: a hangup, or a signal an application takes as a
  # request (reopen its logs), goes to the program; the command neither
  # dies of it (leaving the program behind) nor loses the trace.
  it "passes SIGHUP, SIGUSR1 and SIGUSR2 on to the program, and writes the trace once it exits" do
    trace = File.join(dir, "signalled.trace")
    command = start_command("launch_app:*", "-o", trace, "--",
                            *program(30, <<~'RUBY'))
                              got = Queue.new
                              %w[HUP USR1 USR2].each { |signal| Signal.trap(signal) { got << signal } }
                              puts "program ready"
                              3.times { puts "program got #{got.pop}" }
                              exit 5
                            RUBY
    command.wait_for(/^program ready$/)
    command.wait_for(/^Recording probes/)
    %w[HUP USR1 USR2].each do |signal|
      Process.kill(signal, command.pid)
      command.wait_for(/^program got #{signal}$/)
    end

    expect(command.wait.exitstatus).to eq(5), command.output
    expect(command.output).to match(wrote_line(30, trace, "the process exited"))
    expect(recorded_calls(read_trace(trace))).to eq("launch_app:index" => 30)
  end

  # A link planted at -o while the program runs is not written through;
  # what was recorded is kept all the same, beside it, and the command
  # says where.
  it "writes the trace beside -o when a link was planted there meanwhile, and says where" do
    trace = File.join(dir, "planted.trace")
    target = File.join(dir, "target").tap { |path| File.write(path, "theirs\n") }
    command = start_command("-o", trace, "--", *program(20, <<~'RUBY'))
      puts "program ready"
      $stdin.gets
    RUBY
    command.wait_for(/^program ready$/)
    File.symlink(target, trace)
    command.puts("go")

    beside = File.join(dir, "planted-2.trace")
    expect(command.wait.exitstatus).to eq(0), command.output
    expect(command.output).to include("static-tracing: not writing the trace to #{trace}: it is a symbolic link, " \
                                      "and static-tracing never writes through one; it is in #{beside} instead")
    expect(command.output).to match(wrote_line(20, beside, "the process exited"))
    expect(recorded_calls(read_trace(beside))).to eq("launch_app:index" => 20)
    expect(File.readlink(trace)).to eq(target)
    expect(File.read(target)).to eq("theirs\n")
  end

  it "lets Ctrl-C at a terminal reach the program once, as the terminal's foreground job" do
    require "pty"
    trace = File.join(dir, "terminal.trace")
    # The program's exit status: 10 and the SIGINTs it got in a moment after the first.
    counting = program(5, <<~'RUBY')
      signals = Queue.new
      Signal.trap("INT") { signals << :int }
      puts "program ready"
      signals.pop
      sleep 0.5
      exit 10 + signals.size
    RUBY
    PTY.spawn(RbConfig.ruby, CLIHelpers::EXE, "record", "-o", trace, "--", *counting) do |terminal, input, pid|
      output = +""
      reader = Thread.new do
        loop { output << terminal.readpartial(4096) }
      rescue EOFError, Errno::EIO
        nil
      end
      eventually("the program is ready") { output.include?("program ready") && output.include?("Recording probes") }
      input.write("\x03")
      _, status = Process.wait2(pid)
      reader.join(5)

      expect(status.exitstatus).to eq(10), "#{status.inspect}\n#{output}"
    ensure
      Process.kill("KILL", pid) if pid && !status
    end
    expect(recorded_calls(read_trace(trace))).to eq("launch_app:index" => 5)
  end

  it "records its first --seconds, writes the trace, then waits for it and exits with its status" do
    trace = File.join(dir, "first.trace")
    command = start_command("--seconds", "0.5", "-o", trace, "--", *program(30, <<~'RUBY'))
      puts "program waits"
      $stdin.gets
      exit 6
    RUBY
    command.wait_for(/goes on; waiting for it to exit/)
    expect(recorded_calls(read_trace(trace))).to eq("launch_app:index" => 30)
    expect(command.output).to match(wrote_line(30, trace))
    command.puts("bye")

    expect(command.wait.exitstatus).to eq(6), command.output
  end

  it "follows the Ruby a shell starts, and exits with the shell's status" do
    trace = File.join(dir, "shell.trace")
    result = run_cli("record", "-o", trace, "--", "sh", "-c", "\"$@\"; exit 7", "sh", *program(12), timeout: 60)

    expect(result.exitstatus).to eq(7), result.stderr
    expect(recorded_calls(read_trace(trace))).to eq("launch_app:index" => 12)
  end

  it "says why a program records nothing, and exits with its status all the same" do
    result = run_cli("record", "-o", File.join(dir, "none.trace"), "--", "sh", "-c", "exit 5")
    expect(result).to have_attributes(exitstatus: 5, stdout: "")
    expect(result.stderr).to eq("static-tracing: sh -c exit\\ 5 records nothing: it did not load static_tracing\n")

    limited = ["sh", "-c", "ulimit -f 64 && exec \"$@\"", "sh", *program(1, "exit 2")]
    result = run_cli("record", "-o", File.join(dir, "refused.trace"), "--", *limited, timeout: 60)
    expect(result.exitstatus).to eq(2), result.stderr
    expect(result.stderr).to match(/^static-tracing: .* records nothing: its recording was refused: .*ulimit -f/)
    expect(Dir.children(dir)).to be_empty
  end

  it "says a program it cannot run, with the status a shell gives" do
    result = run_cli("record", "--", File.join(dir, "missing"))
    expect(result).to have_attributes(exitstatus: 127, stdout: "")
    expect(result.stderr).to eq("static-tracing: cannot run #{File.join(dir, "missing")}: No such file or directory\n")

    result = run_cli("record", "--flight", "--", "true")
    expect(result.exitstatus).to eq(2)
    expect(result.stderr).to include("--flight, --dump-when and --stop go with a PID, not a COMMAND")
  end
end
