# frozen_string_literal: true

require "fileutils"

# StaticTracing::NativeLibrary in the precompiled gem's layout (one
# directory of libraries per Ruby, lib/static_tracing/3.1/...), in a copy of
# this checkout's lib/ arranged so: it loads the running Ruby's libraries,
# and says what to do where it has none, or where they do not load.
# spec/platform_gem_spec.rb installs the real gem.
RSpec.describe StaticTracing::NativeLibrary, :subprocess do
  abi = RUBY_VERSION[/\A\d+\.\d+/]
  # Rubies that are not this one, whatever the lane runs.
  others = %w[2.7 9.9]

  around do |example|
    Dir.mktmpdir("static_tracing-native-library") do |dir|
      @lib = File.join(dir, "lib")
      FileUtils.cp_r(E2E::LIB, dir)
      @libraries = Dir[File.join(E2E::LIB, "static_tracing", "*.so")]
      FileUtils.rm(Dir[File.join(@lib, "static_tracing", "*.so")])
      example.run
    end
  end

  # A directory of libraries for Ruby +version+: this checkout's, or files
  # of +content+.
  def built_for(version, content: nil)
    directory = FileUtils.mkdir_p(File.join(@lib, "static_tracing", version)).first
    @libraries.each do |library|
      target = File.join(directory, File.basename(library))
      content ? File.write(target, content) : FileUtils.cp(library, target)
    end
  end

  # Runs +script+ in a new Ruby with the arranged lib/ on its load path;
  # returns what it printed and its status.
  def run_ruby(script)
    process = E2E::Child.new(RbConfig.ruby, "-I", @lib, "-e", script)
    started_processes << process
    [process.wait(timeout: 20), process.output]
  end

  it "loads the extension and the command's reader built for the running Ruby, beside those of other Rubies" do
    others.each { |version| built_for(version, content: "built for Ruby #{version}") }
    built_for(abi)
    status, output = run_ruby(<<~RUBY)
      require "static_tracing"
      require "static_tracing/cli"
      StaticTracing::CLI::TraceFile.reader
      puts StaticTracing::NativeLibrary.built_for.inspect, $LOADED_FEATURES.grep(/\\.so\\z/).grep(/static_tracing/)
    RUBY
    expect(status).to be_success, output
    expect(output.lines.map(&:chomp)).to eq([(others + [abi]).sort_by { |v| v.split(".").map(&:to_i) }.inspect,
                                             File.join(@lib, "static_tracing", abi, "static_tracing.so"),
                                             File.join(@lib, "static_tracing", abi, "trace_reader.so")])
  end

  it "refuses a Ruby it has no libraries for, naming the Rubies it has and the source gem" do
    others.each { |version| built_for(version) }
    status, output = run_ruby(<<~RUBY)
      $stdout.sync = true
      begin
        require "static_tracing"
      rescue LoadError => e
        puts "\#{e.class}: \#{e.message}"
      end
      require "static_tracing/cli"
      StaticTracing::CLI::TraceFile.reader
    RUBY
    expect(status).not_to be_success
    message = "static_tracing #{StaticTracing::VERSION}, precompiled, has native libraries for Ruby 2.7 and 9.9, " \
              "none for this Ruby (#{RUBY_VERSION}): the source gem builds them for the Ruby it is installed with, " \
              "using Rust's cargo: gem install static_tracing --platform ruby (in a Gemfile: force_ruby_platform: true)"
    expect(output).to start_with("LoadError: #{message}\n")
    # The command's reader says the same.
    expect(output.lines.drop(1).join).to include("#{message} (LoadError)")
    expect(output).not_to include("cannot open shared object")
  end

  it "says which library did not load, why, and what to install instead, when the running Ruby's does not load" do
    built_for(abi, content: "not a shared object\n" * 512)
    status, output = run_ruby('require "static_tracing"')
    expect(status).not_to be_success
    expect(output).to include("static_tracing: the precompiled static_tracing.so for Ruby #{abi} does not load here " \
                              "(#{File.join(@lib, "static_tracing", abi, "static_tracing.so")}")
    expect(output).to include("invalid ELF header")
    expect(output).to include("The precompiled gem needs the glibc that the README's Install section names; " \
                              "the source gem builds them")
  end
end
