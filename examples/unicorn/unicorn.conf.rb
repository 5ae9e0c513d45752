# frozen_string_literal: true

# unicorn -c examples/unicorn/unicorn.conf.rb examples/unicorn/config.ru
# The app (and the gem) is loaded once in the master and the workers are
# forked from it, as in most production set-ups: each worker is traced on
# its own, by its own PID.
worker_processes Integer(ENV.fetch("UNICORN_WORKERS", "1"))
preload_app true
listen ENV.fetch("UNICORN_LISTEN", "127.0.0.1:8080")
timeout 30
pid ENV["UNICORN_PID"] if ENV["UNICORN_PID"]
