# frozen_string_literal: true

require_relative "toggle_signals"

module StaticTracing
  # When tracing turns on and off by itself.
  #
  #   StaticTracing::Configuration.mode = StaticTracing::Configuration::Modes::SIGNAL
  #   StaticTracing::Configuration.signal = StaticTracing::Configuration::Modes::SIGNALS::SIGTRAP
  #
  # ON: method tracepoints are wrapped at once, providers load as their
  # tracepoints are declared. OFF: nothing happens by itself (call
  # StaticTracing.enable!/disable!, or load providers). SIGNAL (the default):
  # off until the process receives the signal, then as ON until it receives
  # it again. STATIC_TRACING_MODE and STATIC_TRACING_SIGNAL set both when the
  # gem is loaded.
  module Configuration
    module Modes
      ON = :on
      OFF = :off
      SIGNAL = :signal
      ALL = [ON, OFF, SIGNAL].freeze

      # The signals that may toggle tracing, as SIGNALS::SIGTRAP => "TRAP"
      # (see ToggleSignals for why only these).
      module SIGNALS
        # Uncatchable, or used by Ruby itself.
        RESERVED = ToggleSignals::RESERVED

        ToggleSignals.names.each { |name| const_set(:"SIG#{name}", name) }

        def self.names
          ToggleSignals.names
        end
      end
    end

    DEFAULT_MODE = Modes::SIGNAL
    DEFAULT_SIGNAL = Modes::SIGNALS::SIGTRAP

    class << self
      # The mode: :on, :off or :signal.
      attr_reader :mode

      # The toggle signal's name, e.g. "TRAP".
      attr_reader :signal

      # Accepts Modes::ON, OFF, SIGNAL, or their names as Strings or Symbols
      # in any case. Takes effect at once.
      def mode=(value)
        apply(parse_mode(value, "mode"), @signal)
      end

      # Accepts "TRAP", "SIGTRAP", :TRAP, :SIGTRAP or a signal number (also
      # as a String, as the environment gives it). Takes effect at once; the
      # previous signal's handler is given back.
      def signal=(value)
        apply(@mode, parse_signal(value, "signal"))
      end

      # The toggle signal's number.
      def signal_number
        Signal.list.fetch(@signal)
      end

      # Sets mode and signal from STATIC_TRACING_MODE and STATIC_TRACING_SIGNAL,
      # defaulting to SIGNAL and TRAP. A value that cannot be parsed is
      # warned about and the default applies: a typo in the environment must
      # not stop the application from booting.
      def configure_from_environment(env = ENV)
        mode = from_environment(env, "STATIC_TRACING_MODE", DEFAULT_MODE, DEFAULT_MODE) do |value, name|
          parse_mode(value, name)
        end
        signal = from_environment(env, "STATIC_TRACING_SIGNAL", DEFAULT_SIGNAL, "SIG#{DEFAULT_SIGNAL}") do |value, name|
          parse_signal(value, name)
        end
        apply(mode, signal)
      end

      def parse_mode(value, setting)
        mode = value.to_s.downcase.to_sym if value.is_a?(String) || value.is_a?(Symbol)
        return mode if Modes::ALL.include?(mode)

        raise ArgumentError, "invalid #{setting} #{value.inspect}: valid modes are :on, :off and :signal " \
                             "(StaticTracing::Configuration::Modes::ON, OFF, SIGNAL)"
      end

      def parse_signal(value, setting)
        name = signal_name(value)
        refusal = name && ToggleSignals.refusal(name)
        if refusal
          raise ArgumentError, "invalid #{setting} #{value.inspect}: SIG#{name} cannot toggle tracing " \
                               "(#{refusal}); valid signals are #{ToggleSignals.listed}"
        end
        return name if name

        raise ArgumentError, "invalid #{setting} #{value.inspect}: valid signals are #{ToggleSignals.listed}, " \
                             "given as \"TRAP\", \"SIGTRAP\", :TRAP or a number"
      end

      private

      # The parsed value of the variable +name+, or +default+ (+shown+ so in
      # the warning) when it is unset, empty or cannot be parsed.
      def from_environment(env, name, default, shown)
        value = env[name].to_s
        return default if value.empty?

        yield(value, name)
      rescue ArgumentError => e
        warn("static_tracing: #{e.message}; using the default, #{shown}", uplevel: nil)
        default
      end

      def signal_name(value)
        case value
        when Integer then Signal.signame(value) if value.positive? && Signal.list.value?(value)
        when /\A\s*\d+\s*\z/ then signal_name(Integer(value.to_s, 10))
        when String, Symbol then signal_name_of(value.to_s.strip.upcase.delete_prefix("SIG"))
        end
      end

      # The canonical name of the signal called +name+ (CLD: CHLD), or nil.
      def signal_name_of(name)
        Signal.signame(Signal.list[name]) if Signal.list.key?(name) && name != "EXIT"
      end

      # Sets mode and signal together (both already parsed). On failure (the
      # signal cannot be taken) the previous mode and signal are put back, so
      # that what is configured is what is in effect.
      def apply(mode, signal)
        previous = [@mode, @signal]
        @mode = mode
        @signal = signal
        switch(mode, signal, previous.first)
        State.publish
      rescue StandardError
        @mode, @signal = previous
        switch(*previous, mode) if previous.first
        raise
      end

      def switch(mode, signal, previous_mode)
        case mode
        when Modes::ON
          SignalToggle.release
          StaticTracing.enable!
        when Modes::OFF
          SignalToggle.release
          StaticTracing.disable! unless previous_mode == Modes::OFF
        when Modes::SIGNAL
          StaticTracing.disable! unless previous_mode == Modes::SIGNAL
          SignalToggle.take(signal)
        end
      end
    end
  end

  module Configuration
    # What a StaticTracing.configure block sets: each value is checked as it
    # is set, and all of them take effect together when the block ends, or
    # none if the block raises.
    class Settings
      attr_reader :mode, :signal

      def initialize(mode, signal)
        @mode = mode
        @signal = signal
      end

      def mode=(value)
        @mode = Configuration.parse_mode(value, "mode")
      end

      def signal=(value)
        @signal = Configuration.parse_signal(value, "signal")
      end
    end
  end

  # Sets the configuration in a block, all at once when it ends:
  # StaticTracing.configure { |c| c.mode = ...; c.signal = ... }
  def self.configure
    if block_given?
      settings = Configuration::Settings.new(Configuration.mode, Configuration.signal)
      yield settings
      Configuration.send(:apply, settings.mode, settings.signal)
    end
    Configuration
  end
end
