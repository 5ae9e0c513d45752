# frozen_string_literal: true

require "monitor"

module StaticTracing
  # A probe namespace: `usdt:*:<provider>:<probe>`. One per name and process;
  # its probes live in one generated shared object, loaded with #load.
  #
  #   provider = StaticTracing::Provider.register(:my_app)
  #   hello = provider.add_tracepoint(:hello, Integer, String)
  #   provider.load
  #   hello.fire(42, "hi")
  #
  # The native half (lib/static_tracing/static_tracing.so) owns the probe
  # table and the image: it implements .new (which runs #initialize),
  # #name, #tracepoints, #loaded?, #path and the private _declare, _load,
  # _stale?, _unload and ._check_declaration.
  class Provider
    class << self
      # The provider named +name+, created on first use.
      def register(name)
        created = false
        provider = StaticTracing.providers.fetch_or_create(name) do |string|
          created = true
          new(string)
        end
        MethodTracing.provider_registered(provider.name) if created
        provider
      end

      # Registers +name+ if needed and loads it.
      def load(name)
        register(name).load
      end

      # In a forked child: its memory is a copy of its parent's, and so are
      # the semaphores a tracer attached to the parent raised, and the
      # breakpoints it planted in the stubs. The tracer is the parent's; the
      # kernel would take the child's copies away only at each probe's first
      # call, which a tracer would not see. So a provider whose probes look
      # attached is loaded afresh, into a stub of the child's own: nothing is
      # attached to the child until a tracer attaches to it.
      def renew_after_fork
        StaticTracing.providers.each { |provider| provider.send(:renew_inherited_attachments) }
      rescue StandardError => e
        warn("static_tracing: process #{Process.pid} keeps the probes it inherited, attached as in its parent: " \
             "#{e.class}: #{e.message}")
      end

      # Raises what declaring +probe+ with +types+ on a new provider
      # +name+ would, and builds nothing: a refused declaration must not
      # leave its provider behind in the registry.
      def check_declaration(name, probe, types)
        _check_declaration(Names.string(:provider, name), Names.string(:probe, probe), types)
        nil
      end

      private :new, :_check_declaration
    end

    def initialize(_name)
      @lock = Monitor.new
      @explicitly_loaded = false
      @unregistered = false
    end

    # Declares a probe with up to six argument types (Integer, String,
    # Float) and returns its Tracepoint. Declaring the same name with the
    # same types again returns the same Tracepoint. On a loaded provider the
    # probe can be attached to at most Configuration.attach_delay (0.1 s)
    # after this returns, or as soon as #load returns: the stub is rebuilt
    # once for every probe declared meanwhile, not once per probe.
    #
    # +latency+: the index of an Integer argument that holds a duration in
    # nanoseconds, +stack+: of a String argument that holds a folded stack;
    # what the recorder's reports make of them (percentiles, flame graphs).
    # They are the first declaration's. Other keywords are taken as a type
    # (a Hash), which is refused as any other wrong type is.
    #
    # A boot declares thousands of probes, so this does no more than it must:
    # _declare checks the name (a Symbol or an ASCII String) and the types
    # natively, and Names.string only explains a name it cannot take.
    def add_tracepoint(name, *types, **roles)
      ensure_registered if @unregistered
      latency, stack = take_roles(name, types, roles) unless roles.empty?
      tracepoint, declared = _declare(name, types) || _declare(Names.string(:probe, name), types)
      if declared
        tracepoint.send(:assign_roles, latency, stack) if latency || stack
        Switch.declared(self)
        Recorder.declared(tracepoint)
      end
      tracepoint
    end

    # Generates the provider's stub and loads it, so tracers can attach; on
    # a loaded provider, loads the probes declared since. Does nothing (once
    # with a warning) where USDT probes are unsupported. A provider loaded
    # this way stays loaded when tracing is switched off.
    def load
      ensure_registered
      @lock.synchronize do
        @explicitly_loaded = true
        StaticTracing.supported? ? load_image : StaticTracing.warn_unsupported
      end
      self
    end

    # Takes the stub out: its probes vanish and firing them does nothing.
    def unload
      @lock.synchronize do
        @explicitly_loaded = false
        _unload
      end
      self
    end

    # Unloads the provider and removes it from StaticTracing.providers.
    # Methods traced into it lose their wrappers; registering the name
    # again (or defining a traced method that needs it) brings them back.
    def unregister
      unload
      Switch.forget(self)
      MethodTracing.provider_unregistered(self)
      StaticTracing.providers.delete(self)
      @unregistered = true
      self
    end

    def registered?
      StaticTracing.providers.key?(name) && StaticTracing.providers[name].equal?(self)
    end

    def inspect
      state = loaded? ? "loaded from #{path}" : "not loaded"
      "#<#{self.class} #{name} (#{tracepoints.size} tracepoints, #{state})>"
    end
    alias to_s inspect

    private

    # The roles among add_tracepoint's keywords, checked against +types+, as
    # [latency, stack]; other keywords are added to +types+, as a Hash.
    def take_roles(name, types, roles)
      latency = roles.delete(:latency)
      stack = roles.delete(:stack)
      types << roles unless roles.empty?
      Tracepoint.check_roles(name, types, latency:, stack:)
      [latency, stack]
    end

    # An unregistered provider could be loaded again by nobody's name: no
    # tracer would find it by the registry, and nothing would unload it.
    def ensure_registered
      return unless @unregistered

      raise StaticTracing::Error, "provider #{name} was unregistered; " \
                                  "register it again with StaticTracing::Provider.register(:#{name})"
    end

    # Loads the image, or the probes declared since; the native side says
    # which stub directories it passed over, and why, and this warns.
    def load_image
      skipped = _load
      StaticTracing.warn_stub_fallback(skipped) unless skipped.empty?
    end

    def renew_inherited_attachments
      @lock.synchronize do
        next unless loaded? && tracepoints.each_value.any?(&:enabled?)

        _unload
        load_image
      end
    end

    # Loads the provider for StaticTracing.enable!; true if it was not loaded.
    def load_for_tracing
      @lock.synchronize do
        next false if loaded? || !StaticTracing.supported?

        load_image
        true
      end
    end

    # Loads the probes declared since the stub was loaded (Switch.declared).
    def load_declared
      @lock.synchronize { load_image if loaded? && _stale? }
    end

    # Unloads the provider for StaticTracing.disable!, unless it was loaded explicitly since.
    def unload_for_tracing
      @lock.synchronize { _unload unless @explicitly_loaded }
    end
  end
end
