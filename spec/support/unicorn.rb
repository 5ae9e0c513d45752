# frozen_string_literal: true

require "open3"
require "rbconfig"
require "socket"
require_relative "web_server"

module E2E
  # What the specs and the benchmark both know of the example app
  # (examples/unicorn) under unicorn: how it starts.
  module UnicornApp
    APP = File.join(ROOT, "examples", "unicorn")

    # The unicorn command line serving +config_ru+, and its environment:
    # unicorn's script run by this Ruby, whatever Ruby its #! line names,
    # since the extension in LIB is built for this one. +root+: where the
    # gem's lib/ and examples/ are (E2E.portable_root for another user).
    def self.command(config_ru, port:, workers:, root: ROOT)
      [{ "UNICORN_LISTEN" => "127.0.0.1:#{port}", "UNICORN_WORKERS" => workers.to_s },
       RbConfig.ruby, executable || "unicorn", "-I", File.join(root, "lib"), "-E", "none", "-c",
       File.join(root, "examples", "unicorn", "unicorn.conf.rb"), config_ru]
    end

    # unicorn's script on PATH, or nil.
    def self.executable
      E2E.which("unicorn")
    end

    # Why unicorn cannot serve the app under this Ruby, or nil. Debian, for
    # one, builds unicorn's C extensions for its default Ruby only.
    def self.unavailable_reason
      return @unavailable_reason if defined?(@unavailable_reason)

      @unavailable_reason =
        if executable.nil? then "unicorn is not installed"
        else
          out, status = Open3.capture2e(RbConfig.ruby, "-e", 'require "unicorn"')
          "unicorn cannot be loaded by Ruby #{RUBY_VERSION}: #{out.lines.first&.strip}" unless status.success?
        end
    end
  end

  # The example app under a real unicorn master, with preload_app and as
  # many workers as asked for, on a free loopback port. +root+ and
  # +prefix+ run it from another copy of the gem, under another command:
  # root: E2E.portable_root, prefix: E2E::Unprivileged.command as another user.
  # +config_ru+: a rackup file of the spec's own instead of the example's.
  class Unicorn < Child
    include UnicornApp
    include WebServer

    def initialize(workers: 1, env: {}, root: ROOT, prefix: [], config_ru: nil)
      @port = E2E.free_port
      @workers = workers
      config_ru ||= File.join(root, "examples", "unicorn", "config.ru")
      unicorn_env, *command = UnicornApp.command(config_ru, port: @port, workers:, root:)
      super(*prefix, *command, env: env.merge(unicorn_env), chdir: root)
      workers.times { |index| wait_for(/worker=#{index} ready/) }
    end

    # PIDs of the workers, by number, as unicorn logged them.
    def worker_pids
      @workers.times.map { |index| Integer(output[/worker=#{index} spawned pid=(\d+)/, 1]) }
    end

    # The tracing state a worker reports (GET /tracing, answered by one worker).
    def tracing_state
      get("/tracing").scan(/(\w+)=(\w+)/).to_h
    end

    def name
      "unicorn master #{pid}"
    end
  end

  module Helpers
    def start_unicorn(**options)
      reason = UnicornApp.unavailable_reason
      cannot_run!(reason, component: :unicorn) if reason
      Unicorn.new(**options).tap { |unicorn| started_processes << unicorn }
    end
  end
end
