# frozen_string_literal: true

require "static_tracing/process_start"

RSpec.describe StaticTracing::ProcessStart do
  # /proc/PID/stat with +start+ as field 22 and +comm+ as field 2.
  def stat(comm, start)
    "4242 (#{comm}) S #{Array.new(18, "1").join(" ")} #{start} #{Array.new(30, "0").join(" ")}\n"
  end

  it "reads field 22" do
    expect(described_class.parse(stat("ruby", 930_515))).to eq(930_515)
  end

  it "counts fields from the last parenthesis, whatever the command name holds" do
    ["unicorn worker", "a) 1 2 3", "((", ")", ") ) )"].each do |comm|
      expect(described_class.parse(stat(comm, 77))).to eq(77), "command name #{comm.inspect}"
    end
  end

  it "agrees with this process's own /proc/self/stat" do
    skip "no /proc here" unless File.exist?("/proc/self/stat")

    fields = File.read("/proc/self/stat").rpartition(")").last.split
    expect(described_class.parse(File.read("/proc/self/stat"))).to eq(Integer(fields[19])).and be_positive
  end
end
