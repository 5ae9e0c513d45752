# frozen_string_literal: true

require "static_tracing"

# A controller whose actions are traced: usdt:*:my_controller:<action>,
# arg0 = latency in nanoseconds. Answers name the worker that served them.
# In the default SIGNAL mode nothing is wrapped or loaded until the worker
# receives SIGTRAP.
class MyController
  include StaticTracing::LatencyTracer

  def index
    "served by #{Process.pid}\n"
  end

  def show(id)
    "item #{id}\n"
  end

  # About 5 ms, to see in a latency histogram.
  def slow
    sleep 0.005
    "slow, served by #{Process.pid}\n"
  end

  def tracing
    wrapped = MyController.instance_method(:index).owner != MyController
    "enabled=#{StaticTracing.enabled?} wrapped=#{wrapped} mode=#{StaticTracing::Configuration.mode}\n"
  end
end

# A small Rack application: one route per action.
class App
  ROUTES = {
    "/" => ->(controller, _) { controller.index },
    "/slow" => ->(controller, _) { controller.slow },
    "/tracing" => ->(controller, _) { controller.tracing }
  }.freeze

  def call(env)
    path = env["PATH_INFO"]
    route = ROUTES[path]
    body = if route then route.call(MyController.new, env)
           elsif (id = path[%r{\A/items/(\d+)\z}, 1]) then MyController.new.show(id.to_i)
           end
    return [404, { "content-type" => "text/plain" }, ["not found\n"]] unless body

    [200, { "content-type" => "text/plain" }, [body]]
  end
end
