# frozen_string_literal: true

$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "static_tracing"
require "tmpdir"
Dir[File.join(__dir__, "support", "*.rb")].each { |file| require file }

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
