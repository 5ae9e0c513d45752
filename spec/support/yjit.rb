# frozen_string_literal: true

require "open3"
require "rbconfig"

# YJIT, Ruby's JIT compiler, in this run: the matrix lane's 3.4-yjit suite
# (bin/matrix) runs every Ruby with --yjit and sets
# STATIC_TRACING_REQUIRE_YJIT=1. Elsewhere examples that need it are
# skipped with the reason: Debian builds sid's Rubies without YJIT, and
# Debian 12's Ruby 3.1 has the experimental YJIT of 3.1, which counts
# nothing the examples read (Ruby 3.3's, which Rails turns on by default,
# does: RubyVM::YJIT.runtime_stats without --yjit-stats).
module YJIT
  # What a child started for a YJIT example runs with: every method
  # compiled on its first call, so that what the example calls is the
  # compiled code from the start, not the interpreter's until it is hot.
  CHILD_OPTIONS = "--yjit --yjit-call-threshold=1"

  module_function

  # Whether YJIT compiles this process's code.
  def enabled?
    defined?(RubyVM::YJIT) && RubyVM::YJIT.respond_to?(:enabled?) && RubyVM::YJIT.enabled? == true
  end

  def required?
    ENV["STATIC_TRACING_REQUIRE_YJIT"] == "1"
  end

  # What a child of this Ruby says of its YJIT.
  PROBE = <<~RUBY
    print RubyVM::YJIT.enabled? ? RubyVM::YJIT.runtime_stats.key?(:invalidation_count) : :off
  RUBY

  # Why a child of this Ruby cannot run the examples with YJIT on, or nil
  # when it can.
  def unavailable_reason
    return @unavailable_reason if defined?(@unavailable_reason)

    out, status = Open3.capture2e({ "RUBYOPT" => CHILD_OPTIONS }, RbConfig.ruby, "-e", PROBE)
    said = out.lines.last.to_s
    @unavailable_reason =
      if !status.success? || said == "off" then "#{RUBY_DESCRIPTION} has no YJIT (#{out.strip})"
      elsif said != "true" then "#{RUBY_DESCRIPTION}'s YJIT counts no invalidations (Ruby 3.3 and later do)"
      end
  end

  # Helpers for examples tagged :yjit.
  module Helpers
    # Skips the example where this Ruby has no YJIT, or fails it when
    # STATIC_TRACING_REQUIRE_YJIT=1 says it must run.
    def require_yjit!
      reason = YJIT.unavailable_reason or return
      raise "YJIT is required (STATIC_TRACING_REQUIRE_YJIT=1) but cannot run: #{reason}" if YJIT.required?

      skip("#{reason}: the matrix lane's 3.4-yjit suite runs this")
    end
  end
end
