# frozen_string_literal: true

# ActiveSupport::Notifications events as probes of provider `rails`, for a
# Rails app: `gem "static_tracing", require: "static_tracing/rails"`. See
# docs/rails.md for the probes, their arguments and the one-liners.
require "monitor"
require "active_support"
require "active_support/notifications"

module StaticTracing
  # The `rails` provider: one probe per event of EVENTS (the ones
  # config.static_tracing.events names), each subscribed to only while a
  # tracer is attached to it. The mode decides when the provider is loaded,
  # and so when a tracer can attach: ATTACH and ON from boot, SIGNAL once
  # the signal turned tracing on, OFF after StaticTracing.enable! or
  # StaticTracing::Rails.provider.load.
  module Rails
    PROVIDER = :rails

    @probes = {}
    @lock = Monitor.new
    @unavailable_reason = nil

    class << self
      # Why no event is traced in this process (the extension did not
      # load), or nil.
      attr_reader :unavailable_reason

      def available?
        @unavailable_reason.nil?
      end

      # Declares the probes of +events+ (names of EVENTS) into provider
      # `rails` and watches them for tracers; events declared by an earlier
      # call stay. Returns the EventProbes by event name.
      def install(events = EVENTS.keys)
        names = Settings.events(events)
        return probes unless available?

        @lock.synchronize do
          provider = Provider.register(PROVIDER)
          Switch.batch do
            names.each do |name|
              event = EVENTS.fetch(name)
              @probes[name] ||= EventProbe.new(event, provider.add_tracepoint(event.probe, *EventProbe::TYPES,
                                                                              latency: EventProbe::LATENCY))
            end
          end
          # Where probes cannot load nothing can attach: nothing to watch.
          @probes.each_value { |probe| Watcher.watch(probe.tracepoint, probe) } if StaticTracing.supported?
        end
        probes
      end

      # Unsubscribes every event and stops watching its probe; the provider
      # stays as it is.
      def uninstall
        @lock.synchronize do
          @probes.each_value do |probe|
            Watcher.unwatch(probe.tracepoint, probe)
            probe.unsubscribe
          end
          @probes.clear
        end
        self
      end

      # Event name => EventProbe, for the events installed.
      def probes
        @lock.synchronize { @probes.dup.freeze }
      end

      # The names of the events subscribed to now (a tracer is attached to their probes).
      def subscribed_events
        probes.select { |_, probe| probe.subscribed? }.keys
      end

      def provider
        Provider.register(PROVIDER)
      end

      # Called once, when `require "static_tracing"` fails: the app boots
      # and runs untraced.
      def unavailable!(error)
        @unavailable_reason = "#{error.class}: #{error.message}"
        warn("static_tracing: Rails events are not traced in this process: the gem did not load " \
             "(#{@unavailable_reason})", uplevel: nil)
      end
    end
  end
end

begin
  require "static_tracing"
rescue LoadError => e
  StaticTracing::Rails.unavailable!(e)
end
require_relative "rails/events"
require_relative "rails/event_probe"
require_relative "rails/settings"
require_relative "rails/action_tracing"
require_relative "rails/railtie"
