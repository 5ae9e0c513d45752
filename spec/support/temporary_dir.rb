# frozen_string_literal: true

require "tmpdir"

# A directory of the example's own, @dir, named after +prefix+ and removed
# after the example.
RSpec.shared_context "with a temporary directory" do |prefix|
  around do |example|
    Dir.mktmpdir(prefix) do |dir|
      @dir = dir
      example.run
    end
  end
end
