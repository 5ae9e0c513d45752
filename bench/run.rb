# frozen_string_literal: true

# `rake bench`: prints one table to stdout and writes the same data to
# tmp/bench.json. Progress goes to stderr so stdout stays the table.
#
#   BENCH_ONLY=calls,load   run only these groups (keys: see GROUPS)
#   BENCH_ROUNDS=3          rounds per group instead of each group's own
#   BENCH_JSON=path         where the JSON goes

$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "static_tracing"
require_relative "harness"
require_relative "fixtures"
require_relative "calls"
require_relative "load"
require_relative "allocations"

module Bench
  # A group is a class with a KEY, built with keyword options and
  # answering #run with its Sections; new groups are added to this list.
  GROUPS = [Calls, Load, Allocations].freeze

  module_function

  def main
    report = Report.new("static_tracing benchmark", machine)
    selected_groups.each do |group|
      warn "bench: #{group::KEY}..."
      elapsed = time_ns { report.add(group.new(**options).run) }
      warn format("bench: #{group::KEY} took %.1f s", elapsed / 1e9)
    end
    report.machine_line(:load_average_end, load_average)
    report.render
    path = ENV.fetch("BENCH_JSON", File.expand_path("../tmp/bench.json", __dir__))
    report.write_json(path)
    puts "\nJSON: #{path}"
  end

  def machine
    machine_info.merge(static_tracing: "#{StaticTracing::VERSION} (#{commit})",
                       usdt_supported: StaticTracing.supported?)
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
