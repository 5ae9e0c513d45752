# frozen_string_literal: true

# Which events static_tracing subscribes to, and when: only while a tracer
# is attached to the event's probe, in every mode; the mode decides when the
# `rails` provider is loaded. The Watcher's news is given by hand here; the
# real bpftrace attaches in spec/e2e/rails_spec.rb.
RSpec.describe "StaticTracing::Rails", :rails do
  let(:config) { StaticTracing::Configuration }

  around do |example|
    mode = config.mode
    example.run
  ensure
    StaticTracing::Rails.uninstall
    config.mode = mode
  end

  def our_listeners(event)
    ActiveSupport::Notifications.notifier.listeners_for(event).count do |listener|
      listener.instance_variable_get(:@delegate).is_a?(StaticTracing::Rails::EventProbe)
    end
  end

  it "declares one probe (Integer, String, Integer) per event into provider rails, and subscribes to none" do
    probes = StaticTracing::Rails.install
    tracepoints = StaticTracing.providers[:rails].tracepoints
    expect(tracepoints.keys).to eq(StaticTracing::Rails::EVENTS.values.map(&:probe))
    expect(tracepoints.keys).to include(:sql_active_record, :process_action_action_controller,
                                        :render_template_action_view, :cache_read_active_support,
                                        :perform_active_job)
    expect(tracepoints.values.map(&:types).uniq).to eq([[Integer, String, Integer]])
    expect(probes.values.map(&:tracepoint)).to eq(tracepoints.values)
    expect(StaticTracing::Rails.subscribed_events).to eq([])
    expect(StaticTracing::Rails::EVENTS.keys.map { |event| our_listeners(event) }.uniq).to eq([0])
  end

  it "subscribes to an event exactly while a tracer is attached to its probe" do
    probes = StaticTracing::Rails.install(%w[sql.active_record process_action.action_controller])
    expect(probes.values.map(&:tracepoint)).to all(satisfy { |tp| StaticTracing::Watcher.watching?(tp) })

    probes.fetch("sql.active_record").attach_changed(true)
    probes.fetch("sql.active_record").attach_changed(true)
    expect(StaticTracing::Rails.subscribed_events).to eq(["sql.active_record"])
    expect([our_listeners("sql.active_record"), our_listeners("process_action.action_controller")]).to eq([1, 0])

    probes.fetch("sql.active_record").attach_changed(false)
    expect(StaticTracing::Rails.subscribed_events).to eq([])
    expect(our_listeners("sql.active_record")).to eq(0)
  end

  it "installs more events on a second call, keeping the first ones' probes" do
    first = StaticTracing::Rails.install(["sql.active_record"]).fetch("sql.active_record")
    probes = StaticTracing::Rails.install(["cache_read.active_support"])
    expect(probes.keys).to eq(%w[sql.active_record cache_read.active_support])
    expect(probes.fetch("sql.active_record")).to be(first)
  end

  it "unsubscribes and stops watching everything on uninstall" do
    probe = StaticTracing::Rails.install(["sql.active_record"]).fetch("sql.active_record")
    probe.attach_changed(true)
    StaticTracing::Rails.uninstall
    expect(our_listeners("sql.active_record")).to eq(0)
    expect(StaticTracing::Watcher.watching?(probe.tracepoint)).to be(false)
    expect(StaticTracing::Rails.probes).to eq({})
  end

  describe "in each mode" do
    it "ATTACH and ON: the provider is loaded from boot, so a tracer can attach at once" do
      %i[attach on].each do |mode|
        config.mode = mode
        StaticTracing::Rails.install(["sql.active_record"])
        expect(StaticTracing::Rails.provider).to be_loaded, "in mode #{mode}"
        expect(StaticTracing::Rails.subscribed_events).to eq([])
        StaticTracing::Rails.uninstall
        StaticTracing.providers[:rails].unregister
      end
    end

    it "SIGNAL and OFF: the provider loads when tracing is turned on (signal, enable!), and unloads when it is off" do
      %i[signal off].each do |mode|
        config.mode = mode
        probe = StaticTracing::Rails.install(["sql.active_record"]).fetch("sql.active_record")
        expect(StaticTracing::Rails.provider).not_to be_loaded, "in mode #{mode}"
        expect(StaticTracing::Watcher.watching?(probe.tracepoint)).to be(true)
        StaticTracing.enable!
        expect(StaticTracing::Rails.provider).to be_loaded
        expect(StaticTracing::Rails.subscribed_events).to eq([])
        StaticTracing.disable!
        expect(StaticTracing::Rails.provider).not_to be_loaded
        StaticTracing::Rails.uninstall
      end
    end
  end

  describe "bad input" do
    it "refuses events it does not know, naming them and listing the known ones, and declares nothing" do
      expect { StaticTracing::Rails.install(%w[sql.active_record sql.activerecord]) }
        .to raise_error(ArgumentError,
                        /unknown event "sql\.activerecord"; the events are sql\.active_record, .*perform\.active_job/)
      expect(StaticTracing.providers.key?(:rails)).to be(false)
      expect { StaticTracing::Rails.install("sql.active_record") }
        .to raise_error(ArgumentError,
                        /config\.static_tracing\.events "sql\.active_record": give an Array of event names/)
    end
  end
end

RSpec.describe "StaticTracing::Rails::Settings", :rails do
  it "defaults to every event, no action tracing, and each request in its trace context" do
    settings = StaticTracing::Rails::Settings.new
    expect([settings.events, settings.trace_actions, settings.trace_context])
      .to eq([StaticTracing::Rails::EVENTS.keys, false, true])
    expect(StaticTracing::Rails::Settings.new(trace_context: false).trace_context).to be(false)
    settings = StaticTracing::Rails::Settings.new(events: [:"sql.active_record"], trace_actions: true)
    expect(settings.events).to eq(["sql.active_record"])
  end

  it "refuses what it does not know, naming the setting, the value and what it takes" do
    expect { StaticTracing::Rails::Settings.new(trace_action: true) }
      .to raise_error(ArgumentError, /unknown setting config\.static_tracing\.trace_action: the settings are /) do |e|
        expect(e.message).to end_with("events, config.static_tracing.trace_actions and " \
                                      "config.static_tracing.trace_context")
      end
    expect { StaticTracing::Rails::Settings.new(trace_actions: "yes") }
      .to raise_error(ArgumentError, /config\.static_tracing\.trace_actions "yes": give true or false/)
    expect { StaticTracing::Rails::Settings.new(trace_context: nil) }
      .to raise_error(ArgumentError, /config\.static_tracing\.trace_context nil: give true or false/)
    expect { StaticTracing::Rails::Settings.new(events: [:"sql.active_record", 1]) }
      .to raise_error(ArgumentError,
                      /config\.static_tracing\.events \[:"sql\.active_record", 1\]: give an Array of event names/)
    expect { StaticTracing::Rails::Settings.new(events: %w[a.b c.d]) }
      .to raise_error(ArgumentError, /unknown events "a\.b", "c\.d"; the events are sql\.active_record/)
  end
end
