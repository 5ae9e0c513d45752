# frozen_string_literal: true

require "fileutils"
require "tmpdir"
require "static_tracing/cli"

# The recorder end to end: real unicorn and puma servers and Ruby processes,
# recorded by PID with `static-tracing record` and `dump` as an operator
# runs them: exact counts, no privilege needed, the same calls bpftrace
# sees, and each process's recording its own across fork.
RSpec.describe "Recording live processes with static-tracing", :subprocess do
  include CLIHelpers
  include E2E::Recording

  let(:traces) { Dir.mktmpdir("static_tracing-recording") }

  after { FileUtils.rm_rf(traces) }

  describe "without privilege, bpftrace or tracefs" do
    let(:unprivileged) { E2E::Unprivileged }
    let(:unprivileged_env) { E2E::Unprivileged::ENV_RESET }

    it "records a unicorn worker by PID, as a user with no capability, exactly, and leaves nothing armed" do
      require_unprivileged!(hiding_tracefs: true)
      unicorn = start_unicorn(root: E2E.portable_root, prefix: unprivileged.command, env: unprivileged_env)
      worker = unicorn.worker_pids.first
      expect(unprivileged.credentials(worker)).to eq(unprivileged.expected_credentials)

      unprivileged.directory do |dir|
        trace = File.join(dir, "worker.trace")
        bpftrace_runs = File.join(dir, "bpftrace-runs")
        trap = unprivileged.bpftrace_trap(File.join(dir, "bpftrace"), bpftrace_runs)
        env = unprivileged_env.merge("PATH" => "#{dir}:/usr/sbin:/usr/bin:/sbin:/bin", "BPFTRACE" => trap)
        command = start_record(worker, "my_controller:*", "-o", trace,
                               prefix: unprivileged.hiding_tracefs(*unprivileged.command), exe: portable_exe, env:)
        # Where it runs: as that user, with nothing more, and no tracefs to see.
        expect(unprivileged.credentials(command.pid)).to eq(unprivileged.expected_credentials)
        %w[/sys/kernel/tracing /sys/kernel/debug].select { |each| File.directory?(each) }.each do |hidden|
          expect(Dir.children("/proc/#{command.pid}/root#{hidden}")).to eq([])
        end
        ring = published_state(worker).recorder.fetch("ring")
        expect(File.stat(ring)).to have_attributes(uid: E2E::Unprivileged::UID, mode: 0o100600)

        200.times { unicorn.get("/") }
        50.times { unicorn.get("/items/1") }
        output = interrupt_record(command)

        recorded = read_trace(trace)
        expect(recorded_calls(recorded)).to eq("my_controller:index" => 200, "my_controller:show" => 50)
        expect(recorded).to have_attributes(pid: worker, lost: 0)
        expect(File.stat(trace).uid).to eq(E2E::Unprivileged::UID)
        reported = { "my_controller:index" => 200, "my_controller:show" => 50, "my_controller:slow" => 0,
                     "my_controller:tracing" => 0 }
        expect(reported_calls(output)).to eq(reported)
        expect(File.exist?(bpftrace_runs)).to be(false)
        expect(File.exist?(ring)).to be(false)
      end
      expect(raw_state(worker)["recorder"]).to be_nil
      expect(unicorn.tracing_state).to include("wrapped" => "false", "enabled" => "false")
    end
  end

  describe "beside bpftrace" do
    # Attach mode: the probes are loaded (listed) from boot, so bpftrace
    # attaches to the same probes the recorder records.
    let(:app) do
      ruby_repl(<<~'RUBY', env: { "STATIC_TRACING_MODE" => "attach" })
        class RecBoth
          include StaticTracing::LatencyTracer
          def work(value) = value
        end
        EVENT = StaticTracing::Tracepoint.new(:rec_both_events, :event, Integer, String)
        # +each+ calls of work in each of +threads+ threads, and an event every other call.
        def calls(threads, each)
          Array.new(threads) do |thread|
            Thread.new { each.times { |i| RecBoth.new.work(i) && i.even? && EVENT.fire(i, "thread #{thread}") } }
          end.each(&:join).size
        end
      RUBY
    end

    it "records exactly the calls bpftrace counts while both are attached, with the same values" do
      require_tracing!
      wait_until_listed(app.pid, "usdt:*:rec_both*:*", count: 2)
      trace = File.join(traces, "both.trace")
      command = start_record(app.pid, "rec_both:*", "rec_both_events:*", "-o", trace)
      tracer = attach_bpftrace(app.pid, "usdt:*:rec_both:*, usdt:*:rec_both_events:* " \
                                        "{ @calls[probe] = count(); @sum[probe] = sum(arg0); }")
      app.evaluate("calls(4, 500)")
      seen = tracer.finish
      interrupt_record(command)

      expected = { "rec_both:work" => 2000, "rec_both_events:event" => 1000 }
      recorded = read_trace(trace)
      expect(bpftrace_map(seen, "calls")).to eq(expected)
      expect(recorded_calls(recorded)).to eq(expected)
      expect(recorded.lost).to eq(0)
      # The latencies too: each call's, recorded and fired, is one value.
      sums = recorded.records.group_by { |record| record.probe.label }
                     .transform_values { |records| records.sum { |record| record.args.first } }
      expect(sums).to eq(bpftrace_map(seen, "sum"))
      expect(sums["rec_both_events:event"]).to eq(4 * (0...500).step(2).sum)
    end
  end

  describe "one worker of puma in cluster mode" do
    # GET /tracing from several clients at once until every worker has
    # answered; returns each answer's fields (pid, enabled, wrapped, mode).
    def tracing_answers(puma)
      answers = []
      until (puma.worker_pids - answers.map { |answer| Integer(answer["pid"]) }).empty? || answers.size >= 800
        answers += Array.new(8) { Thread.new { Array.new(5) { puma.get("/tracing").scan(/(\w+)=(\w+)/).to_h } } }
                        .flat_map(&:value)
      end
      answers
    end

    it "is recorded by its PID, exactly for the requests it served, and the other workers are untouched" do
      puma = start_puma
      recorded_pid, *others = puma.worker_pids
      trace = File.join(traces, "puma.trace")
      command = start_record(recorded_pid, "pages_controller:*", "-o", trace)
      ring = published_state(recorded_pid).recorder.fetch("ring")
      expect(File.exist?(ring)).to be(true)

      served = puma.serve_until("/slow") { |pids| (puma.worker_pids - pids).empty? }
      answers = tracing_answers(puma)
      [puma.pid, *others].each do |pid|
        expect(published_state(pid).recorder).to be_nil
        expect(raw_state(pid)["recorder"]).to be_nil
        expect(File.exist?(ring_path(pid))).to be(false)
      end
      wrapped = answers.group_by { |answer| Integer(answer["pid"]) }
                       .transform_values { |each| each.map { |answer| answer["wrapped"] }.uniq }
      expect(wrapped).to eq({ recorded_pid => ["true"] }.merge(others.to_h { |pid| [pid, ["false"]] }))
      output = interrupt_record(command)

      expected = { "pages_controller:slow" => served.count(recorded_pid),
                   "pages_controller:tracing" => answers.count { |answer| Integer(answer["pid"]) == recorded_pid } }
      expect(recorded_calls(read_trace(trace))).to eq(expected)
      expect(read_trace(trace)).to have_attributes(pid: recorded_pid, lost: 0)
      expect(reported_calls(output)).to eq(expected.merge("pages_controller:home" => 0))
      expect(published_state(recorded_pid).recorder).to be_nil
      expect(File.exist?(ring)).to be(false)
    end
  end

  describe "across fork" do
    it "gives each unicorn worker a flight ring of its own (STATIC_TRACING_RECORD); the master's stays empty" do
      unicorn = start_unicorn(workers: 2, env: { "STATIC_TRACING_RECORD" => "--flight --size 256K" })
      workers = unicorn.worker_pids
      [unicorn.pid, *workers].each do |pid|
        recording = eventually("process #{pid} says it records") { published_state(pid).recorder }
        expect(recording).to include("by" => "process", "flight" => true, "size" => 256 * 1024,
                                     "ring" => ring_path(pid))
        expect(File.exist?(recording["ring"])).to be(true)
      end

      served = unicorn.serve_until("/") { |pids| (workers - pids).empty? }
      [unicorn.pid, *workers].each do |pid|
        path = File.join(traces, "#{pid}.trace")
        result = run_cli("dump", pid, "-o", path)
        expect(result.exitstatus).to eq(0), result.stderr
        dumped = read_trace(path)
        expect(dumped).to have_attributes(pid:, lost: 0)
        if pid == unicorn.pid
          expect(dumped).to have_attributes(records: [], records_total: 0)
        else
          expect(recorded_calls(dumped)).to eq("my_controller:index" => served.count(pid))
          expect(dumped.records.map(&:tid).uniq).to eq([pid])
        end
      end
    end

    context "while static-tracing records the parent" do
      let(:parent) do
        ruby_repl(<<~'RUBY')
          class RecFork
            include StaticTracing::LatencyTracer
            def work = :worked
          end
          def wrapped? = RecFork.instance_method(:work).owner != RecFork

          # Forks a child that says what it finds of the recording, calls
          # work 100 times, and waits to be looked at. Returns its pid and
          # what it found.
          def fork_child
            reader, writer = IO.pipe
            pid = fork do
              reader.close
              found = { status: StaticTracing::Recorder.status, recording: StaticTracing::Recorder.recording?,
                        wrapped: wrapped?, recorded: StaticTracing.providers[:rec_fork].tracepoints[:work].recorded? }
              100.times { RecFork.new.work }
              writer.puts([Marshal.dump(found)].pack("m0"))
              writer.close
              sleep
            end
            writer.close
            [pid, Marshal.load(reader.gets.chomp.unpack1("m0"))]
          ensure
            reader.close
          end
        RUBY
      end

      it "starts a forked child with nothing recorded and nothing armed" do
        trace = File.join(traces, "parent.trace")
        command = start_record(parent.pid, "rec_fork:*", "-o", trace)
        expect(parent.evaluate("wrapped?")).to be(true)

        child, found = parent.evaluate("fork_child")
        expect(found).to eq(status: nil, recording: false, wrapped: false, recorded: false)
        expect(published_state(child).recorder).to be_nil
        expect(raw_state(child)["recorder"]).to be_nil
        expect(File.exist?(ring_path(child))).to be(false)
        expect(run_cli("record", child, "--stop").stdout).to eq("Process #{child} was not recording.\n")

        parent.evaluate("10.times { RecFork.new.work }")
        interrupt_record(command)
        recorded = read_trace(trace)
        expect(recorded_calls(recorded)).to eq("rec_fork:work" => 10)
        expect(recorded.records.map(&:tid).uniq).to eq([parent.pid])
        expect(parent.evaluate("wrapped?")).to be(false)
      end
    end
  end
end
