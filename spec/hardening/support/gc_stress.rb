# frozen_string_literal: true

# `rspec --require ./spec/hardening/support/gc_stress.rb FILES`: in the
# examples of FILES, every call into the extension runs with a collection,
# and a compaction, at every allocation. STATIC_TRACING_GC_STRESS=all puts
# whole examples under GC.stress instead (much slower).
module GCStressAroundNative
  # Methods whose frames count (folded_stack, caller_self) are left alone.
  NATIVE = {
    StaticTracing::Provider => %i[name tracepoints _declare _load _stale? _unload loaded? path],
    StaticTracing::Tracepoint => %i[fire enabled? name label provider types],
    StaticTracing::Provider.singleton_class => %i[new _check_declaration],
    StaticTracing::Native.singleton_class => %i[publish_state name_problem supported?]
  }.freeze

  @calls = 0

  class << self
    attr_reader :calls
  end

  def self.stressed
    saved = [GC.stress, GC.auto_compact]
    @calls += 1
    GC.auto_compact = true
    GC.stress = true
    yield
  ensure
    GC.stress, GC.auto_compact = saved
  end

  def self.wrap(target, names)
    wrappers = Module.new do
      names.each do |name|
        define_method(name) { |*args, &block| GCStressAroundNative.stressed { super(*args, &block) } }
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
    config.after(:suite) { puts "\nnative calls under GC.stress: #{GCStressAroundNative.calls}" }
  end
end
