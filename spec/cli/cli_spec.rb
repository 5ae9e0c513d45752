# frozen_string_literal: true

require "json"
require "static_tracing/cli"
require "tmpdir"

RSpec.describe StaticTracing::CLI do
  describe "help" do
    it "lists every command with its summary" do
      result = cli("--help")
      expect(result.exitstatus).to eq(0)
      expect(result.stdout).to start_with("Usage: static-tracing COMMAND [options]")
      expect(result.stdout).to match(/^ +list +List a process's providers and probes/)
      expect(result.stdout).to match(/^ +latency +Trace a process's latency probes with bpftrace/)
      expect(result.stdout).to match(/^ +enable +Turn tracing on in a process, with the signal it is configured for/)
      expect(result.stdout).to match(/^ +disable +Turn tracing off in a process/)
      expect(result.stdout).to match(/^ +toggle +Turn tracing on if it is off in a process, off if it is on/)
      expect(cli("help").stdout).to eq(result.stdout)
      expect(result.stderr).to be_empty
    end

    it "describes each command and its options" do
      expect(cli("list", "--help")).to have_attributes(exitstatus: 0, stderr: "")
      expect(cli("list", "--help").stdout).to start_with("Usage: static-tracing list PID [--json]")
        .and include("--json")
      latency = cli("latency", "--help").stdout
      expect(latency).to start_with("Usage: static-tracing latency PID [--provider P] [--seconds N]")
      expect(latency).to include("--provider P", "--seconds N", "BPFTRACE")
      expect(cli("help", "latency").stdout).to eq(latency)
      %w[enable disable toggle].each do |command|
        help = cli(command, "--help")
        expect(help).to have_attributes(exitstatus: 0, stderr: "")
        expect(help.stdout).to start_with("Usage: static-tracing #{command} PID [--timeout SECONDS]")
          .and include("--timeout SECONDS", "mode signal", "nothing to a process that does not listen")
      end
    end

    it "prints the version" do
      expect(cli("--version").stdout).to eq("static-tracing #{StaticTracing::VERSION}\n")
      expect(cli("list", "--version").stdout).to eq("static-tracing #{StaticTracing::VERSION}\n")
    end
  end

  describe "usage errors" do
    commands = "commands: list, latency, enable, disable, toggle, record, dump, report, export; " \
               "see static-tracing --help"
    # Each is one line on stderr, pointing at the help, with exit status 2.
    {
      [] => "static-tracing: no command given (#{commands})",
      %w[frobnicate 1] => %(static-tracing: unknown command "frobnicate" (#{commands})),
      %w[help frobnicate] => %(static-tracing: unknown command "frobnicate" (#{commands})),
      %w[list] => "static-tracing list: missing PID (see static-tracing list --help)",
      %w[list 1 2] => "static-tracing list: expected one PID, got 2 arguments: 1 2 (see static-tracing list --help)",
      %w[list 12x] => 'static-tracing list: PID must be a positive integer, got "12x" (see static-tracing list --help)',
      %w[list 0] => 'static-tracing list: PID must be a positive integer, got "0" (see static-tracing list --help)',
      %w[list 1 --color] => "static-tracing list: invalid option: --color (see static-tracing list --help)",
      %w[latency 1 --seconds] => "static-tracing latency: missing argument: --seconds " \
                                 "(see static-tracing latency --help)",
      %w[enable] => "static-tracing enable: missing PID (see static-tracing enable --help)",
      %w[disable 1 2] => "static-tracing disable: expected one PID, got 2 arguments: 1 2 " \
                         "(see static-tracing disable --help)",
      %w[toggle 1 --timeout 0] => "static-tracing toggle: --timeout must be more than 0, got 0.0 " \
                                  "(see static-tracing toggle --help)"
    }.each do |argv, message|
      it "rejects `#{argv.join(" ")}`" do
        result = cli(*argv)
        expect(result).to have_attributes(exitstatus: 2, stdout: "", stderr: "#{message}\n")
      end
    end

    # bpftrace's interval counts whole milliseconds from 1; past a day, the
    # wait for it overflows.
    %w[1e400 1e12 86401 0 -1 0.0004 nan inf abc 0x10 1,5].each do |value|
      it "rejects `latency 1 --seconds #{value}`, naming the value and the range" do
        result = cli("latency", "1", "--seconds", value)
        expect(result).to have_attributes(exitstatus: 2, stdout: "")
        expect(result.stderr).to start_with("static-tracing latency: --seconds ")
          .and include(value.inspect, "0.001", "86400")
        expect(result.stderr.lines.size).to eq(1)
      end
    end
  end

  # What fails that is not the user's to fix (a bug in the command, a
  # native panic) is said in one line naming it, never a backtrace.
  describe "internal errors" do
    let(:path) { File.join(Dir.mktmpdir("internal"), "a.trace").tap { |file| File.write(file, "") } }

    after { FileUtils.rm_rf(File.dirname(path)) }

    [NoMethodError.new("undefined method 'size' for nil"), SystemStackError.new("stack level too deep"),
     NoMemoryError.new("failed to allocate memory")].each do |error|
      it "says #{error.class} in one line with a bug report hint, exit status 1" do
        allow(StaticTracing::CLI::TraceFile).to receive(:load).and_raise(error)
        result = cli("report", path)
        expect(result).to have_attributes(
          exitstatus: 1, stdout: "",
          stderr: "static-tracing report: internal error: #{error.class}: #{error.message.lines.first.chomp} " \
                  "(a bug in static-tracing #{StaticTracing::VERSION}: please report it, with the command line)\n"
        )
      end
    end

    it "says a native panic as the reader words it" do
      message = "internal error: slice index starts at 3 but ends at 2 (a bug in static_tracing: please report it)"
      allow(StaticTracing::CLI::TraceFile).to receive(:load).and_raise(StaticTracing::InternalError, message)
      expect(cli("report", path)).to have_attributes(exitstatus: 1, stderr: "static-tracing report: #{message}\n")
    end
  end

  describe "list" do
    before { skip "USDT probes are not supported on #{RUBY_PLATFORM}" unless StaticTracing.supported? }

    let!(:provider) do
      StaticTracing::Provider.register(:cli_list_self).tap do |provider|
        provider.add_tracepoint(:hello, Integer, String)
        provider.add_tracepoint(:bare)
        provider.load
      end
    end

    it "prints a table of this process's providers" do
      result = cli("list", Process.pid)
      expect(result).to have_attributes(exitstatus: 0, stderr: "")
      expect(result.stdout).to match(/\APID #{Process.pid}: \d+ providers?, \d+ probes?, 0 attached; mode \w+/)
      expect(result.stdout).to include("\ncli_list_self  #{provider.path}\n")
      expect(result.stdout).to match(%r{^  hello +Integer, String/Float +no$})
      expect(result.stdout).to match(/^  bare +- +no$/)
      expect(result.stdout).to include("String/Float: a String pointer (str(argN) in bpftrace) or a Float's bits")
    end

    it "prints the same as JSON" do
      # Examples before this one may have changed the mode without the
      # state being published since.
      StaticTracing::State.publish
      result = cli("list", "--json", Process.pid)
      document = JSON.parse(result.stdout)
      expect(document["pid"]).to eq(Process.pid)
      expect(document["tracing"]).to include("mode" => StaticTracing::Configuration.mode.to_s,
                                             "enabled" => StaticTracing.enabled?,
                                             "state_file" => StaticTracing::State.path)
      mine = document["providers"].find { |entry| entry["name"] == "cli_list_self" }
      expect(mine).to include("path" => provider.path, "memfd" => false, "deleted" => false)
      expect(mine["probes"]).to eq(
        [
          { "name" => "hello", "args" => %w[Integer String/Float], "arg_spec" => "-8@%rdi 8@%rsi",
            "attached" => false, "semaphore" => 0, "breakpoint" => false },
          { "name" => "bare", "args" => [], "arg_spec" => "",
            "attached" => false, "semaphore" => 0, "breakpoint" => false }
        ]
      )
    end

    it "says there is no such process, with exit status 1" do
      pid = dead_pid
      expect(cli("list", pid)).to have_attributes(
        exitstatus: 1, stdout: "", stderr: "static-tracing: no process with PID #{pid}: check the PID (ps -p #{pid})\n"
      )
    end

    it "takes the process as --pid PID too, as rbspy and py-spy do" do
      pid = dead_pid
      missing = "static-tracing: no process with PID #{pid}: check the PID (ps -p #{pid})\n"
      %w[list record enable].each do |command|
        expect(cli(command, "--pid", pid)).to have_attributes(exitstatus: 1, stderr: missing)
        expect(cli(command, "--pid=#{pid}")).to have_attributes(exitstatus: 1, stderr: missing)
      end
      expect(cli("list", "--pid", pid, "--pid", pid).stderr)
        .to eq("static-tracing list: --pid given twice: #{pid} and #{pid} (see static-tracing list --help)\n")
      expect(cli("record", "--duration", "0", "--pid", pid).stderr)
        .to start_with("static-tracing record: --seconds must be a number of seconds above 0")
    end
  end

  describe "latency" do
    # Stands in for bpftrace: records its command line and prints what
    # bpftrace 0.17 prints with -f json, including its garbled bucket past 2^31.
    def fake_bpftrace(dir, stdout, stderr: "", status: 0)
      File.write(File.join(dir, "stdout"), stdout)
      File.write(File.join(dir, "stderr"), stderr)
      File.join(dir, "bpftrace").tap do |path|
        File.write(path, <<~SH)
          #!/bin/sh
          printf '%s\n' "$@" > #{dir}/argv
          cat #{dir}/stdout
          cat #{dir}/stderr >&2
          exit #{status}
        SH
        File.chmod(0o755, path)
      end
    end

    let(:events) do
      <<~'JSON'
        {"type": "attached_probes", "data": {"probes": 3}}
        {"type": "printf", "data": "static_tracing: attached\\n"}


        {"type": "stats", "data": {"@avg": {"cli_fake:op": 2500}}}
        {"type": "map", "data": {"@max": {"cli_fake:op": 3000000000000}}}
        {"type": "hist", "data": {"@us": {"cli_fake:op": [{"max": -1, "count": 1}, {"min": 0, "max": 0, "count": 2}, {"min": 1, "max": 1, "count": 0}, {"min": 2, "max": 3, "count": 4}, {"min": 1073741824, "max": 2147483647, "count": 0}, {"min": -2147483648, "max": 0, "count": 1}]}}}
      JSON
    end

    context "with latency probes loaded" do
      before { skip "USDT probes are not supported on #{RUBY_PLATFORM}" unless StaticTracing.supported? }

      let!(:provider) do
        StaticTracing::Provider.register(:cli_fake).tap do |provider|
          provider.add_tracepoint(:op, Integer, String)
          provider.add_tracepoint(:idle, Integer)
          provider.add_tracepoint(:note, String)
          provider.load
        end
      end

      it "runs bpftrace on the latency probes and prints its histograms in time units" do
        Dir.mktmpdir do |dir|
          result = cli("latency", Process.pid, "--provider", "cli_fake", "--seconds", "1.5",
                       env: { "BPFTRACE" => fake_bpftrace(dir, events) })
          expect(result).to have_attributes(exitstatus: 0)
          expect(result.stderr).to eq("Tracing 2 latency probes in process #{Process.pid} for 1.5s " \
                                      "(Ctrl-C to stop early)...\n")
          expect(result.stdout).to eq(<<~TEXT)
            Latency in process #{Process.pid}, per probe (arg0 in ns, buckets in us/ms/s):

            cli_fake:op  8 calls, avg 2.5us, max 3000s
              < 0             1 |@@@@@@@@@@@@@                                       |
              < 1us           2 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |
              [1us, 2us)      0 |                                                    |
              [2us, 4us)      4 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
              [1074s, 2147s)  0 |                                                    |
              [2147s, 4295s)  1 |@@@@@@@@@@@@@                                       |

            cli_fake:idle  no calls
          TEXT
          argv = File.read(File.join(dir, "argv"))
          expect(argv).to start_with("-f\njson\n-p\n#{Process.pid}\n-e\n")
          expect(argv).to include("usdt:*:cli_fake:op {", "usdt:*:cli_fake:idle {", "hist(arg0 / 1000)",
                                  "interval:ms:1500 { exit(); }")
          expect(argv).not_to include("cli_fake:note")
        end
      end

      it "reports bpftrace's error when it fails" do
        Dir.mktmpdir do |dir|
          stderr = "Attaching 3 probes...\nERROR: couldn't set RLIMIT_MEMLOCK\nERROR: Could not resolve symbol\n"
          bpftrace = fake_bpftrace(dir, "", stderr:, status: 1)
          result = cli("latency", Process.pid, "--provider", "cli_fake", env: { "BPFTRACE" => bpftrace })
          expect(result).to have_attributes(exitstatus: 1, stdout: "")
          expect(result.stderr)
            .to start_with("static-tracing: bpftrace failed (exit 1): ERROR: Could not resolve symbol")
        end
      end

      it "says when a chosen provider is not loaded" do
        Dir.mktmpdir do |dir|
          bpftrace = fake_bpftrace(dir, "")
          result = cli("latency", Process.pid, "--provider", "cli_absent", env: { "BPFTRACE" => bpftrace })
          expect(result).to have_attributes(exitstatus: 1, stdout: "")
          expect(result.stderr)
            .to match(/\Astatic-tracing: process #{Process.pid} has no provider cli_absent loaded \(it has: .*cli_fake/)
          expect(File.exist?(File.join(dir, "argv"))).to be(false)
        end
      end
    end

    it "says when bpftrace cannot be found in PATH" do
      Dir.mktmpdir do |empty|
        result = cli("latency", Process.pid, env: { "PATH" => empty })
        expect(result).to have_attributes(exitstatus: 1, stdout: "")
        expect(result.stderr).to eq("static-tracing: bpftrace is not installed (not found in PATH): install it " \
                                    "(e.g. apt-get install bpftrace), or set BPFTRACE=/path/to/bpftrace\n")
      end
    end

    it "says when $BPFTRACE is not an executable" do
      Dir.mktmpdir do |dir|
        result = cli("latency", Process.pid, env: { "BPFTRACE" => dir, "PATH" => ENV.fetch("PATH", "") })
        expect(result).to have_attributes(exitstatus: 1, stdout: "")
        expect(result.stderr).to eq("static-tracing: BPFTRACE=#{dir} is not an executable file: point it at " \
                                    "bpftrace, or unset it to search PATH\n")
      end
    end
  end

  it "words counts one way in every command: 1 probe, 2 probes" do
    owners = described_class.commands.values.map { |command| command.instance_method(:count).owner }
    expect(owners.uniq).to eq([StaticTracing::CLI::Command])
    command = StaticTracing::CLI::List.new(out: StringIO.new, err: StringIO.new, env: {})
    expect([0, 1, 2].map { |number| command.send(:count, number, "probe") }).to eq(["0 probes", "1 probe", "2 probes"])
  end

  it "runs without loading the native extension or the rest of the gem" do
    script = 'require "static_tracing/cli"; puts $LOADED_FEATURES.grep(/static_tracing/).map { |f| File.basename(f) }'
    out, status = Open3.capture2(RbConfig.ruby, "-I", File.expand_path("../../lib", __dir__), "-e", script)
    expect(status).to be_success
    expect(out.lines.map(&:chomp)).to include("cli.rb", "list.rb", "latency.rb")
    expect(out.lines.map(&:chomp)).not_to include("static_tracing.so", "provider.rb", "static_tracing.rb")
  end
end
