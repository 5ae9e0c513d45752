# frozen_string_literal: true

# StaticTracing::Configuration in this process: every spelling of a mode and
# a signal, every value refused and why, the environment, and what changing
# the mode does to the tracing state. Signals sent to real processes are in
# spec/signal_toggle_spec.rb.
RSpec.describe StaticTracing::Configuration do
  let(:config) { described_class }
  let(:modes) { described_class::Modes }
  let(:reserved) { %w[KILL STOP SEGV BUS ILL FPE VTALRM] }
  let(:toggles) { %w[TRAP USR1 USR2] }
  # Every other catchable signal, aliases (IOT, CLD, POLL) included: the
  # system or a terminal sends each by itself.
  let(:sent_by_system) { Signal.list.keys - ["EXIT"] - reserved - toggles }
  let(:valid_list) { modes::SIGNALS.names.map { |name| "SIG#{name}" }.join(", ") }

  around do |example|
    saved = [config.mode, config.signal]
    example.run
  ensure
    StaticTracing.configure do |c|
      c.mode = :off
      c.signal = saved[1]
      c.mode = saved[0]
    end
  end

  # What is in effect: the configuration and the signal actually taken.
  def effective
    [config.mode, config.signal, StaticTracing::SignalToggle.signal, StaticTracing::Native.armed_signal]
  end

  describe "Modes" do
    it "names the four modes, SIGNAL by default" do
      expect([modes::ON, modes::OFF, modes::SIGNAL, modes::ATTACH]).to eq(%i[on off signal attach])
      expect(modes::ALL).to eq(%i[on off signal attach])
      expect(described_class::DEFAULT_MODE).to eq(:signal)
    end

    it "has a SIGNALS constant for each signal nothing sends by itself, SIGTRAP by default" do
      expect(modes::SIGNALS::SIGTRAP).to eq("TRAP")
      expect(modes::SIGNALS::SIGUSR2).to eq("USR2")
      expect(described_class::DEFAULT_SIGNAL).to eq("TRAP")
      expect(modes::SIGNALS.names).to eq(toggles)
      toggles.each { |name| expect(modes::SIGNALS.const_get(:"SIG#{name}")).to eq(name) }
    end

    it "has none for the reserved signals, those the system sends by itself, nor for EXIT" do
      (reserved + sent_by_system + ["EXIT"]).each do |name|
        expect(modes::SIGNALS.const_defined?(:"SIG#{name}", false)).to be(false), "SIG#{name} is defined"
      end
      expect(modes::SIGNALS::RESERVED).to match_array(reserved)
    end
  end

  describe ".mode=" do
    it "accepts the constants, and their names as Symbols or Strings in any case" do
      accepted = [modes::ON, modes::OFF, modes::SIGNAL, modes::ATTACH, "on", "OFF", "Signal", "Attach",
                  :ON, :off, :SIGNAL, :ATTACH]
      accepted.zip(%i[on off signal attach] * 3).each do |value, mode|
        config.mode = value
        expect(config.mode).to eq(mode), "mode = #{value.inspect}"
      end
    end

    it "refuses anything else, listing the valid modes, and keeps the mode in effect" do
      config.mode = :off
      [:bogus, "enabled", "", nil, 1, true, ["on"], " on"].each do |value|
        expect { config.mode = value }.to raise_error(
          ArgumentError,
          "invalid mode #{value.inspect}: valid modes are :on, :off, :signal and :attach " \
          "(StaticTracing::Configuration::Modes::ON, OFF, SIGNAL, ATTACH)"
        )
        expect(effective).to eq([:off, "TRAP", nil, 0])
      end
    end
  end

  describe ".signal=" do
    before { config.mode = :signal }

    it "accepts the constant, the name with or without SIG in any case, as a String or a Symbol, and the number" do
      trap = Signal.list["TRAP"]
      spellings = [modes::SIGNALS::SIGTRAP, "TRAP", "SIGTRAP", "trap", "SigTrap", :TRAP, :SIGTRAP, :trap, trap, "5"]
      spellings.each do |value|
        config.signal = :USR2
        expect(effective).to eq([:signal, "USR2", "USR2", Signal.list["USR2"]])
        config.signal = value
        expect(effective).to eq([:signal, "TRAP", "TRAP", trap]), "signal = #{value.inspect}"
      end
    end

    it "accepts SIGTRAP, SIGUSR1 and SIGUSR2 by name and by number" do
      toggles.each do |name|
        expect(config.parse_signal(name, "signal")).to eq(name)
        expect(config.parse_signal(:"SIG#{name}", "signal")).to eq(name)
        expect(config.parse_signal(Signal.list[name], "signal")).to eq(name)
      end
    end

    # With CHLD every system("true") would flip tracing, with PIPE every
    # write to a closed pipe, and TERM would no longer stop the process.
    it "refuses each signal the system or a terminal sends by itself, naming it, why and the valid choices" do
      sent_by_system.each do |name|
        canonical = Signal.signame(Signal.list[name])
        [name, :"SIG#{name}", Signal.list[name]].each do |value|
          expect { config.signal = value }.to raise_error(ArgumentError) do |error|
            expect(error.message).to start_with("invalid signal #{value.inspect}: SIG#{canonical} cannot toggle")
            expect(error.message).to include("each arrival would flip tracing", "SIGTRAP, SIGUSR1, SIGUSR2")
          end
          expect(effective).to eq([:signal, "TRAP", "TRAP", Signal.list["TRAP"]])
        end
      end
    end

    it "says what sends the common ones" do
      { "CHLD" => "child process exits", "PIPE" => "closed pipe", "TERM" => "to stop the process",
        "WINCH" => "window is resized", "CONT" => "stopped process resumes", "TSTP" => "Ctrl-Z" }.each do |name, why|
        expect { config.signal = name }.to raise_error(ArgumentError, /SIG#{name} cannot toggle tracing \(.*#{why}/)
      end
    end

    it "takes the signal given and gives the previous one back" do
      config.signal = "USR1"
      expect(effective).to eq([:signal, "USR1", "USR1", Signal.list["USR1"]])
      config.signal = modes::SIGNALS::SIGUSR2
      expect(effective).to eq([:signal, "USR2", "USR2", Signal.list["USR2"]])
      # Ruby's own default for USR1 (raise SignalException) is back.
      expect(Signal.trap("USR1", "DEFAULT")).to eq("DEFAULT")
    end

    it "refuses each reserved signal, however spelled, saying why and listing the valid ones" do
      reserved.each do |name|
        [name, "SIG#{name}", name.downcase.to_sym, Signal.list[name]].each do |value|
          expect { config.signal = value }.to raise_error(
            ArgumentError,
            "invalid signal #{value.inspect}: SIG#{name} cannot toggle tracing (SIGKILL, SIGSTOP, SIGSEGV, " \
            "SIGBUS, SIGILL, SIGFPE, SIGVTALRM are uncatchable or used by Ruby); valid signals are #{valid_list}"
          )
          expect(effective).to eq([:signal, "TRAP", "TRAP", Signal.list["TRAP"]])
        end
      end
    end

    it "refuses what is no signal, listing the valid ones and the spellings, and keeps the signal in effect" do
      not_signals = ["NOPE", "SIG", "SIGSIGTRAP", "EXIT", :EXIT, "", nil, 0, -5, 999, "0", "99", 5.0, ["TRAP"], Object]
      not_signals.each do |value|
        expect { config.signal = value }.to raise_error(
          ArgumentError,
          "invalid signal #{value.inspect}: valid signals are #{valid_list}, " \
          "given as \"TRAP\", \"SIGTRAP\", :TRAP or a number"
        )
        expect(effective).to eq([:signal, "TRAP", "TRAP", Signal.list["TRAP"]])
      end
    end

    it "lists only SIGTRAP, SIGUSR1 and SIGUSR2 as valid" do
      expect(valid_list).to eq("SIGTRAP, SIGUSR1, SIGUSR2")
    end

    it "only records the signal while the mode is ON or OFF, and takes it when the mode becomes SIGNAL" do
      config.mode = :off
      config.signal = "USR2"
      expect(effective).to eq([:off, "USR2", nil, 0])
      config.mode = :on
      expect(effective).to eq([:on, "USR2", nil, 0])
      config.mode = :signal
      expect(effective).to eq([:signal, "USR2", "USR2", Signal.list["USR2"]])
    end
  end

  describe "StaticTracing.configure" do
    it "applies what the block sets when it ends, and returns the configuration" do
      config.mode = :off
      before = effective
      during = nil
      result = StaticTracing.configure do |c|
        c.mode = modes::SIGNAL
        c.signal = modes::SIGNALS::SIGUSR1
        expect([c.mode, c.signal]).to eq([:signal, "USR1"])
        during = effective
      end
      expect(during).to eq(before)
      expect(result).to be(config)
      expect(effective).to eq([:signal, "USR1", "USR1", Signal.list["USR1"]])
    end

    it "returns the configuration without a block" do
      expect(StaticTracing.configure).to be(config)
    end

    it "applies nothing when the block sets a refused value" do
      config.mode = :off
      before = effective
      expect do
        StaticTracing.configure do |c|
          c.signal = :USR2
          c.mode = :sometimes
        end
      end.to raise_error(ArgumentError, /invalid mode :sometimes/)
      expect(effective).to eq(before)
      expect do
        StaticTracing.configure do |c|
          c.mode = :on
          c.signal = "KILL"
        end
      end.to raise_error(ArgumentError, /SIGKILL cannot toggle tracing/)
      expect(effective).to eq(before)
      expect(StaticTracing.enabled?).to be(false)
    end
  end

  describe ".configure_from_environment" do
    it "defaults to SIGNAL on SIGTRAP, also for empty values" do
      config.mode = :off
      config.configure_from_environment({})
      expect(effective).to eq([:signal, "TRAP", "TRAP", Signal.list["TRAP"]])
      config.mode = :off
      config.configure_from_environment("STATIC_TRACING_MODE" => "", "STATIC_TRACING_SIGNAL" => "")
      expect(effective).to eq([:signal, "TRAP", "TRAP", Signal.list["TRAP"]])
    end

    it "reads STATIC_TRACING_MODE in any case" do
      { "on" => :on, "OFF" => :off, "Signal" => :signal, "off" => :off, "ON" => :on }.each do |value, mode|
        config.configure_from_environment("STATIC_TRACING_MODE" => value)
        expect(config.mode).to eq(mode), "STATIC_TRACING_MODE=#{value}"
        expect(StaticTracing.enabled?).to be(mode == :on)
      end
    end

    it "reads STATIC_TRACING_SIGNAL as a name, with or without SIG, or a number" do
      %w[USR2 SIGUSR2 usr2 12].each do |value|
        config.configure_from_environment("STATIC_TRACING_SIGNAL" => "TRAP")
        config.configure_from_environment("STATIC_TRACING_SIGNAL" => value)
        expect(effective).to eq([:signal, "USR2", "USR2", Signal.list["USR2"]]), "STATIC_TRACING_SIGNAL=#{value}"
      end
      config.configure_from_environment("STATIC_TRACING_MODE" => "off", "STATIC_TRACING_SIGNAL" => "USR1")
      expect(effective).to eq([:off, "USR1", nil, 0])
    end

    # A typo in the environment must not stop the application from booting.
    it "warns about a bad STATIC_TRACING_MODE, naming the variable, the value and the valid modes, " \
       "and applies the default" do
      config.mode = :off
      expect do
        config.configure_from_environment("STATIC_TRACING_MODE" => "bogus", "STATIC_TRACING_SIGNAL" => "USR2")
      end.to output(/\A[^\n]*STATIC_TRACING_MODE "bogus"[^\n]*:on, :off, :signal and :attach[^\n]*default\W+signal\n\z/)
        .to_stderr
      expect(effective).to eq([:signal, "USR2", "USR2", Signal.list["USR2"]])
    end

    it "warns about a bad, reserved or system-sent STATIC_TRACING_SIGNAL, naming it, and applies SIGTRAP" do
      %w[KILL CHLD PIPE 99 nonsense].each do |value|
        config.mode = :off
        warning = /\A[^\n]*STATIC_TRACING_SIGNAL "#{value}"[^\n]*SIGTRAP, SIGUSR1, SIGUSR2[^\n]*default\W+SIGTRAP\n\z/
        expect do
          config.configure_from_environment("STATIC_TRACING_MODE" => "signal", "STATIC_TRACING_SIGNAL" => value)
        end.to output(warning).to_stderr
        expect(effective).to eq([:signal, "TRAP", "TRAP", Signal.list["TRAP"]]), "STATIC_TRACING_SIGNAL=#{value}"
      end
    end
  end

  describe "changing the mode" do
    before do
      config.mode = :off
      @defined = []
    end

    after { @defined.each { |name| Object.send(:remove_const, name) } }

    def define_traced(name)
      klass = Class.new
      Object.const_set(name, klass)
      @defined << name
      klass.class_eval do
        include StaticTracing::LatencyTracer
        def work = :done
      end
      klass
    end

    # Tracing on: the method wrapped and the provider loaded; off: neither.
    def tracing(klass)
      wrapped = klass.instance_method(:work).owner != klass
      loaded = StaticTracing.providers[klass.name.gsub(/(?<=[a-z])(?=[A-Z])/, "_").downcase].loaded?
      [StaticTracing.enabled?, wrapped, loaded]
    end

    let(:on) { [true, true, true] }
    let(:off) { [false, false, false] }

    it "ON turns tracing on at once, OFF off, SIGNAL off until the signal", :aggregate_failures do
      skip "USDT probes are not supported here" unless StaticTracing.supported?
      klass = define_traced(:ConfigSpecTraced)
      expect(tracing(klass)).to eq(off)
      config.mode = :on
      expect(tracing(klass)).to eq(on)
      expect(klass.new.work).to eq(:done)
      config.mode = :off
      expect(tracing(klass)).to eq(off)
      config.mode = :on
      config.mode = :signal
      expect(tracing(klass)).to eq(off)
      expect(effective).to eq([:signal, "TRAP", "TRAP", Signal.list["TRAP"]])
    end

    it "keeps a state turned on by hand in OFF, or by the signal in SIGNAL when only the signal changes" do
      skip "USDT probes are not supported here" unless StaticTracing.supported?
      klass = define_traced(:ConfigSpecKept)
      expect(StaticTracing.enable!).to be(true)
      config.mode = :off
      expect(tracing(klass)).to eq(on)
      config.mode = :signal
      expect(tracing(klass)).to eq(off)
      StaticTracing.toggle!
      config.signal = "USR2"
      expect(tracing(klass)).to eq(on)
      expect(effective).to eq([:signal, "USR2", "USR2", Signal.list["USR2"]])
      config.mode = :on
      expect(tracing(klass)).to eq(on)
      expect(effective).to eq([:on, "USR2", nil, 0])
      config.mode = :signal
      expect(tracing(klass)).to eq(off)
    end

    it "turns off what the signal turned on when the mode becomes OFF, and gives the signal back" do
      skip "USDT probes are not supported here" unless StaticTracing.supported?
      klass = define_traced(:ConfigSpecReleased)
      config.mode = :signal
      StaticTracing.toggle!
      expect(tracing(klass)).to eq(on)
      config.mode = :off
      expect(tracing(klass)).to eq(off)
      expect(effective).to eq([:off, "TRAP", nil, 0])
    end

    it "makes StaticTracing.enable!, disable! and toggle! work by hand in every mode" do
      %i[off signal on].each do |mode|
        config.mode = mode
        StaticTracing.disable!
        expect(StaticTracing.enabled?).to be(false)
        expect(StaticTracing.toggle!).to be(true)
        expect(StaticTracing.enable!).to be(true)
        expect(StaticTracing.toggle!).to be(false)
        expect(StaticTracing.disable!).to be(false)
      end
    end
  end
end
