# frozen_string_literal: true

require "open3"
require "rbconfig"
require_relative "../bench/support"

# The benchmark loads nothing from spec/, so the few rules it shares with
# spec/support are copied into bench/support.rb. These examples hold each
# copy equal to the specs' own.
RSpec.describe "Contracts between bench/support.rb and spec/support" do
  it "starts the example app under unicorn with the command line the specs use" do
    config = File.join(E2E::UnicornApp::APP, "config.ru")
    expect(Bench::Unicorn.command(config, port: 4242))
      .to eq(E2E::UnicornApp.command(config, port: 4242, workers: 1))
  end

  it "attaches with the bpftrace the specs use, from BPFTRACE or the usual paths" do
    expect(Bench::Bpftrace.path).to eq(E2E.bpftrace)
    original = ENV.fetch("BPFTRACE", nil)
    ENV["BPFTRACE"] = "/opt/bench-contract/bpftrace"
    expect(Bench::Bpftrace.path).to eq(E2E.bpftrace).and eq("/opt/bench-contract/bpftrace")
  ensure
    ENV["BPFTRACE"] = original
  end

  it "skips attached rows for the same reason the specs skip tracing, or for none" do
    expect(Bench::Bpftrace.unavailable_reason).to eq(E2E.unavailable_reason)
  end

  it "loads nothing from spec/ when it loads every group", :subprocess do
    script = 'require "./bench/harness"; Bench.groups; puts $LOADED_FEATURES.grep(%r{/spec/})'
    out, status = Open3.capture2e(RbConfig.ruby, "-e", script, chdir: File.expand_path("..", __dir__))
    expect([status.success?, out]).to eq([true, ""])
  end
end
