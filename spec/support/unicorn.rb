# frozen_string_literal: true

require "net/http"
require "socket"

module E2E
  # The example app (examples/unicorn) under a real unicorn master, with
  # preload_app and as many workers as asked for, on a free loopback port.
  class Unicorn < Child
    APP = File.join(ROOT, "examples", "unicorn")

    attr_reader :port

    def initialize(workers: 1, env: {})
      @port = E2E.free_port
      @workers = workers
      super("unicorn", "-I", LIB, "-E", "none", "-c", File.join(APP, "unicorn.conf.rb"), File.join(APP, "config.ru"),
            env: env.merge("UNICORN_WORKERS" => workers.to_s, "UNICORN_LISTEN" => "127.0.0.1:#{@port}"))
      workers.times { |index| wait_for(/worker=#{index} ready/) }
    end

    # PIDs of the workers, by number, as unicorn logged them.
    def worker_pids
      @workers.times.map { |index| Integer(output[/worker=#{index} spawned pid=(\d+)/, 1]) }
    end

    def get(path)
      Net::HTTP.start("127.0.0.1", @port, open_timeout: 5, read_timeout: 10) do |http|
        response = http.get(path)
        raise "GET #{path}: #{response.code} #{response.body}" unless response.code == "200"

        response.body
      end
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
      Unicorn.new(**options).tap { |unicorn| started_processes << unicorn }
    end
  end
end
