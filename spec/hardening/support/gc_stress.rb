# frozen_string_literal: true

# `rspec --require ./spec/hardening/support/gc_stress.rb FILES`: in the
# examples of FILES, calls into the extension run with a collection, and a
# compaction (see AUTO_COMPACT), at every allocation: the first PER_EXAMPLE
# calls of each method in each example. Later calls in the same example
# take the same paths with other values, and each stressed one costs a
# full collection (and compaction) per allocation, of the whole rspec heap:
# an example declaring 200 probes would take a minute.
# STATIC_TRACING_GC_STRESS=all puts whole examples under GC.stress instead
# (much slower).

require "monitor"

module GCStressAroundNative
  # Methods whose frames count (folded_stack, caller_self) are left alone.
  NATIVE = {
    StaticTracing::Provider => %i[name tracepoints _declare _load _stale? _unload loaded? path],
    StaticTracing::Tracepoint => %i[fire enabled? name label provider types],
    StaticTracing::Provider.singleton_class => %i[new _check_declaration],
    StaticTracing::Native.singleton_class => %i[publish_state name_problem supported?]
  }.freeze

  PER_EXAMPLE = 10
  # Compaction at every allocation too, where Ruby's own VM survives it.
  # Ruby 3.1 does not always: with whole spec files run this way, the
  # collector once found a freed object in a table of the VM's own (marked
  # by rb_vm_mark; no frame of the extension's), as Ruby's developers found
  # crashes with GC.stress and auto-compaction that 3.3 fixed
  # (ruby/ruby#8940, method entries moved while being built). There the
  # extension's objects are moved by the compaction examples of
  # spec/hardening/gc_spec.rb, and here they are collected at every allocation.
  AUTO_COMPACT = Gem::Version.new(RUBY_VERSION) >= Gem::Version.new("3.3")

  @calls = 0
  @example_calls = Hash.new(0)
  # GC.stress is one setting for the whole process, and native calls can
  # overlap: threads declaring at once, the gem's own threads calling in
  # while an example does. A call saving GC.stress and putting it back on
  # its way out, as each did, could save another's `true` and put it back
  # after that one had ended: stress then stayed on for the rest of the
  # run, outside native calls too, and the run took 25 s or 385 s or more
  # by where in the random order that happened. Stress is on while any
  # call is in, off once the last has left. (A Monitor: a trap handler
  # may call in on a thread that is between two of these.)
  @inside = 0
  @inside_lock = Monitor.new

  class << self
    attr_reader :calls

    def new_example = @example_calls.clear
  end

  def self.stressed(method, &)
    return yield if (@example_calls[method] += 1) > PER_EXAMPLE

    @calls += 1
    under_stress(&)
  end

  def self.under_stress
    @inside_lock.synchronize do
      if (@inside += 1) == 1
        GC.auto_compact = AUTO_COMPACT
        GC.stress = true
      end
    end
    yield
  ensure
    @inside_lock.synchronize do
      if (@inside -= 1).zero?
        GC.stress = false
        GC.auto_compact = false
      end
    end
  end

  def self.wrap(target, names)
    wrappers = Module.new do
      names.each do |name|
        method = "#{target.inspect}##{name}"
        define_method(name) { |*args, &block| GCStressAroundNative.stressed(method) { super(*args, &block) } }
        ruby2_keywords(name)
        send(target.private_method_defined?(name) ? :private : :public, name)
      end
    end
    target.prepend(wrappers)
  end
end

if ENV["STATIC_TRACING_GC_STRESS"] == "all"
  RSpec.configure do |config|
    config.around do |example|
      GC.stress = true
      example.run
    ensure
      GC.stress = false
    end
  end
else
  GCStressAroundNative::NATIVE.each { |target, names| GCStressAroundNative.wrap(target, names) }
  # Tells the runner that the wrappers were in the way.
  RSpec.configure do |config|
    config.before { GCStressAroundNative.new_example }
    # What bounds the run's time: nothing runs under stress between examples.
    config.after do
      raise "GC.stress was left on after #{RSpec.current_example.location}" if GC.stress
    end
    config.after(:suite) { puts "\nnative calls under GC.stress: #{GCStressAroundNative.calls}" }
  end
end
