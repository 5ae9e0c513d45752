# frozen_string_literal: true

require "fileutils"
require "rbconfig"
require "rubygems/package"

# rake native:gem: the precompiled gem, installed with no compiler, cargo or
# Ruby headers. It carries the two native libraries for each Ruby it is
# built for, in lib/static_tracing/<ABI>/ (NativeLibrary loads the running
# Ruby's): the host's Ruby (rake compile) and the matrix lane's (bin/matrix
# --compile, in the matrix root, whose builds it reuses), and says which
# Rubies those are in its required_ruby_version. The source gem
# (gem build static_tracing.gemspec) is unchanged: it builds them at
# install, for any other Ruby or system.
#
# The libraries are packed without their debug information (objcopy
# --strip-debug), three quarters of their size, which every install would
# download: they keep their symbols, by which perf and gdb name functions.
module NativeGem
  PLATFORM = "x86_64-linux"
  # Ruby series that ended with no build of the gem's own: their last
  # release. A gem's required_ruby_version is a list of conditions that all
  # hold, so leaving a series out in the middle is said release by release.
  ENDED_SERIES = { "3.2" => 11 }.freeze # 3.2.11 (March 2026) was the last 3.2

  class << self
    # What the gem requires of the Ruby, to serve the series of +abis+
    # ("3.1", "3.3", ...) and those only.
    def required_ruby_version(abis)
      series = abis.map { |abi| Gem::Version.new(abi) }.sort
      first = series.first.segments
      last = series.last.segments
      raise ArgumentError, "Rubies #{abis.join(", ")} span more than one major version" if first[0] != last[0]

      left_out = (first[1]..last[1]).map { |minor| "#{first[0]}.#{minor}" } - series.map(&:to_s)
      [">= #{series.first}", "< #{last[0]}.#{last[1] + 1}.dev", *left_out.flat_map { |each| releases_of(each) }]
    end

    # The gem's specification: the source gem's, with the libraries of
    # +built+ ({ abi => directory }) instead of the sources and the build.
    def specification(source, built)
      source.dup.tap do |spec|
        spec.platform = PLATFORM
        spec.extensions = []
        spec.required_ruby_version = required_ruby_version(built.keys)
        # LIBRARIES: the Rakefile's, the two that rake compile builds.
        spec.files = source.files.reject { |file| file.start_with?("ext/", "Cargo.") } +
                     built.keys.product(LIBRARIES).map { |abi, library| "lib/static_tracing/#{abi}/#{library}" }
      end
    end

    # Writes the gem into +directory+ from +root+'s files and the libraries
    # of +built+; returns its path.
    def build(root, built, directory)
      source = Dir.chdir(root) { Gem::Specification.load("static_tracing.gemspec") }
      spec = specification(source, built)
      staging = File.join(root, "tmp", "native_gem")
      FileUtils.rm_rf(staging)
      spec.files.each do |file|
        library = file.match(%r{\Alib/static_tracing/([\d.]+)/([^/]+\.so)\z}) { |m| File.join(built.fetch(m[1]), m[2]) }
        FileUtils.mkdir_p(File.dirname(File.join(staging, file)))
        if library
          system("objcopy", "--strip-debug", library, File.join(staging, file), exception: true)
        else
          FileUtils.cp(File.join(root, file), File.join(staging, file), preserve: true)
        end
      end
      FileUtils.mkdir_p(directory)
      built_gem = Dir.chdir(staging) { File.join(staging, Gem::Package.build(spec)) }
      File.join(directory, File.basename(built_gem)).tap { |gem| FileUtils.mv(built_gem, gem) }
    end

    private

    def releases_of(series)
      last = ENDED_SERIES.fetch(series) do
        raise ArgumentError, "Ruby #{series} would be left out of the gem's Rubies, and its releases are not known: " \
                             "build the gem for it too, or list it in ENDED_SERIES once it has ended"
      end
      (0..last).map { |teeny| "!= #{series}.#{teeny}" }
    end
  end
end

namespace :native do
  desc "The precompiled gem, pkg/static_tracing-VERSION-#{NativeGem::PLATFORM}.gem: the native libraries built for " \
       "this Ruby and for the matrix lane's (root: bin/matrix --compile), installed with no toolchain"
  task gem: :compile do
    unless RbConfig::CONFIG["host_cpu"] == "x86_64" && RbConfig::CONFIG["host_os"].start_with?("linux")
      abort "native:gem builds a #{NativeGem::PLATFORM} gem, on #{NativeGem::PLATFORM} only: " \
            "this Ruby is #{RbConfig::CONFIG["arch"]}"
    end
    built = { RUBY_VERSION[/\A\d+\.\d+/] => File.join(ROOT, "lib", "static_tracing") }
    matrix = IO.popen([File.join(ROOT, "bin", "matrix"), "--compile"], &:read)
    abort "native:gem: bin/matrix --compile failed: see above" unless Process.last_status.success?
    matrix.lines.each do |line|
      abi, directory = line.split(" ", 2).map(&:strip)
      built[abi] = directory
    end
    gem = NativeGem.build(ROOT, built, File.join(ROOT, "pkg"))
    puts "native:gem: #{gem} (#{(File.size(gem) / 1024.0 / 1024).round(1)} MB), for Ruby #{built.keys.join(", ")}"
  end
end
