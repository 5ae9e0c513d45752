# frozen_string_literal: true

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

      # The signals that may toggle tracing, as SIGNALS::SIGTRAP => "TRAP".
      module SIGNALS
        # Uncatchable, or used by Ruby itself.
        RESERVED = %w[KILL STOP SEGV BUS ILL FPE VTALRM].freeze

        Signal.list.each_key do |name|
          const_set(:"SIG#{name}", name.dup.freeze) unless name == "EXIT" || RESERVED.include?(name)
        end

        # By number, aliases (ABRT and IOT) by name: sort_by is not stable.
        def self.names
          names = constants.grep(/\ASIG/).map { |constant| const_get(constant) }.uniq
          names.sort_by { |name| [Signal.list[name], name] }
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
      # defaulting to SIGNAL and TRAP.
      def configure_from_environment(env = ENV)
        mode = from_environment(env, "STATIC_TRACING_MODE", DEFAULT_MODE) { |value, name| parse_mode(value, name) }
        signal = from_environment(env, "STATIC_TRACING_SIGNAL", DEFAULT_SIGNAL) do |value, name|
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
        if name && Modes::SIGNALS::RESERVED.include?(name)
          raise ArgumentError, "invalid #{setting} #{value.inspect}: SIG#{name} cannot toggle tracing " \
                               "(#{Modes::SIGNALS::RESERVED.map { |n| "SIG#{n}" }.join(", ")} are uncatchable " \
                               "or used by Ruby); valid signals are #{valid_signals}"
        end
        return name if name && Modes::SIGNALS.names.include?(name)

        raise ArgumentError, "invalid #{setting} #{value.inspect}: valid signals are #{valid_signals}, " \
                             "given as \"TRAP\", \"SIGTRAP\", :TRAP or a number"
      end

      private

      # The parsed value of the variable +name+, or +default+ when it is unset or empty.
      def from_environment(env, name, default)
        value = env[name].to_s
        value.empty? ? default : yield(value, name)
      end

      def signal_name(value)
        case value
        when Integer then Signal.signame(value) if Signal.list.value?(value)
        when /\A\s*\d+\s*\z/ then signal_name(Integer(value.to_s, 10))
        when String, Symbol
          name = value.to_s.strip.upcase.delete_prefix("SIG")
          Signal.signame(Signal.list[name]) if Signal.list.key?(name) && name != "EXIT"
        end
      end

      def valid_signals
        Modes::SIGNALS.names.map { |name| "SIG#{name}" }.join(", ")
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
