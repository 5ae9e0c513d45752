# frozen_string_literal: true

require "tmpdir"

# A stub directory of the example's own, @stub_dir, under a temporary
# directory removed after the example; the gem creates it on first use.
RSpec.shared_context "with a private stub directory" do
  around do |example|
    Dir.mktmpdir("hardening") do |dir|
      @stub_dir = File.join(dir, "stubs")
      example.run
    end
  end

  # The stub files process +pid+ has in @stub_dir.
  def stub_files(pid)
    Dir.children(@stub_dir).grep(/-#{StubNames.process_key(pid)}-\d+\.so\z/)
  end
end

# Examples that point the gem at stub directories of their own, through the
# environment, removed with the example.
module StubDirEnv
  NAMES = %w[STATIC_TRACING_DIR XDG_RUNTIME_DIR].freeze

  # Runs the block, then puts back the variables naming stub directories,
  # and this process's state file where they say if the block published it
  # under +dir+: the command looks for it there, and a later example lists
  # this process.
  def self.restoring(dir)
    saved = ENV.to_h.slice(*NAMES)
    yield
  ensure
    NAMES.each { |name| ENV[name] = saved[name] }
    StaticTracing::State.publish if StaticTracing::State.path&.start_with?("#{dir}/")
  end
end
