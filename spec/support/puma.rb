# frozen_string_literal: true

require "open3"
require "rbconfig"
require_relative "web_server"

module E2E
  # The example app (examples/puma) under a real puma master in cluster
  # mode (examples/puma/puma.rb: preload_app!, 4 threads a worker), on a
  # free loopback port. Workers are found by the lines the master logs as
  # each one boots; a restart waits for the next generation's lines.
  class Puma < Child
    include WebServer

    APP = File.join(ROOT, "examples", "puma")
    CONFIG = File.join(APP, "puma.rb")

    class << self
      # puma's script on PATH, or nil.
      def executable
        ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).map { |dir| File.join(dir, "puma") }
           .find { |path| File.file?(path) && File.executable?(path) }
      end

      # Why puma cannot serve the app under this Ruby, or nil. Debian builds
      # puma's C extension for its default Ruby only.
      def unavailable_reason
        return @unavailable_reason if defined?(@unavailable_reason)

        @unavailable_reason =
          if executable.nil? then "puma is not installed"
          else
            out, status = Open3.capture2e(RbConfig.ruby, "-e", 'require "puma"; require "puma/puma_http11"')
            "puma cannot be loaded by Ruby #{RUBY_VERSION}: #{out.lines.first&.strip}" unless status.success?
          end
      end
    end

    # PIDs of the workers now serving, by worker index.
    attr_reader :worker_pids

    # puma's script is run by this Ruby, whatever Ruby its #! line names,
    # since the extension in LIB is built for this one; a hot restart
    # re-executes the same command line, in the same process. +rackup+:
    # another app to serve with the example's puma configuration.
    def initialize(workers: 2, env: {}, rackup: File.join(APP, "config.ru"))
      @port = E2E.free_port
      @workers = workers
      puma_env = { "PUMA_LISTEN" => "127.0.0.1:#{@port}", "PUMA_WORKERS" => workers.to_s }
      super(RbConfig.ruby, Puma.executable, "-I", LIB, "-C", CONFIG, rackup, env: env.merge(puma_env))
      @worker_pids = booted_workers(from: 0)
    end

    # Sends +signal+ (USR1, USR2) to the master and waits until a whole new
    # generation of workers has booted. Returns what the master logged since.
    def restart(signal, timeout: 30)
      mark = output.size
      old_workers = @worker_pids
      Process.kill(signal, pid)
      begin
        @worker_pids = booted_workers(from: mark, timeout:)
      rescue RuntimeError => e
        raise e, "#{e.message}\n#{threads_of(old_workers)}"
      end
      output[mark..]
    end

    def name
      "puma master #{pid}"
    end

    private

    # What each of +pids+ is doing, thread by thread (name, state, kernel
    # wait channel): a restart waits for the old workers to exit.
    def threads_of(pids)
      pids.map do |worker|
        tasks = Dir.glob("/proc/#{worker}/task/*").map do |task|
          stat = File.read("#{task}/stat").match(/\((?<name>.*)\) (?<state>\S)/m)
          "#{File.basename(task)} #{stat[:name].inspect} #{stat[:state]} #{File.read("#{task}/wchan")}"
        rescue SystemCallError
          nil
        end
        "old worker #{worker}: #{tasks.compact.empty? ? "gone" : tasks.compact.join("; ")}"
      end.join("\n")
    end

    # The PIDs, by index, of the workers whose boot the master logged after
    # offset +from+ of the output.
    def booted_workers(from:, timeout: DEFAULT_TIMEOUT)
      @workers.times.map do |index|
        Integer(wait_for(/- Worker #{index} \(PID: (\d+)\) booted\b/, from:, timeout:)[1])
      end
    end
  end

  module Helpers
    def start_puma(**options)
      reason = Puma.unavailable_reason
      cannot_run!(reason, component: :puma) if reason
      Puma.new(**options).tap { |puma| started_processes << puma }
    end
  end
end
