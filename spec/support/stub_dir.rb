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
