# frozen_string_literal: true

$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "static_tracing"
require "tmpdir"
Dir[File.join(__dir__, "support", "*.rb")].each { |file| require file }

# The matrix lane's YJIT suite runs every Ruby with --yjit: a Ruby that
# quietly ran without it (built without YJIT, the option dropped on the
# way) would pass for one that has it.
if ENV["STATIC_TRACING_REQUIRE_YJIT"] == "1" && !YJIT.enabled?
  abort "spec: STATIC_TRACING_REQUIRE_YJIT=1, but YJIT is off: #{RUBY_DESCRIPTION}, RUBYOPT=#{ENV["RUBYOPT"].inspect}"
end

RSpec.configure do |config|
  config.disable_monkey_patching!
  config.expect_with(:rspec) { |c| c.syntax = :expect }
  config.order = :random
  Kernel.srand config.seed

  # What the matrix lane leaves out, and why: spec/support/lanes.rb.
  Lanes.tag(config)

  # End-to-end examples attach the real bpftrace to real processes.
  config.include E2E::Helpers, :e2e
  config.before(:each, :e2e) { require_tracing! }
  config.after(:each, :e2e) { stop_started_processes }

  # Examples of code YJIT compiled: skipped where the Ruby has no YJIT.
  config.include YJIT::Helpers, :yjit
  config.before(:each, :yjit) { require_yjit! }

  # Examples that drive child processes without attaching a tracer to them.
  config.include E2E::Helpers, :subprocess
  config.after(:each, :subprocess) { stop_started_processes }

  # Examples of static_tracing/rails in this process: Rails loaded first.
  config.include E2E::Helpers, :rails
  config.before(:each, :rails) do
    problem = E2E::RailsApp.load_problem
    cannot_run!(problem, component: :rails) if problem
  end

  # Providers registered by an example do not leak into the next one, nor
  # do the methods it traced into them (its classes may not be collected yet).
  config.after do
    StaticTracing.providers.to_a.each(&:unregister)
    StaticTracing::MethodTracing.forget_unregistered
  end
end
