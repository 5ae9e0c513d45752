# frozen_string_literal: true

require "open3"
require "rbconfig"

# What `gem install` runs first: ext/static_tracing/extconf.rb, which writes
# the Makefile of a cargo build of a Linux shared object. Nowhere else is
# there anything to build, and it says so (the Ruby it runs under is made
# to look like another system's).
RSpec.describe "The extension's extconf.rb" do
  extconf = File.expand_path("../ext/static_tracing/extconf.rb", __dir__)

  def run_extconf(extconf, host_os:, arch:)
    Dir.mktmpdir("static_tracing-extconf") do |dir|
      fake = %(RbConfig::CONFIG["host_os"] = #{host_os.dump}; RbConfig::CONFIG["arch"] = #{arch.dump})
      _out, err, status = Open3.capture3(RbConfig.ruby, "-e", "#{fake}; load #{extconf.dump}", chdir: dir)
      [err, status, File.exist?(File.join(dir, "Makefile"))]
    end
  end

  others = { "macOS" => %w[darwin23.4.0 arm64-darwin23], "FreeBSD" => %w[freebsd14.1 amd64-freebsd14] }
  others.each do |system, (host_os, arch)|
    it "refuses #{system}, naming the system and Linux, and writes no Makefile" do
      err, status, makefile = run_extconf(extconf, host_os:, arch:)
      expect(status).not_to be_success
      expect(err).to include("Linux only", host_os, arch)
      expect(makefile).to be(false)
    end
  end

  it "writes the Makefile of the cargo build on Linux" do
    err, status, makefile = run_extconf(extconf, host_os: RbConfig::CONFIG["host_os"], arch: RbConfig::CONFIG["arch"])
    expect(status).to be_success, err
    expect(makefile).to be(true)
  end
end
