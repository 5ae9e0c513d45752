# frozen_string_literal: true

require "static_tracing/cli"

# The example app (examples/puma) under a real puma in cluster mode, two
# workers, preload_app!, four threads each, traced by the real bpftrace:
# each worker by its own PID, with exact counts under concurrent requests,
# before and after puma replaces its workers.
RSpec.describe "puma in cluster mode, traced with bpftrace", :e2e do
  let(:probes) { %w[home slow tracing] }

  # What +pid+ publishes about its tracing (mode, enabled, armed), read
  # while the process is not republishing it.
  def published(pid)
    state_now(pid) or raise "process #{pid} publishes no tracing state"
  end

  # The same, for polls: a read that meets the process replacing its file
  # finds none (the command refuses the replaced file, which has no link
  # left), so a poll takes nil as "not yet".
  def state_now(pid)
    StaticTracing::CLI::ProcessState.new(pid).read
  end

  def probes_listed(pid)
    bpftrace_list(pid, "usdt:*:pages_controller:*").map { |line| line[/\w+\z/] }
  end

  # One bpftrace for each worker, attached by the worker's own PID.
  def trace_each_worker(puma)
    puma.worker_pids.to_h { |pid| [pid, attach_bpftrace(pid, "usdt:*:pages_controller:slow { @slow = count(); }")] }
  end

  # Sends concurrent requests until every worker has served some (which
  # worker accepts is puma's and the scheduler's choice), and expects each
  # worker's bpftrace to have counted exactly those it served.
  def expect_exact_counts_per_worker(puma, tracers)
    served = puma.serve_until("/slow") { |pids| pids.uniq.size == tracers.size }
    expect(served.tally.keys).to match_array(tracers.keys)
    counted = tracers.transform_values { |tracer| Integer(tracer.finish[/^@slow: (\d+)$/, 1]) }
    expect(counted).to eq(served.tally)
  end

  def expect_gone(pids)
    pids.each { |pid| eventually("old worker #{pid} has exited") { !File.exist?("/proc/#{pid}") } }
  end

  context "in SIGNAL mode, the default" do
    # Tracing on in +pids+ (SIGTRAP to each), once each lists its probes.
    def enable(pids)
      Process.kill("TRAP", *pids)
      pids.each do |pid|
        eventually("process #{pid} is enabled") { state_now(pid)&.enabled }
        eventually("process #{pid} lists its probes") { probes_listed(pid).sort == probes.sort }
      end
    end

    it "traces each worker SIGTRAP turned on by its own PID, counting exactly the requests it served" do
      puma = start_puma
      puma.worker_pids.each do |pid|
        expect(published(pid)).to have_attributes(mode: "signal", enabled: false)
        expect(probes_listed(pid)).to eq([])
      end

      enable(puma.worker_pids)
      expect(published(puma.pid).enabled).to be(false)
      expect_exact_counts_per_worker(puma, trace_each_worker(puma))

      Process.kill("TRAP", *puma.worker_pids)
      puma.worker_pids.each do |pid|
        eventually("worker #{pid} is disabled") { state_now(pid)&.enabled == false }
        eventually("worker #{pid} lists no probes") { probes_listed(pid).empty? }
      end
    end

    it "starts the workers of a hot restart (SIGUSR2) with tracing off, whatever was on before" do
      puma = start_puma
      old_workers = puma.worker_pids
      enable([puma.pid, old_workers.first])
      stubs = File.join(File.dirname(published(puma.pid).path), "pages_controller-{#{puma.pid},#{old_workers.first}}-*")
      expect(Dir.glob(stubs).size).to eq(2)

      log = puma.restart("USR2")
      expect(log).to include("Restarting")
      expect(puma.worker_pids & old_workers).to eq([])
      expect_gone(old_workers)
      # The master re-executed itself: same PID, a new process image, the
      # gem loaded afresh in mode signal, tracing off; the stubs of the old
      # image and of the old worker are gone.
      expect(published(puma.pid)).to have_attributes(mode: "signal", enabled: false)
      expect(Dir.glob(stubs)).to eq([])
      puma.worker_pids.each do |pid|
        expect(published(pid)).to have_attributes(mode: "signal", enabled: false)
        expect(probes_listed(pid)).to eq([])
      end

      enable(puma.worker_pids)
      expect_exact_counts_per_worker(puma, trace_each_worker(puma))
    end
  end

  context "in attach mode" do
    let(:env) { { "STATIC_TRACING_MODE" => "attach" } }

    def expect_listed_and_unarmed(pids)
      pids.each do |pid|
        expect(published(pid)).to have_attributes(mode: "attach", armed: [])
        expect(probes_listed(pid)).to match_array(probes)
      end
    end

    def wait_until_armed(pids)
      pids.each do |pid|
        eventually("worker #{pid} has armed pages_controller:slow") do
          state_now(pid)&.armed == ["pages_controller:slow"]
        end
      end
    end

    it "lists every probe in every worker from boot and counts each worker exactly, by its own PID" do
      puma = start_puma(env:)
      expect_listed_and_unarmed([puma.pid, *puma.worker_pids])

      tracers = trace_each_worker(puma)
      wait_until_armed(puma.worker_pids)
      expect(published(puma.pid).armed).to eq([])
      expect_exact_counts_per_worker(puma, tracers)

      puma.worker_pids.each do |pid|
        eventually("worker #{pid} has disarmed") { state_now(pid)&.armed == [] }
      end
    end

    # puma refuses a phased restart with preload_app!: the workers would
    # keep running the old code. It says so and restarts hot, as on SIGUSR2.
    it "gives the workers of a restart on SIGUSR1 (hot, under preload_app!) every probe, unarmed until traced" do
      puma = start_puma(env:)
      old_workers = puma.worker_pids
      old_tracer = attach_bpftrace(old_workers.first, "usdt:*:pages_controller:slow { @slow = count(); }")
      wait_until_armed([old_workers.first])

      log = puma.restart("USR1")
      expect(log).to match(/phased-restart .*not available/)
      expect(log).to include("Restarting")
      expect(puma.worker_pids & old_workers).to eq([])
      expect_gone(old_workers)
      old_tracer.kill
      expect_listed_and_unarmed([puma.pid, *puma.worker_pids])

      tracers = trace_each_worker(puma)
      wait_until_armed(puma.worker_pids)
      expect_exact_counts_per_worker(puma, tracers)
    end
  end
end
