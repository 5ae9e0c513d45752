# frozen_string_literal: true

# `rake bench`: prints one table to stdout and writes the same data to
# tmp/bench.json. Progress goes to stderr so stdout stays the table. The
# default run (every group) takes about two minutes, one of them the
# macro group; attached measurements need root and a working bpftrace,
# and are reported as skipped, with the reason, otherwise.
#
#   BENCH_ONLY=calls,load   run only these groups (keys: see GROUPS)
#   BENCH_ROUNDS=3          rounds per group instead of each group's own
#   BENCH_JSON=path         where the JSON goes
#   BENCH_CLOCK=wall        time calls and loads by the monotonic clock, not thread CPU time
#   BENCH_MACRO_SECONDS=3   seconds of wrk per configuration and round
#   BPFTRACE=path           the bpftrace to attach with
#
# Sources, binaries and logs of the processes it starts go to tmp/bench/.

$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "static_tracing"
require_relative "harness"
require_relative "samples"
require_relative "processes"
require_relative "fixtures"
require_relative "calls"
require_relative "method_sections"
require_relative "methods"
require_relative "floor"
require_relative "load"
require_relative "load_memory"
require_relative "attach"
require_relative "allocations"
require_relative "unicorn"
require_relative "macro_section"
require_relative "macro"
require_relative "targets"

module Bench
  CALL_DESCRIPTIONS = {
    "cpu" => "calls and loads timed in thread CPU time (BENCH_CLOCK=wall: monotonic clock); macro: wall time",
    "wall" => "calls and loads timed by the monotonic clock (BENCH_CLOCK=wall)"
  }.freeze

  # A group is a class with a KEY, built with keyword options and
  # answering #run with its Sections; new groups are added to this list.
  # The targets table is made last, from whatever the groups measured.
  GROUPS = [Calls, Methods, Floor, Load, Attach, Allocations, Macro].freeze

  module_function

  def main
    # Tracing is switched by the groups that measure it, never by the
    # environment or a signal in the middle of another group.
    StaticTracing::Configuration.mode = StaticTracing::Configuration::Modes::OFF
    report = Report.new("static_tracing benchmark", machine)
    total = time_ns do
      selected_groups.each do |group|
        warn "bench: #{group::KEY}..."
        elapsed = time_ns { report.add(group.new(**options).run) }
        warn format("bench: #{group::KEY} took %.1f s", elapsed / 1e9)
      end
    end
    report.add(Targets.new(report).section)
    report.machine_line(:load_average_end, load_average)
    report.machine_line(:run_seconds, (total / 1e9).round(1))
    report.render
    path = ENV.fetch("BENCH_JSON", File.expand_path("../tmp/bench.json", __dir__))
    report.write_json(path)
    puts "\nJSON: #{path}"
  end

  def machine
    machine_info.merge(static_tracing: "#{StaticTracing::VERSION} (#{commit})",
                       usdt_supported: StaticTracing.supported?,
                       call_clock: CALL_DESCRIPTIONS.fetch(call_clock_name))
  end

  def commit
    IO.popen(%w[git describe --always --dirty], chdir: __dir__, err: File::NULL, &:read).strip
  rescue SystemCallError
    "no git"
  end

  def selected_groups
    only = ENV.fetch("BENCH_ONLY", nil)
    return GROUPS unless only

    keys = only.split(",").map(&:strip)
    known = GROUPS.map { |group| group::KEY.to_s }
    unknown = keys - known
    abort "bench: unknown group(s) #{unknown.join(", ")}; known: #{known.join(", ")}" if unknown.any?
    GROUPS.select { |group| keys.include?(group::KEY.to_s) }
  end

  def options
    rounds = ENV.fetch("BENCH_ROUNDS", nil)
    rounds ? { rounds: Integer(rounds) } : {}
  end
end

Bench.main
