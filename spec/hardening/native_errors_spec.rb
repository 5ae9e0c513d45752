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

  # magnus raises a panic as `fatal`, which no `rescue StandardError` (nor
  # the command's top level) catches: every method of both libraries is
  # defined through the bindings' own method!/function!, which run it
  # through ruby_glue::panics::guard and raise StaticTracing::InternalError.
  it "defines every method of both native libraries through the panic guard" do
    root = File.expand_path("../..", __dir__)
    sources = Dir[File.join(root, "ext/{static_tracing,trace_reader}/src/**/*.rs")]
    expect(sources.size).to be > 10
    unguarded = sources.flat_map do |path|
      text = File.read(path)
      direct = text.scan(/magnus::(?:method|function)!\(/)
      imported = text.scan(/use magnus::\{[^}]*\b(?:method|function)\b[^}]*\}/m)
      (direct + imported).map { |hit| "#{path.delete_prefix("#{root}/")}: #{hit.gsub(/\s+/, " ")}" }
    end
    expect(unguarded).to be_empty
    %w[static_tracing trace_reader].each do |library|
      expect(File.read(File.join(root, "ext", library, "src/lib.rs")))
        .to include("ruby_glue::guarded_method!").and include("ruby_glue::guarded_function!")
    end
    expect(StaticTracing::InternalError.ancestors).to include(StaticTracing::Error)
  end
end
