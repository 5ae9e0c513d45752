# frozen_string_literal: true

require "fileutils"
require "json"
require "tmpdir"

# `static-tracing` run as an operator runs it, against real child processes,
# with the real bpftrace attached where it matters.
RSpec.describe "static-tracing against a live process", :e2e do
  # Two providers, probes of every argument type; fires on request.
  let(:app_script) do
    <<~'RUBY'
      $stdout.sync = true
      web = StaticTracing::Provider.register(:cli_web)
      request = web.add_tracepoint(:request, Integer, String)
      web.add_tracepoint(:render, Integer)
      db = StaticTracing::Provider.register(:cli_db)
      db.add_tracepoint(:query, String, Float)
      db.add_tracepoint(:ping)
      web.load
      db.load
      puts "LOADED #{web.path} #{db.path}"
      while (line = $stdin.gets)
        next unless line.strip == "fire"

        5.times { request.fire(1_500_000, "slow") }
        3.times { request.fire(50_000, "fast") }
        puts "FIRED"
      end
    RUBY
  end

  def start_app
    app = ruby_process(app_script)
    web_path, db_path = app.wait_for(/^LOADED (\S+) (\S+)$/).captures
    [app, web_path, db_path]
  end

  def list_json(pid)
    result = run_cli("list", "--json", pid)
    expect(result.exitstatus).to eq(0), result.stderr
    JSON.parse(result.stdout)
  end

  def attached(document)
    document["providers"].flat_map do |provider|
      provider["probes"].map { |probe| ["#{provider["name"]}:#{probe["name"]}", probe["attached"]] }
    end.to_h
  end

  describe "list" do
    it "shows both providers, their probes and stub paths, none attached" do
      app, web_path, db_path = start_app
      result = run_cli("list", app.pid)
      expect(result).to have_attributes(exitstatus: 0, stderr: "")
      expect(result.stdout).to eq(<<~TABLE)
        PID #{app.pid}: 2 providers, 4 probes, 0 attached; mode signal (SIGTRAP), tracing disabled

        cli_db  #{db_path}
          PROBE    ARGUMENTS                   ATTACHED
          query    String/Float, String/Float  no
          ping     -                           no

        cli_web  #{web_path}
          PROBE    ARGUMENTS                   ATTACHED
          request  Integer, String/Float       no
          render   Integer                     no

        String/Float: a String pointer (str(argN) in bpftrace) or a Float's bits; the stub does not record which.
      TABLE
    end

    it "prints JSON that matches the process" do
      app, web_path, db_path = start_app
      document = list_json(app.pid)
      expect(document["pid"]).to eq(app.pid)
      state_file = end_with("/#{StubNames.state_file(app.pid)}")
      expect(document["tracing"]).to include("mode" => "signal", "signal" => "TRAP", "signal_number" => 5,
                                             "enabled" => false, "state_file" => state_file)
      expect(document["providers"].map { |provider| provider.values_at("name", "path", "memfd", "deleted") })
        .to eq([["cli_db", db_path, false, false], ["cli_web", web_path, false, false]])
      expect(document["providers"].map { |provider| provider["load_address"] }).to all(match(/\A0x\h+\z/))
      web = document["providers"].last
      expect(web["probes"].map { |probe| probe.values_at("name", "args", "arg_spec") })
        .to eq([["request", %w[Integer String/Float], "-8@%rdi 8@%rsi"], ["render", ["Integer"], "-8@%rdi"]])
      expect(attached(document).values).to eq([false] * 4)
    end

    it "shows the probe bpftrace is attached to as attached, and only while it is" do
      app, = start_app
      bpftrace = attach_bpftrace(app.pid, "usdt:*:cli_web:render { @renders = count(); }")

      table = run_cli("list", app.pid).stdout
      expect(table).to start_with("PID #{app.pid}: 2 providers, 4 probes, 1 attached; mode signal (SIGTRAP), " \
                                  "tracing disabled\n")
      expect(table).to match(/^  render +Integer +yes$/)
      expect(table.scan(/ no$/).size).to eq(3)
      render = list_json(app.pid)["providers"].last["probes"].last
      expect(render).to include("name" => "render", "attached" => true, "semaphore" => 1)
      expect(attached(list_json(app.pid))).to eq(
        "cli_db:query" => false, "cli_db:ping" => false, "cli_web:request" => false, "cli_web:render" => true
      )

      bpftrace.finish
      expect(attached(list_json(app.pid)).values).to eq([false] * 4)
    end

    it "finds a memfd stub and a stub only visible inside the process's mount namespace" do
      skip "needs unshare(1)" unless system("unshare", "--help", out: File::NULL, err: File::NULL)

      private_dir = Dir.mktmpdir("cli_ns")
      default_dir = "/tmp/static_tracing-#{Process.euid}"
      FileUtils.mkdir_p(default_dir, mode: 0o700)
      # In its own mount namespace the process finds its default stub
      # directory noexec (so its first provider falls back to a memfd), and
      # private_dir a fresh tmpfs that nothing outside can see.
      script = <<~SH
        mount -t tmpfs -o noexec,mode=0700 tmpfs #{default_dir} &&
        mount -t tmpfs -o mode=0700 tmpfs #{private_dir} &&
        exec #{RbConfig.ruby} -I #{E2E::LIB} -r static_tracing -e '
          $stdout.sync = true
          a = StaticTracing::Provider.register(:cli_in_memfd); a.add_tracepoint(:tick, Integer); a.load
          ENV["STATIC_TRACING_DIR"] = "#{private_dir}/stubs"
          b = StaticTracing::Provider.register(:cli_in_ns); b.add_tracepoint(:tock, Float); b.load
          puts "LOADED \#{a.path} \#{b.path}"
          sleep'
      SH
      app = E2E::Child.new("unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                           env: { "XDG_RUNTIME_DIR" => nil, "STATIC_TRACING_DIR" => nil })
      started_processes << app
      memfd_path, ns_path = app.wait_for(/^LOADED (\S+) (\S+)$/).captures
      expect(File.exist?(ns_path)).to be(false)

      document = list_json(app.pid)
      expect(document["providers"].map { |provider| provider.values_at("name", "path", "memfd") })
        .to eq([["cli_in_memfd", memfd_path, true], ["cli_in_ns", ns_path, false]])
      expect(document["providers"].first["mapping"]).to eq("/memfd:static_tracing:cli_in_memfd (deleted)")
      expect(document["providers"].map { |provider| provider["probes"].first["name"] }).to eq(%w[tick tock])
      expect(run_cli("list", app.pid).stdout)
        .to include("\ncli_in_memfd  #{memfd_path}  (memfd static_tracing:cli_in_memfd)\n")
    ensure
      app&.kill
      FileUtils.remove_entry(private_dir) if private_dir
    end
  end

  describe "latency" do
    it "prints one histogram per latency probe with every call counted" do
      app, = start_app
      latency = E2E::Child.new(RbConfig.ruby, CLIHelpers::EXE, "latency", app.pid.to_s, "--seconds", "2")
      started_processes << latency
      latency.wait_for(/^Tracing 2 latency probes in process #{app.pid} for 2s \(Ctrl-C to stop early\)\.\.\.$/)
      app.puts("fire")
      app.wait_for(/^FIRED$/)
      status = latency.wait(timeout: 30)
      expect(status).to be_success, latency.output

      output = latency.output
      expect(output).to include("Latency in process #{app.pid}, per probe (arg0 in ns, buckets in us/ms/s):")
      expect(output).to include("cli_web:request  8 calls, avg 956us, max 1.5ms\n")
      expect(output).to match(/^  \[32us, 64us\) +3 \|@+ +\|$/)
      expect(output).to match(/^  \[1\.02ms, 2\.05ms\) +5 \|@{52}\|$/)
      expect(output.scan(/^  \[.*\) +(\d+) \|/).flatten.map(&:to_i).sum).to eq(8)
      expect(output).to include("cli_web:render  no calls\n")
      expect(output).not_to include("cli_db")
    end

    it "says when the chosen provider has no latency probes" do
      app, = start_app
      result = run_cli("latency", app.pid, "--provider", "cli_db", "--seconds", "1")
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to eq(
        "static-tracing: process #{app.pid} has no latency probes (probes whose first argument is an Integer): " \
        "it has cli_db:query(String/Float, String/Float), cli_db:ping()\n"
      )
    end

    it "says when bpftrace is not installed" do
      app, = start_app
      Dir.mktmpdir do |empty|
        result = run_cli("latency", app.pid, "--seconds", "1", env: { "PATH" => empty, "BPFTRACE" => nil })
        expect(result).to have_attributes(exitstatus: 1, stdout: "")
        expect(result.stderr).to eq("static-tracing: bpftrace is not installed (not found in PATH): install it " \
                                    "(e.g. apt-get install bpftrace), or set BPFTRACE=/path/to/bpftrace\n")
      end
    end
  end

  describe "errors" do
    it "says there is no such process, for each command" do
      pid = dead_pid
      %w[list latency enable disable toggle].each do |command|
        result = run_cli(command, pid)
        expect(result).to have_attributes(exitstatus: 1, stdout: "")
        expect(result.stderr).to eq("static-tracing: no process with PID #{pid}: check the PID (ps -p #{pid})\n")
      end
    end

    it "lists no provider, and says they load on demand or after the signal, when the gem is loaded but none is" do
      app = ruby_process("$stdout.sync = true; puts 'READY'; sleep")
      app.wait_for(/^READY$/)
      why = "providers load on demand (Provider#load, or as tracepoints are declared in ON mode) or, in SIGNAL " \
            "mode (the default), after the process receives the configured signal (SIGTRAP unless configured " \
            "otherwise: kill -TRAP #{app.pid})"
      # list shows the process as it is; latency, which needs a probe, refuses.
      result = run_cli("list", app.pid)
      expect(result).to have_attributes(exitstatus: 0, stderr: "")
      expect(result.stdout).to eq("PID #{app.pid}: 0 providers, 0 probes, 0 attached; mode signal (SIGTRAP), " \
                                  "tracing disabled\nNo providers loaded: #{why}.\n")
      expect(JSON.parse(run_cli("list", app.pid, "--json").stdout)).to include("pid" => app.pid, "providers" => [])
      expect(run_cli("latency", app.pid)).to have_attributes(
        exitstatus: 1, stderr: "static-tracing: process #{app.pid} has no static_tracing providers loaded: #{why}\n"
      )
    end

    it "says the gem is not loaded in a process that does not use it" do
      sleeper = E2E::Child.new("sleep", "60")
      started_processes << sleeper
      result = run_cli("list", sleeper.pid)
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to eq(
        "static-tracing: process #{sleeper.pid} has no static_tracing probes: it has not loaded the static_tracing " \
        "gem (no static_tracing.so in /proc/#{sleeper.pid}/maps); require it in that process first\n"
      )
    end

    it "says what to do when the process belongs to another user" do
      skip "needs setpriv(1)" unless system("setpriv", "--help", out: File::NULL, err: File::NULL)

      app, = start_app
      result = run_cli("list", app.pid, command: ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                                  RbConfig.ruby, portable_exe])
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to eq(
        "static-tracing: permission denied reading /proc/#{app.pid}/maps: process #{app.pid} runs as uid 0, " \
        "you as uid 65534; run static-tracing as root or as uid 0\n"
      )
    end
  end
end
