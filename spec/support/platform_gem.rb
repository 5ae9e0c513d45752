# frozen_string_literal: true

require "fileutils"
require "open3"
require "rbconfig"
require "tmpdir"

module E2E
  # The precompiled gem (rake native:gem) for spec/platform_gem_spec.rb,
  # and the places it is installed in, with no toolchain: this host's Ruby
  # with nothing but Ruby on PATH, and the Rubies of a root that has no
  # compiler, cargo or Ruby headers (bin/matrix-root --runtime).
  module PlatformGem
    # What a process in a place sees on PATH, and what none of them may find there.
    ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    TOOLCHAIN = %w[cc gcc clang cargo rustc make ld].freeze

    class << self
      # Why the gem cannot be built and installed here, or nil.
      def unavailable_reason
        "building the precompiled gem needs root (bin/matrix --compile chroots into the matrix root)" unless
          Process.euid.zero?
      end

      # The gem's path: STATIC_TRACING_PLATFORM_GEM (a gem built before, to
      # be released) or built once a run, reusing the builds of this
      # checkout (rake compile) and of the matrix lane's copies.
      def path
        @path ||= ENV.fetch("STATIC_TRACING_PLATFORM_GEM") do
          output = run("rake native:gem", RbConfig.ruby, "-S", "rake", "native:gem")
          output[/^native:gem: (\S+\.gem) /, 1] or raise "rake native:gem named no gem:\n#{output}"
        end
      end

      def runtime_root
        @runtime_root ||= run("bin/matrix-root --runtime", File.join(ROOT, "bin", "matrix-root"), "--runtime")
                          .lines.last.strip
      end

      private

      def run(what, *command)
        output, status = Open3.capture2e({ "RUBYOPT" => nil, "RUBYLIB" => nil }, *command, chdir: ROOT)
        raise "#{what} failed (#{status}):\n#{output}" unless status.success?

        output
      end
    end

    # A Ruby to install the gem with and run it under, in a directory of
    # its own (+tmp+, here): its GEM_HOME, the gem file, trace files.
    class Place
      attr_reader :ruby, :tmp

      def initialize(ruby)
        @ruby = ruby
        @tmp = Dir.mktmpdir("static_tracing-platform-gem")
        FileUtils.chmod(0o1777, @tmp)
      end

      # Where the place sees +path+, a path of the host under tmp.
      def inside(path)
        path
      end

      # Where the host sees +path+, a path of the place under its tmp.
      def outside(path)
        path
      end

      def gem_home
        inside(File.join(tmp, "gems"))
      end

      # +argv+ run in the place, with a clean environment: the gem from
      # GEM_HOME only, and no toolchain on PATH.
      def command(*argv)
        ["/usr/bin/env", "-i", "HOME=#{inside(tmp)}", "LANG=C.UTF-8", "PATH=#{path}", "GEM_HOME=#{gem_home}",
         "GEM_PATH=#{gem_home}", *argv]
      end

      def capture(*argv)
        Open3.capture2e(*command(*argv))
      end

      # +file+ copied into the place: the path it sees it at.
      def copy_in(file)
        FileUtils.cp(file, tmp)
        inside(File.join(tmp, File.basename(file)))
      end

      def remove
        FileUtils.rm_rf(tmp)
      end
    end

    # This host's Ruby, with a PATH of its own on which there is nothing but
    # that Ruby and its gem command.
    class Host < Place
      def initialize
        super(RbConfig.ruby)
        FileUtils.mkdir_p(bin = File.join(tmp, "bin"))
        { "ruby" => RbConfig.ruby, "gem" => File.join(RbConfig::CONFIG["bindir"], "gem") }.each do |name, target|
          File.symlink(target, File.join(bin, name))
        end
      end

      def path
        File.join(tmp, "bin")
      end

      def description
        "Ruby #{RUBY_VERSION} on this host, with nothing but Ruby on PATH"
      end

      def bpftrace
        [E2E.bpftrace]
      end
    end

    # Ruby +version+ of the root with no toolchain, its /tmp being this
    # place's directory. Every command runs in one mount namespace (as in
    # the matrix lane), which a process of the place's holds (bin/in-root
    # --join), for bpftrace to read the traced process's mappings by the
    # paths it sees; each under the pid the host sees, for bpftrace -p.
    class Root < Place
      def initialize(root, version)
        super("ruby#{version}")
        @root = root
        @namespace = Child.new(File.join(ROOT, "bin", "in-root"), root, "--tmp", tmp, "--",
                               "/bin/sh", "-c", "echo ready && exec sleep infinity")
        @namespace.wait_for(/^ready$/)
      end

      def path
        ROOT_PATH
      end

      def inside(path)
        path.sub(%r{\A#{Regexp.escape(tmp)}(?=/|\z)}, "/tmp")
      end

      def outside(path)
        path.sub(%r{\A/tmp(?=/|\z)}, tmp)
      end

      def command(*argv)
        [File.join(ROOT, "bin", "in-root"), @root, "--join", @namespace.pid.to_s, "--", *super]
      end

      def remove
        @namespace.kill
        super
      end

      def description
        "#{ruby} in #{@root}"
      end

      def bpftrace
        command("bpftrace")
      end
    end
  end
end
