# frozen_string_literal: true

module StaticTracing
  module Rails
    # One ActiveSupport::Notifications event offered as a probe of provider
    # `rails`: its probe is the event's name with dots as underscores
    # (`sql.active_record` => `sql_active_record`), fired with
    # arg0 = duration in ns, arg1 = #label, arg2 = #value (NONE when the
    # event has nothing to count).
    class Event
      attr_reader :name, :probe, :value_meaning

      def initialize(name, value_meaning, label:, value: ->(_payload) { NONE })
        @name = name.freeze
        @probe = name.tr(".", "_").to_sym
        @value_meaning = value_meaning.freeze
        @label = label
        @value = value
        freeze
      end

      # The short label (arg1) of an event with +payload+.
      def label(payload)
        @label.call(payload).to_s
      end

      # The Integer (arg2) of an event with +payload+.
      def value(payload)
        value = @value.call(payload)
        value.is_a?(Integer) ? value : NONE
      end
    end

    # arg2 of an event that has no status or count.
    NONE = -1

    # What the payloads give, read the same way by several events.
    module Payload
      module_function

      # A template's identifier from the app's root, without app/views/:
      # "users/index.html.erb".
      def template(payload)
        identifier = payload[:identifier].to_s
        root = ::Rails.root.to_s if defined?(::Rails.root) && ::Rails.root
        identifier = identifier.delete_prefix("#{root}/") if root
        identifier.delete_prefix("app/views/")
      end

      # A cache key as the store sees it ("users/1-20240101"), whatever
      # object the application passed.
      def cache_key(payload)
        key = payload[:key]
        return key if key.is_a?(String)

        ActiveSupport::Cache.expand_cache_key(key)
      rescue StandardError
        key.to_s
      end

      # The response status; for an action that raised, the status Rails
      # answers that exception with (as its log line says).
      def status(payload)
        return payload[:status] if payload[:status].is_a?(Integer)

        exception = payload[:exception]&.first
        return NONE unless exception && defined?(ActionDispatch::ExceptionWrapper)

        ActionDispatch::ExceptionWrapper.status_code_for_exception(exception)
      end

      def failed(payload)
        payload[:exception] ? 1 : 0
      end
    end

    # The events offered, in the order they are declared (the default for
    # config.static_tracing.events). Each is subscribed to only while a
    # tracer is attached to its probe.
    EVENTS = [
      Event.new("sql.active_record", "row count (Rails 7.1 and later; -1 before)",
                label: ->(payload) { payload[:name].to_s.empty? ? "SQL" : payload[:name] },
                value: ->(payload) { payload[:row_count] }),
      Event.new("instantiation.active_record", "records instantiated",
                label: ->(payload) { payload[:class_name] }, value: ->(payload) { payload[:record_count] }),
      Event.new("process_action.action_controller", "response status (of the exception, when the action raised)",
                label: ->(payload) { "#{payload[:controller]}##{payload[:action]}" },
                value: ->(payload) { Payload.status(payload) }),
      Event.new("render_template.action_view", "-1",
                label: ->(payload) { Payload.template(payload) }),
      Event.new("render_partial.action_view", "-1",
                label: ->(payload) { Payload.template(payload) }),
      Event.new("render_collection.action_view", "records rendered",
                label: ->(payload) { Payload.template(payload) }, value: ->(payload) { payload[:count] }),
      Event.new("cache_read.active_support", "1 on a hit, 0 on a miss",
                label: ->(payload) { Payload.cache_key(payload) }, value: ->(payload) { payload[:hit] ? 1 : 0 }),
      Event.new("cache_write.active_support", "-1",
                label: ->(payload) { Payload.cache_key(payload) }),
      Event.new("perform.active_job", "1 if the job raised, else 0",
                label: ->(payload) { payload[:job].class.name }, value: ->(payload) { Payload.failed(payload) }),
      Event.new("deliver.action_mailer", "-1",
                label: ->(payload) { payload[:mailer] })
    ].to_h { |event| [event.name, event] }.freeze
  end
end
