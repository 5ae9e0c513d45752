# frozen_string_literal: true

# `rake soak` (ruby soak/churn.rb): the churn scenarios of
# spec/hardening/churn_spec.rb in their long form, as root with bpftrace,
# gdb and perf. spec/support/churn.rb says what each scenario does and why
# each bound is what it is. Prints a table of what was measured, and
# progress on stderr; exits 1 when a bound is broken or a result is wrong,
# 2 when it cannot run here.
#
#   SOAK_CYCLES=10000          attach/detach cycles through the semaphores
#   SOAK_BPFTRACE_CYCLES=1000  attach/detach cycles of bpftrace meanwhile (four tracers at once)
#   SOAK_TWO_TRACERS=20        cycles of two tracers on one probe
#   SOAK_RELOADS=1000          reloads of a growing provider
#   SOAK_DLADDR_EVERY=1        dladdr checked after every Nth reload
#   SOAK_FORK_CYCLES=100       bpftrace cycles while the process forks a child every 10 ms
#   SOAK_ATTACH_DELAY=0.004    the processes' attach_delay (seconds)
#   SOAK_ONLY=attach,two,reload,fork   these scenarios only

$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "static_tracing"
require_relative "../spec/support/churn"

# The long form of the churn scenarios: see the header.
module Soak
  # Scenario key => its class, and its counts => the variable setting each.
  SCENARIOS = {
    "attach" => [Churn::AttachChurn, { semaphore_cycles: "SOAK_CYCLES", bpftrace_cycles: "SOAK_BPFTRACE_CYCLES" }],
    "two" => [Churn::TwoTracers, { cycles: "SOAK_TWO_TRACERS" }],
    "reload" => [Churn::ReloadChurn, { reloads: "SOAK_RELOADS", every: "SOAK_DLADDR_EVERY" }],
    "fork" => [Churn::ForkChurn, { tracer_cycles: "SOAK_FORK_CYCLES" }]
  }.freeze

  module_function

  def run
    keys = only
    reason = E2E.unavailable_reason || (missing_command if keys.include?("reload"))
    abort_with(2, "cannot run here: #{reason}") if reason
    plan = SCENARIOS.slice(*keys).to_h { |key, (scenario, variables)| [scenario, counts(key, variables)] }
    delay = attach_delay
    report = Churn::Report.new
    Dir.mktmpdir("static_tracing-soak") do |root|
      plan.each { |scenario, counts| run_scenario(scenario, counts, report, root, delay) }
    end
    puts report
    exit(report.ok? ? 0 : 1)
  end

  def run_scenario(scenario, counts, report, root, delay)
    warn("soak: #{scenario::NAME}: #{counts.map { |name, value| "#{name} #{value}" }.join(", ")}")
    processes = Churn::Processes.new
    scenario.new(report, processes:, root:, attach_delay: delay).run(**counts)
  rescue StandardError => e
    report.failed(scenario::NAME, "stopped: #{e.class}: #{e.message}")
  ensure
    processes.kill_all
  end

  def counts(key, variables)
    variables.to_h do |count, variable|
      text = ENV.fetch(variable, Churn::LONG.fetch(key.to_sym).fetch(count).to_s)
      value = Integer(text, exception: false)
      abort_with(2, "#{variable} must be a positive integer, not #{text.inspect}") unless value&.positive?
      [count, value]
    end
  end

  def attach_delay
    text = ENV.fetch("SOAK_ATTACH_DELAY", Churn::ATTACH_DELAY.to_s)
    value = Float(text, exception: false)
    abort_with(2, "SOAK_ATTACH_DELAY must be 0.002 to 60 (seconds), not #{text.inspect}") unless
      value&.between?(0.002, 60)
    value
  end

  def only
    keys = ENV.fetch("SOAK_ONLY", SCENARIOS.keys.join(",")).split(",").map(&:strip)
    unknown = keys - SCENARIOS.keys
    abort_with(2, "SOAK_ONLY: unknown #{unknown.join(", ")} (known: #{SCENARIOS.keys.join(", ")})") unless
      unknown.empty?
    keys
  end

  # The reload scenario asks gdb and perf.
  def missing_command
    missing = %w[gdb perf].reject { |command| E2E.which(command) }
    "#{missing.join(" and ")} not installed" unless missing.empty?
  end

  def abort_with(status, message)
    warn("soak: #{message}")
    exit(status)
  end
end

Soak.run if $PROGRAM_NAME == __FILE__
