# frozen_string_literal: true

# puma -C examples/puma/puma.rb examples/puma/config.ru
# Cluster mode: the app (and the gem) is loaded once in the master
# (preload_app!) and the workers are forked from it; each worker is traced
# on its own, by its own PID. The gem needs no hook here (no on_worker_boot,
# no before_fork): it sees every fork by itself and starts the worker's own
# signal thread, attach watcher and state file.
workers Integer(ENV.fetch("PUMA_WORKERS", "2"))
threads 4, 4
preload_app!
bind "tcp://#{ENV.fetch("PUMA_LISTEN", "127.0.0.1:9292")}"
environment ENV.fetch("RACK_ENV", "production")
pidfile ENV["PUMA_PID"] if ENV["PUMA_PID"]
