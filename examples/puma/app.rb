# frozen_string_literal: true

require "static_tracing"

# A controller whose actions are traced: usdt:*:pages_controller:<action>,
# arg0 = latency in nanoseconds. Each answer names the worker that served
# it, to see how puma spreads requests over its workers.
class PagesController
  include StaticTracing::LatencyTracer

  def home
    "served by #{Process.pid}\n"
  end

  # About 5 ms: long enough that concurrent requests overlap in a worker's
  # threads and spill over to the other workers.
  def slow
    sleep 0.005
    "slow, served by #{Process.pid}\n"
  end

  def tracing
    wrapped = PagesController.instance_method(:home).owner != PagesController
    "pid=#{Process.pid} enabled=#{StaticTracing.enabled?} wrapped=#{wrapped} " \
      "mode=#{StaticTracing::Configuration.mode}\n"
  end
end

# A small Rack application: one route per action.
class PagesApp
  ROUTES = { "/" => :home, "/slow" => :slow, "/tracing" => :tracing }.freeze

  def call(env)
    action = ROUTES[env["PATH_INFO"]]
    return [404, { "content-type" => "text/plain" }, ["not found\n"]] unless action

    [200, { "content-type" => "text/plain" }, [PagesController.new.public_send(action)]]
  end
end
