# frozen_string_literal: true

require_relative "signal_rules"

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
  # it again. ATTACH: providers load as their tracepoints are declared, and
  # a traced method is wrapped only while a tracer is attached to its probe
  # (within attach_delay of the attach; see Watcher); no signal is taken.
  # STATIC_TRACING_MODE, STATIC_TRACING_SIGNAL and STATIC_TRACING_ATTACH_DELAY
  # set them when the gem is loaded.
  module Configuration
    module Modes
      ON = :on
      OFF = :off
      SIGNAL = :signal
      ATTACH = :attach
      ALL = [ON, OFF, SIGNAL, ATTACH].freeze

      # The signals that may toggle tracing, as SIGNALS::SIGTRAP => "TRAP"
      # (see SignalRules for why only these).
      module SIGNALS
        # Uncatchable, or used by Ruby itself.
        RESERVED = SignalRules::RESERVED

        SignalRules.names.each { |name| const_set(:"SIG#{name}", name) }

        def self.names
          SignalRules.names
        end
      end
    end

    DEFAULT_MODE = Modes::SIGNAL
    DEFAULT_SIGNAL = Modes::SIGNALS::SIGTRAP
    # Seconds: how long after a tracer attaches its method is wrapped (and
    # after it leaves, unwrapped), and after a declaration into a loaded
    # provider the probe can be attached to.
    DEFAULT_ATTACH_DELAY = 0.1
    ATTACH_DELAYS = (0.002..60.0)

    class << self
      # The mode: :on, :off, :signal or :attach.
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

      # See DEFAULT_ATTACH_DELAY.
      def attach_delay
        @attach_delay || DEFAULT_ATTACH_DELAY
      end

      # Seconds, from 0.002 to 60 (as a Numeric or a String); takes effect at once.
      def attach_delay=(value)
        @attach_delay = parse_attach_delay(value, "attach_delay")
        Watcher.reconfigure
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
        @attach_delay = from_environment(env, "STATIC_TRACING_ATTACH_DELAY", DEFAULT_ATTACH_DELAY,
                                         DEFAULT_ATTACH_DELAY) do |value, name|
          parse_attach_delay(value, name)
        end
        Watcher.reconfigure
        apply(mode, signal)
      end

      def parse_mode(value, setting)
        mode = value.to_s.downcase.to_sym if value.is_a?(String) || value.is_a?(Symbol)
        return mode if Modes::ALL.include?(mode)

        names = Modes::ALL.map(&:inspect)
        raise ArgumentError, "invalid #{setting} #{value.inspect}: valid modes are #{names[0..-2].join(", ")} " \
                             "and #{names.last} (StaticTracing::Configuration::Modes::" \
                             "#{Modes::ALL.map(&:upcase).join(", ")})"
      end

      def parse_attach_delay(value, setting)
        seconds = value.is_a?(Numeric) ? value : Float(value.to_s, exception: false)
        return seconds.to_f if seconds.is_a?(Numeric) && seconds.real? && ATTACH_DELAYS.cover?(seconds)

        raise ArgumentError, "invalid #{setting} #{value.inspect}: give seconds from #{ATTACH_DELAYS.min} " \
                             "to #{ATTACH_DELAYS.max}, e.g. 0.1"
      end

      def parse_signal(value, setting)
        name = signal_name(value)
        refusal = name && SignalRules.refusal(name)
        if refusal
          raise ArgumentError, "invalid #{setting} #{value.inspect}: SIG#{name} cannot toggle tracing " \
                               "(#{refusal}); valid signals are #{SignalRules.listed}"
        end
        return name if name

        raise ArgumentError, "invalid #{setting} #{value.inspect}: valid signals are #{SignalRules.listed}, " \
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
        Switch.attach_mode = false unless mode == Modes::ATTACH
        SignalToggle.release unless mode == Modes::SIGNAL
        return StaticTracing.enable! if mode == Modes::ON

        StaticTracing.disable! unless previous_mode == mode
        SignalToggle.take(signal) if mode == Modes::SIGNAL
        Switch.attach_mode = true if mode == Modes::ATTACH
      end
    end
  end

  module Configuration
    # What a StaticTracing.configure block sets: each value is checked as it
    # is set, and all of them take effect together when the block ends, or
    # none if the block raises.
    class Settings
      attr_reader :mode, :signal, :attach_delay

      def initialize(mode, signal, attach_delay)
        @mode = mode
        @signal = signal
        @attach_delay = attach_delay
      end

      def attach_delay=(value)
        @attach_delay = Configuration.parse_attach_delay(value, "attach_delay")
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
      settings = Configuration::Settings.new(Configuration.mode, Configuration.signal, Configuration.attach_delay)
      yield settings
      Configuration.send(:apply, settings.mode, settings.signal)
      # Last: it cannot fail, and apply can (a signal that cannot be taken).
      Configuration.attach_delay = settings.attach_delay
    end
    Configuration
  end
end
