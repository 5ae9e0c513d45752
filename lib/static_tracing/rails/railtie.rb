# frozen_string_literal: true

require "rails/railtie"

module StaticTracing
  module Rails
    # Declares the `rails` provider once the app is initialized (after
    # config/initializers, so a StaticTracing.configure there has set the
    # mode), in the process that boots it: a preloading server's workers
    # share it.
    class Railtie < ::Rails::Railtie
      config.static_tracing = ActiveSupport::OrderedOptions.new
      Settings::DEFAULTS.each { |key, value| config.static_tracing[key] = value.dup }

      # Before any controller is defined, eager loading included.
      initializer "static_tracing.trace_actions" do |app|
        if Settings.new(app.config.static_tracing).trace_actions && StaticTracing::Rails.available?
          ActiveSupport.on_load(:action_controller) { StaticTracing::Rails::ActionTracing.install(self) }
        end
      end

      # Each request in its W3C trace context, from the first middleware on
      # (after config/initializers, which may say not to).
      initializer "static_tracing.trace_context", after: :load_config_initializers do |app|
        if Settings.new(app.config.static_tracing).trace_context && StaticTracing::Rails.available?
          app.middleware.insert_before(0, StaticTracing::TraceContextMiddleware)
        end
      end

      config.after_initialize do |app|
        StaticTracing::Rails.install(Settings.new(app.config.static_tracing).events)
      end
    end
  end
end
