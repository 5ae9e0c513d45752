# frozen_string_literal: true

module StaticTracing
  module Rails
    # The probe of one Event, and its subscriber: subscribed to the event
    # only while a tracer is attached to the probe (the Watcher calls
    # #attach_changed), so that an event nobody traces costs what it costs
    # without the gem.
    #
    # It subscribes as an object answering #start and #finish, which
    # ActiveSupport::Notifications calls around each event with no Event
    # object built: the duration is taken with StaticTracing.nsec, kept on
    # a stack per fiber since events of one name nest (partials).
    class EventProbe
      TYPES = [Integer, String, Integer].freeze
      # The duration, in ns.
      LATENCY = 0

      attr_reader :event, :tracepoint

      def initialize(event, tracepoint)
        @event = event
        @tracepoint = tracepoint
        @subscription = nil
        @lock = Mutex.new
        @starts = :"static_tracing_rails_#{event.probe}"
      end

      # Called by the Watcher when a tracer attaches to the probe or the last one leaves.
      def attach_changed(attached)
        attached ? subscribe : unsubscribe
      end

      def subscribe
        @lock.synchronize { @subscription ||= ActiveSupport::Notifications.subscribe(@event.name, self) }
        self
      end

      def unsubscribe
        @lock.synchronize do
          ActiveSupport::Notifications.unsubscribe(@subscription) if @subscription
          @subscription = nil
        end
        self
      end

      def subscribed?
        !@subscription.nil?
      end

      def start(_name, _id, _payload)
        (Thread.current[@starts] ||= []).push(StaticTracing.nsec)
      end

      # An event that started before the subscription has no start here
      # and is not fired. Tracing must never fail the request: a payload
      # this cannot read is said once and the event goes untraced.
      def finish(_name, _id, payload)
        started = Thread.current[@starts]&.pop or return
        duration = StaticTracing.nsec - started
        return unless @tracepoint.enabled?

        @tracepoint.fire(duration, @event.label(payload), @event.value(payload))
      rescue StandardError => e
        StaticTracing.warn_once([:rails_event, @event.name],
                                "static_tracing: a #{@event.name} event could not be traced (said once): " \
                                "#{e.class}: #{e.message}")
      end

      def inspect
        "#<#{self.class} #{@event.name} -> rails:#{@event.probe}#{" (subscribed)" if subscribed?}>"
      end
      alias to_s inspect
    end
  end
end
