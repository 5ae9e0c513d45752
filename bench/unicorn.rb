# frozen_string_literal: true

require "static_tracing/cli"
require_relative "../spec/support/unicorn"

module Bench
  # The example app (examples/unicorn) under a unicorn master with one
  # worker, on a free loopback port.
  class Unicorn < Child
    include E2E::UnicornApp

    READY_TIMEOUT = 30

    attr_reader :worker

    def initialize(config_ru, log:)
      @port = E2E.free_port
      env, *command = E2E::UnicornApp.command(config_ru, port: @port, workers: 1)
      super(*command, log:, env: env.merge("STATIC_TRACING_MODE" => "signal"))
      begin
        wait_for(/worker=0 ready/, timeout: READY_TIMEOUT)
        @worker = Integer(output[/worker=0 spawned pid=(\d+)/, 1])
      rescue StandardError
        kill
        raise
      end
    end

    def url(path = "/")
      "http://127.0.0.1:#{@port}#{path}"
    end

    # Whether the worker has the extension mapped: it has not when the gem
    # was never required.
    def gem_loaded?
      File.foreach("/proc/#{@worker}/maps").any? { |line| line.include?("static_tracing.so") }
    end

    # The stub file of +provider+ the worker has mapped, found the way the
    # static-tracing command finds it.
    def stub_path(provider)
      stub = StaticTracing::CLI::Target.new(@worker).stubs.find { |candidate| candidate.provider == provider }
      stub&.path or raise "worker #{@worker} has no stub of #{provider} mapped"
    end

    # CPU time the worker has run, all its threads, in ns: what a request
    # costs it whatever else the host is running.
    def worker_cpu_ns
      Dir.glob("/proc/#{@worker}/task/*/schedstat").sum do |path|
        Integer(File.read(path).split.first)
      rescue Errno::ENOENT
        0
      end
    end

    # Sends the toggle signal to the worker and waits until it reports
    # tracing in the state wanted (GET /tracing, answered by that worker).
    def toggle_tracing(enabled, timeout: 10)
      Process.kill("TRAP", @worker)
      wait_until(timeout, "worker #{@worker} reports enabled=#{enabled}") do
        state = get("/tracing")
        state.include?("enabled=#{enabled}") && state.include?("wrapped=#{enabled}")
      end
    end

    # Polls +condition+ until it holds, bounded by +timeout+.
    def wait_until(timeout, what)
      deadline = Bench.now_ns + (timeout * 1e9)
      until yield
        raise "timed out after #{timeout} s waiting until #{what}" if Bench.now_ns > deadline

        sleep 0.02
      end
    end

    def name
      "unicorn master (pid #{pid})"
    end
  end
end
