# frozen_string_literal: true

require "open3"
require "rbconfig"
require "rubygems/package"

# The gem as users get it: built from the gemspec, installed from the .gem
# file with no access to rubygems.org (and cargo offline, from the crates
# this checkout's build already fetched), then used from another directory.
RSpec.describe "Installing static_tracing from a .gem" do
  root = File.expand_path("..", __dir__)

  def run(env, *command, chdir:)
    output, status = Open3.capture2e(env, *command, chdir:)
    expect(status).to be_success, "#{command.join(" ")} failed:\n#{output}"
    output
  end

  it "builds, installs offline into a clean GEM_HOME, and works from anywhere" do
    Dir.mktmpdir("static_tracing-package") do |dir|
      home = File.join(dir, "home")
      env = {
        "GEM_HOME" => home, "GEM_PATH" => home, "RUBYLIB" => nil, "RUBYOPT" => nil,
        "BUNDLE_GEMFILE" => nil, "CARGO_TARGET_DIR" => nil, "CARGO_NET_OFFLINE" => "true",
        # What is checked is the install, not the optimizer: the release
        # profile without its whole-program optimization builds in a
        # fraction of the time.
        "CARGO_PROFILE_RELEASE_LTO" => "false", "CARGO_PROFILE_RELEASE_CODEGEN_UNITS" => "16",
        "CARGO_PROFILE_RELEASE_OPT_LEVEL" => "0", "CARGO_PROFILE_RELEASE_DEBUG" => "0"
      }
      gem_file = File.join(dir, "static_tracing.gem")
      run(env, RbConfig.ruby, "-S", "gem", "build", "static_tracing.gemspec", "-o", gem_file, chdir: root)

      files = Gem::Package.new(gem_file).contents
      expect(files).to include("lib/static_tracing.rb", "exe/static-tracing", "ext/static_tracing/extconf.rb",
                               "Cargo.lock", "ext/stapsdt/src/elf.rs", "ext/trace_report/src/lib.rs",
                               "ext/trace_metrics/src/lib.rs", "ext/ruby_glue/src/lib.rs",
                               "ext/trace_reader/src/lib.rs", "README.md", "ARCHITECTURE.md", "docs/api.md",
                               "LICENSE")
      expect(files.grep(%r{\A(spec|target|tmp|bench)/})).to be_empty

      run(env, RbConfig.ruby, "-S", "gem", "install", "--local", "--no-document", gem_file, chdir: dir)
      installed = Dir[File.join(home, "gems", "static_tracing-*")].first
      expect(Dir[File.join(installed, "ext", "static_tracing", "target")]).to be_empty, "build output left behind"

      script = <<~RUBY
        require "static_tracing"
        provider = StaticTracing::Provider.register(:packaged)
        provider.add_tracepoint(:hello, Integer)
        provider.load
        puts StaticTracing::VERSION, $LOADED_FEATURES.grep(/static_tracing\\.so/), provider.path
      RUBY
      version, extension, stub = run(env, RbConfig.ruby, "-e", script, chdir: dir).lines.map(&:chomp)
      expect(version).to eq(StaticTracing::VERSION)
      expect(extension).to start_with(home)
      expect(File.basename(stub)).to match(/\Apackaged-\d+-\d+-\d+\.so\z/)

      help = run(env, File.join(home, "bin", "static-tracing"), "--help", chdir: dir)
      expect(help).to include("Usage: static-tracing COMMAND")

      # The command's reader, a library of its own, installed beside the
      # extension and loaded from there.
      trace = File.join(dir, "empty.trace")
      File.binwrite(trace, TraceImage.new(pid: 4321).bytes(probes: [], records: []))
      report = run(env, File.join(home, "bin", "static-tracing"), "report", trace, chdir: dir)
      expect(report).to start_with("Read 1 file: process 4321, 0 records; none lost.")
    end
  end
end
