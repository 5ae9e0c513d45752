# frozen_string_literal: true

require "monitor"

module StaticTracing
  # Guards the tracing state (Switch, MethodTracing): the signal thread and
  # class bodies change it concurrently. Providers lock themselves, inside it.
  STATE_LOCK = Monitor.new

  # Whether tracing is on: method tracepoints wrapped, providers loaded.
  #
  # Turning it on wraps every method tracepoint and loads every provider
  # with tracepoints; while it is on, new tracepoints are wrapped and their
  # providers loaded as they are declared. Turning it off removes the
  # wrappers and unloads the providers it loaded; a provider loaded with
  # Provider#load stays loaded.
  #
  # Attach mode loads providers the same way, and leaves the wrapping of
  # each method to the tracers attaching to its probe (MethodTracing).
  #
  # A probe declared into a loaded provider is loaded with the others
  # declared with it, at the latest Configuration.attach_delay later (at the
  # end of a #batch, or by the Watcher), or at once by Provider#load.
  module Switch
    @lock = StaticTracing::STATE_LOCK
    @enabled = false
    @attach_mode = false
    @loaded_by_switch = {}.compare_by_identity
    @deferred = nil
    # Providers whose new probes the Watcher will load (#declared): the
    # declarations that follow have nothing to ask.
    @load_pending = {}.compare_by_identity

    class << self
      def enabled?
        @enabled
      end

      def attach_mode?
        @attach_mode
      end

      # Set by Configuration for Modes::ATTACH.
      def attach_mode=(value)
        @lock.synchronize do
          return if @attach_mode == value

          @attach_mode = value
          Blocks.tracing_changed
          if value
            StaticTracing.providers.each { |provider| load_for_tracing(provider) }
            MethodTracing.watch_all
          else
            MethodTracing.unwatch_all
            unload_for_tracing unless @enabled
          end
        end
      end

      def enable!
        @lock.synchronize do
          return false if @enabled

          @enabled = true
          Blocks.tracing_changed
          MethodTracing.arm_all
          StaticTracing.providers.each { |provider| load_for_tracing(provider) }
          Native.tracing_toggled(true)
          State.publish
          true
        end
      end

      def disable!
        @lock.synchronize do
          return false unless @enabled

          @enabled = false
          Blocks.tracing_changed
          MethodTracing.disarm_all
          unload_for_tracing unless @attach_mode
          Native.tracing_toggled(false)
          State.publish
          true
        end
      end

      def toggle!
        @lock.synchronize { @enabled ? disable! : enable! }
        @enabled
      end

      # Called once tracepoints have been declared on +provider+. A boot
      # declares thousands, so what makes most of them nothing to do is
      # read without the lock: tracing off and the provider not loaded (a
      # toggle that turns it on, or a load, takes the declared probes with
      # the others); or a load of its new probes waiting (outside a
      # #batch), which takes these too (the job forgets the provider before
      # it loads, so a declaration that still sees it pending is loaded by
      # it). The Watcher is asked once a burst, not once a probe.
      def declared(provider)
        return unless @enabled || @attach_mode || provider.loaded?
        return if @load_pending.key?(provider) && @deferred.nil?

        @lock.synchronize { load_declared_probes(provider) }
      end

      # Loads each provider declared in the block once, at its end, rather
      # than after each declaration.
      def batch
        @lock.synchronize do
          return yield if @deferred

          @deferred = {}.compare_by_identity
          begin
            yield
          ensure
            deferred = @deferred
            @deferred = nil
            deferred.each_key { |provider| provider.loaded? ? load_declared(provider) : load_for_tracing(provider) }
          end
        end
      end

      # Forgets a provider that is being unregistered.
      def forget(provider)
        @lock.synchronize { @loaded_by_switch.delete(provider) }
      end

      private

      def loading?
        @enabled || @attach_mode
      end

      def unload_for_tracing
        @loaded_by_switch.each_key { |provider| provider.send(:unload_for_tracing) }
        @loaded_by_switch.clear
      end

      # With the lock held: loads the probes just declared on +provider+ at
      # the end of the #batch, within a moment (loaded) or now (not loaded).
      def load_declared_probes(provider)
        return unless provider.loaded? || loading?

        if @deferred
          @deferred[provider] = true
        elsif provider.loaded?
          load_declared_soon(provider)
        else
          load_for_tracing(provider)
        end
      end

      # Has the Watcher load +provider+'s new probes within a moment. Until
      # the job starts, declarations on it have nothing to ask (#declared).
      def load_declared_soon(provider)
        Watcher.soon([:load_declared, provider], Watcher.period) do
          @load_pending.delete(provider)
          load_declared(provider)
        end
        @load_pending[provider] = true
      end

      # A provider that cannot take its new probes now keeps its old ones
      # loaded and says why; Provider#load tries again.
      def load_declared(provider)
        provider.send(:load_declared)
      rescue StaticTracing::Error => e
        warn("static_tracing: new probes of provider #{provider.name} not loaded: #{e.message}")
      end

      # A provider that cannot load is reported, and the toggle goes on: the
      # others load, and every view of the state agrees that tracing is on.
      def load_for_tracing(provider)
        return if provider.tracepoints.empty? || !loading?

        @loaded_by_switch[provider] = true if provider.send(:load_for_tracing)
      rescue StaticTracing::Error => e
        warn("static_tracing: provider #{provider.name} not loaded while tracing is on: #{e.message}")
      end
    end
  end

  class << self
    # Turns tracing on by hand (any mode): wraps method tracepoints, loads providers.
    def enable!
      Switch.enable!
      enabled?
    end

    # Turns tracing off by hand: wrappers removed, providers it loaded unloaded.
    def disable!
      Switch.disable!
      enabled?
    end

    # Turns tracing on if it is off, off if it is on; returns the new state.
    def toggle!
      Switch.toggle!
    end

    def enabled?
      Switch.enabled?
    end
  end
end
