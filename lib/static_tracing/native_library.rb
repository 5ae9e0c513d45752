# frozen_string_literal: true

require_relative "version"

module StaticTracing
  # Finds and loads one of the gem's native libraries: static_tracing (the
  # extension) or trace_reader (the command's reader). They are where the
  # gem was built:
  #
  # - the precompiled gem (rake native:gem) carries them for several Rubies,
  #   a directory each, named by the Ruby's ABI version (3.1/, 3.3/, ...,
  #   beside this file), as rake-compiler's fat gems do: the running Ruby's
  #   is loaded, and a Ruby it has none for gets an error that names those
  #   it has and the source gem, not the dynamic linker's;
  # - a checkout (rake compile) has them beside this file;
  # - the source gem, installed, in its extension directory, on the load path.
  module NativeLibrary
    DIRECTORY = __dir__
    ABI_DIRECTORY = /\A\d+\.\d+\z/

    class << self
      def require(name)
        return require_built_for(abi, name) unless built_for.empty?

        beside = File.join(DIRECTORY, "#{name}.so")
        kernel_require(File.exist?(beside) ? beside : "static_tracing/#{name}")
      end

      # The Rubies (ABI versions, "3.3") the precompiled gem carries
      # libraries for, oldest first; none elsewhere.
      def built_for
        @built_for ||= Dir.children(DIRECTORY).grep(ABI_DIRECTORY).sort_by { |version| version.split(".").map(&:to_i) }
      end

      # The running Ruby's ABI version: its major and minor.
      def abi
        RUBY_VERSION[/\A\d+\.\d+/]
      end

      private

      def require_built_for(version, name)
        raise LoadError, unsupported_message unless built_for.include?(version)

        path = File.join(DIRECTORY, version, "#{name}.so")
        begin
          kernel_require(path)
        rescue LoadError => e
          raise LoadError, "static_tracing: the precompiled #{name}.so for Ruby #{version} does not load here " \
                           "(#{e.message}). The precompiled gem needs the glibc that the README's Install " \
                           "section names; #{SOURCE_GEM}"
        end
      end

      def unsupported_message
        rubies = built_for.size > 1 ? "#{built_for[0..-2].join(", ")} and #{built_for[-1]}" : built_for.first
        "static_tracing #{VERSION}, precompiled, has native libraries for Ruby #{rubies}, " \
          "none for this Ruby (#{RUBY_VERSION}): #{SOURCE_GEM}"
      end

      # Kernel#require (RubyGems' when it is loaded): this module's own
      # require hides it.
      def kernel_require(feature)
        Kernel.instance_method(:require).bind_call(self, feature)
      end
    end

    SOURCE_GEM = "the source gem builds them for the Ruby it is installed with, using Rust's cargo: " \
                 "gem install static_tracing --platform ruby (in a Gemfile: force_ruby_platform: true)"
    private_constant :SOURCE_GEM
  end
end
