# frozen_string_literal: true

module StaticTracing
  module Rails
    # config.static_tracing, checked: a typo stops the boot with what was
    # wrong, rather than tracing silently less than asked.
    #
    #   config.static_tracing.events = %w[sql.active_record process_action.action_controller]
    #   config.static_tracing.trace_actions = true
    #   config.static_tracing.trace_context = false   # no TraceContextMiddleware
    class Settings
      DEFAULTS = { events: EVENTS.keys.freeze, trace_actions: false, trace_context: true }.freeze

      attr_reader :events, :trace_actions, :trace_context

      # +options+: a Hash or the app's ActiveSupport::OrderedOptions.
      def initialize(options = {})
        options = options.to_h.transform_keys(&:to_sym)
        unknown = options.keys - DEFAULTS.keys
        unless unknown.empty?
          raise ArgumentError, "unknown setting #{self.class.setting_names(unknown).join(", ")}: " \
                               "the settings are #{self.class.listed(self.class.setting_names(DEFAULTS.keys))}"
        end

        options = DEFAULTS.merge(options)
        @events = self.class.events(options[:events])
        @trace_actions = boolean(:trace_actions, options[:trace_actions])
        @trace_context = boolean(:trace_context, options[:trace_context])
        freeze
      end

      # "a, b and c".
      def self.listed(names) = [names[0...-1].join(", "), names.last].reject(&:empty?).join(" and ")

      def self.setting_names(keys)
        keys.map { |key| "config.static_tracing.#{key}" }
      end

      # The event names of +value+ (Strings or Symbols), checked against EVENTS.
      def self.events(value)
        unless value.is_a?(Array) && value.all? { |name| name.is_a?(String) || name.is_a?(Symbol) }
          raise ArgumentError, "invalid config.static_tracing.events #{value.inspect}: give an Array of event names, " \
                               "e.g. #{EVENTS.keys.first(2).inspect}"
        end

        names = value.map(&:to_s).uniq
        unknown = names - EVENTS.keys
        raise ArgumentError, unknown_events_message(unknown) unless unknown.empty?

        names.freeze
      end

      def self.unknown_events_message(unknown)
        "invalid config.static_tracing.events: unknown event#{"s" if unknown.size > 1} " \
          "#{unknown.map(&:inspect).join(", ")}; the events are #{EVENTS.keys.join(", ")}"
      end
      private_class_method :unknown_events_message

      private

      def boolean(setting, value)
        return value if [true, false].include?(value)

        raise ArgumentError, "invalid config.static_tracing.#{setting} #{value.inspect}: give true or false"
      end
    end
  end
end
