# frozen_string_literal: true

# The native extension raises the gem's own exception classes. It resolves
# them when it loads: raising one later can neither fail nor take the
# process down with a Rust panic (which Ruby would see as `fatal`, past any
# `rescue StandardError`).
RSpec.describe "the native extension's exception classes", :subprocess do
  # Runs +script+ in a new Ruby with this checkout's lib/ on the load path;
  # returns what it printed.
  def run_ruby(script)
    process = E2E::Child.new(RbConfig.ruby, "-I", E2E::LIB, "-e", script)
    started_processes << process
    status = process.wait(timeout: 20)
    expect(status).to be_success, process.output
    process.output
  end

  it "refuses to load, naming the class, when the gem's error classes are not defined" do
    output = run_ruby(<<~RUBY)
      module StaticTracing; end
      begin
        require "static_tracing/static_tracing"
        puts "loaded"
      rescue LoadError => e
        puts "\#{e.class}: \#{e.message}"
      end
    RUBY
    expect(output).to start_with("LoadError: ")
    expect(output).to include("StaticTracing::Error")
    expect(output).to include("lib/static_tracing/errors.rb")
  end

  it "raises StaticTracing::Error after its constant is removed, instead of aborting" do
    output = run_ruby(<<~RUBY)
      require "static_tracing"
      error_class = StaticTracing::Error
      StaticTracing.send(:remove_const, :Error)
      GC.start
      GC.compact if GC.respond_to?(:compact)
      reader, writer = IO.pipe
      begin
        StaticTracing::Native.arm_signal(0, writer.fileno)
        puts "armed"
      rescue StandardError => e
        puts "\#{e.class.equal?(error_class)} \#{e.message}"
      end
    RUBY
    expect(output.chomp).to match(/\Atrue .*signal 0\b/)
  end
end
