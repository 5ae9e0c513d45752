# frozen_string_literal: true

require "static_tracing/cli"
require "tmpdir"

# Every failure of the command is one `static-tracing:` line and a non-zero
# exit: also a failure to write what it prints (a full disk; /dev/full).
RSpec.describe "static-tracing when it cannot write its output", :subprocess do
  include CLIHelpers

  let(:full) { "No space left on device" }

  # The command with its stdout, or its stderr, on /dev/full.
  def run_into_full_device(*args, stream: 1)
    run_cli(*args, command: ["sh", "-c", %(exec "$@" #{stream}>/dev/full), "sh", RbConfig.ruby, CLIHelpers::EXE])
  end

  it "says so in one line for every command's help and the version" do
    [["--help"], ["--version"], *StaticTracing::CLI.commands.keys.map { |name| [name, "--help"] }].each do |args|
      result = run_into_full_device(*args)
      expect(result.exitstatus).to eq(1), "static-tracing #{args.join(" ")}: #{result.stderr}"
      expect(result.stderr).to eq("static-tracing: cannot write to stdout: #{full}\n")
    end
  end

  it "says so for a listing too large to be buffered, and for a report" do
    app = ruby_process(<<~'RUBY')
      provider = StaticTracing::Provider.register(:full_device)
      300.times { |i| provider.add_tracepoint(:"probe_with_a_long_name_#{i}", Integer, String) }
      provider.load
      puts "LOADED"
      $stdout.flush
      $stdin.read
    RUBY
    app.wait_for(/^LOADED$/)
    result = run_into_full_device("list", app.pid)
    expect(result).to have_attributes(exitstatus: 1, stderr: "static-tracing: cannot write to stdout: #{full}\n")

    Dir.mktmpdir do |dir|
      trace = File.join(dir, "empty.trace")
      File.binwrite(trace, TraceImage.new.bytes(probes: [], records: []))
      result = run_into_full_device("report", trace)
      expect(result).to have_attributes(exitstatus: 1, stderr: "static-tracing: cannot write to stdout: #{full}\n")
    end
  end

  it "still exits non-zero, and quietly, when stderr cannot be written either" do
    result = run_into_full_device("list", "0", stream: 2)
    expect(result).to have_attributes(exitstatus: 2, stdout: "")
  end
end
