# frozen_string_literal: true

require_relative "lib/static_tracing/version"

Gem::Specification.new do |spec|
  spec.name = "static_tracing"
  spec.version = StaticTracing::VERSION
  spec.summary = "USDT probes defined at run time by Ruby code, for bpftrace, bcc and perf"
  spec.description = <<~DESC
    static_tracing lets a running Ruby process create USDT (SystemTap SDT) probes at run time,
    so bpftrace -p PID, bcc and perf can attach to them: per-method latency histograms and custom
    events out of a production process, with no restart and next to no cost while nobody traces.
  DESC
  spec.license = "MIT"
  spec.authors = ["static_tracing developers"]
  spec.required_ruby_version = ">= 3.1"
  spec.metadata["rubygems_mfa_required"] = "true"

  spec.files = Dir[
    "README.md", "ARCHITECTURE.md", "docs/*.md", "LICENSE", "Cargo.toml", "Cargo.lock",
    "lib/**/*.rb", "exe/*",
    "ext/static_tracing/{Cargo.toml,extconf.rb}", "ext/static_tracing/src/**/*.rs",
    "ext/stapsdt/Cargo.toml", "ext/stapsdt/src/**/*.rs",
    "ext/trace_report/Cargo.toml", "ext/trace_report/src/**/*.rs",
    "ext/trace_metrics/Cargo.toml", "ext/trace_metrics/src/**/*.rs",
    "ext/ruby_glue/Cargo.toml", "ext/ruby_glue/src/**/*.rs",
    "ext/trace_reader/Cargo.toml", "ext/trace_reader/src/**/*.rs"
  ]
  spec.bindir = "exe"
  spec.executables = ["static-tracing"]
  spec.require_paths = ["lib"]
  spec.extensions = ["ext/static_tracing/extconf.rb"]
end
