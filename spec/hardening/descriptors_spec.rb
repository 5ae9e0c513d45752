# frozen_string_literal: true

# A process that has run out of file descriptors is told so: not that a
# stub directory was skipped, and no stub quietly goes to a memfd instead.
# Once descriptors are free again, loading works as before.
RSpec.describe "Running out of file descriptors", :subprocess do
  include_context "with a private stub directory"

  let(:limit) { 64 }

  # A REPL child whose open files are capped at +limit+, with a way to use
  # them all up (`starve`) and give them back (`feed`).
  def starved_child
    ruby_repl(<<~RUBY, env: { "STATIC_TRACING_DIR" => @stub_dir, "XDG_RUNTIME_DIR" => nil })
      Process.setrlimit(:NOFILE, #{limit})
      $hog = []
      def starve
        loop { $hog << File.open(File::NULL) }
      rescue Errno::EMFILE
        $hog.size
      end

      def feed
        $hog.each(&:close).clear
      end

      def load_error(provider)
        provider.load
        nil
      rescue StaticTracing::ProviderLoadError => e
        e.message
      end
    RUBY
  end

  it "fails a load with an error naming the cause and the limit, and loads once descriptors are free" do
    child = starved_child
    child.evaluate("$provider = StaticTracing::Provider.register(:starved); $provider.add_tracepoint(:hello)")
    expect(child.evaluate("starve")).to be_positive

    message = child.evaluate("load_error($provider)")
    expect(message).to match(/starved/)
    expect(message).to match(/run out of file descriptors/)
    expect(message).to match(/EMFILE/)
    expect(message).to match(/\b#{limit}\b/)
    expect(message).to include(@stub_dir)
    expect(message).not_to match(/memfd/)
    expect(child.evaluate("[$provider.loaded?, $provider.path]")).to eq([false, nil])

    child.evaluate("feed")
    expect(child.evaluate("$provider.load.loaded?")).to be(true)
    expect(child.evaluate("$provider.path")).to start_with("#{@stub_dir}/")
    expect(child.output).not_to match(/stub directory skipped/)
  end

  it "warns that the state file cannot be published for want of descriptors, naming the cause" do
    child = starved_child
    child.evaluate("starve")
    expect(child.evaluate("StaticTracing::State.publish")).to be_nil
    child.evaluate("feed")
    warning = child.wait_for(/^static_tracing: .*$/)[0]
    expect(warning).to match(/cannot publish this process's tracing state/)
    expect(warning).to match(/run out of file descriptors \(EMFILE\b.*\b#{limit}\b/)
    expect(warning).not_to match(/memfd|no stub directory is usable/)
    expect(child.evaluate("StaticTracing::State.publish")).to start_with("#{@stub_dir}/")
  end
end
