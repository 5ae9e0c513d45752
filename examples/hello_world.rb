# frozen_string_literal: true

# The smallest use of the gem: one provider, one probe, fired five times a
# second. Run it, then attach to it:
#
#   ruby -Ilib examples/hello_world.rb &
#   sudo bpftrace -p $! -e 'usdt:*:hello_world:greet { printf("%d %s\n", arg0, str(arg1)); }'

require "static_tracing"

provider = StaticTracing::Provider.register(:hello_world)
greet = provider.add_tracepoint(:greet, Integer, String)
provider.load
$stdout.puts "pid #{Process.pid}: usdt:#{provider.path}:hello_world:greet"
$stdout.flush

count = 0
loop do
  count += 1
  greet.fire(count, "hello from Ruby #{RUBY_VERSION}")
  sleep 0.2
end
