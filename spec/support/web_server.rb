# frozen_string_literal: true

require "net/http"

module E2E
  # Asking a web server the specs started (the example apps under unicorn
  # and puma) for pages. Includers set @port. The example apps end each
  # answer with the PID of the worker that served it ("served by PID").
  module WebServer
    attr_reader :port

    # The body of GET +path+; raises unless the answer is a 200.
    def get(path)
      Net::HTTP.start("127.0.0.1", @port, open_timeout: 5, read_timeout: 10) do |http|
        response = http.get(path)
        raise "GET #{path}: #{response.code} #{response.body}" unless response.code == "200"

        response.body
      end
    end

    # Serves +path+ in rounds of +batch+ concurrent requests (#serve) until
    # the block, given the PIDs so far, is satisfied, or +most+ requests
    # were sent. Returns the PIDs of the workers that served each request.
    def serve_until(path, batch: 40, most: 800)
      served = serve(path, requests: batch)
      served += serve(path, requests: batch) until yield(served) || served.size >= most
      served
    end

    # GETs +path+ +requests+ times from +clients+ threads at once, each
    # request on a connection of its own, so that whichever worker is free
    # accepts it (one client alone may be served by one worker every time:
    # which worker accepts is the server's and the kernel's choice). Returns
    # the PID of the worker that served each request.
    def serve(path, requests:, clients: 8)
      paths = Queue.new
      requests.times { paths << path }
      paths.close
      clients.times.map do
        Thread.new do
          served = []
          while (next_path = paths.pop)
            served << Integer(get(next_path)[/served by (\d+)$/, 1])
          end
          served
        end
      end.flat_map(&:value)
    end
  end
end
