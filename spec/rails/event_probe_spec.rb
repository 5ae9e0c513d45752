# frozen_string_literal: true

# What each probe of provider `rails` fires for an ActiveSupport::Notifications
# event: arg0 = duration in ns, arg1 = the short label, arg2 = the status or
# count. The tracer is stood in for by the tracepoint's enabled? and fire.
RSpec.describe "StaticTracing::Rails::EventProbe", :rails do
  after { StaticTracing::Rails.uninstall }

  def probe_of(event)
    StaticTracing::Rails.install([event]).fetch(event)
  end

  # The probe of +event+, subscribed, with a tracer standing by: returns the
  # argument lists fired.
  def fired_by(event)
    probe = probe_of(event).subscribe
    fired = []
    allow(probe.tracepoint).to receive(:enabled?).and_return(true)
    allow(probe.tracepoint).to receive(:fire) { |*args| fired << args }
    yield
    fired
  end

  def instrument(event, payload = {}, &)
    ActiveSupport::Notifications.instrument(event, payload, &)
  end

  def spin(nanoseconds)
    deadline = StaticTracing.nsec + nanoseconds
    nil while StaticTracing.nsec < deadline
  end

  it "fires arg0 = the event's duration in ns, measured around the instrumented block" do
    fired = fired_by("sql.active_record") { instrument("sql.active_record", name: "User Load") { spin(5_000_000) } }
    expect(fired.size).to eq(1)
    duration, label, value = fired.first
    expect(duration).to be_between(5_000_000, 1_000_000_000)
    expect([label, value]).to eq(["User Load", -1])
  end

  it "times nested events of one name each on its own" do
    fired = fired_by("render_partial.action_view") do
      instrument("render_partial.action_view", identifier: "outer") do
        spin(2_000_000)
        instrument("render_partial.action_view", identifier: "inner") { spin(1_000_000) }
      end
    end
    expect(fired.map { |args| args[1] }).to eq(%w[inner outer])
    inner, outer = fired.map(&:first)
    expect(inner).to be >= 1_000_000
    expect(outer).to be >= inner + 2_000_000
  end

  {
    "sql.active_record" => [{ name: "User Load", row_count: 3 }, "User Load", 3],
    "instantiation.active_record" => [{ class_name: "User", record_count: 7 }, "User", 7],
    "process_action.action_controller" => [{ controller: "UsersController", action: "index", status: 201 },
                                           "UsersController#index", 201],
    "render_template.action_view" => [{ identifier: "users/index.html.erb" }, "users/index.html.erb", -1],
    "render_collection.action_view" => [{ identifier: "users/_user.html.erb", count: 4 }, "users/_user.html.erb", 4],
    "cache_read.active_support" => [{ key: ["users", 1], hit: true }, "users/1", 1],
    "cache_write.active_support" => [{ key: "greeting" }, "greeting", -1],
    "deliver.action_mailer" => [{ mailer: "UserMailer" }, "UserMailer", -1]
  }.each do |event, (payload, label, value)|
    it "fires #{event} with its label and value" do
      fired = fired_by(event) { instrument(event, payload) }
      expect(fired.map { |args| args.drop(1) }).to eq([[label, value]])
    end
  end

  it "labels SQL without a name as SQL, a cache miss 0, and a SQL row count only when Rails gives one" do
    fired = fired_by("sql.active_record") { instrument("sql.active_record", sql: "SELECT 1", row_count: nil) }
    expect(fired.map { |args| args.drop(1) }).to eq([["SQL", -1]])
    fired = fired_by("cache_read.active_support") { instrument("cache_read.active_support", key: "k", hit: false) }
    expect(fired.map { |args| args.drop(1) }).to eq([["k", 0]])
  end

  it "labels a job by its class, and fires a job that raised as failed, letting the exception through" do
    fired = fired_by("perform.active_job") do
      instrument("perform.active_job", job: Object.new)
      expect { instrument("perform.active_job", job: Object.new) { raise KeyError, "boom" } }
        .to raise_error(KeyError, "boom")
    end
    expect(fired.map { |args| args.drop(1) }).to eq([["Object", 0], ["Object", 1]])
  end

  it "does not read the payload or fire once the tracer has left, before the subscription follows" do
    probe = probe_of("sql.active_record").subscribe
    allow(probe.tracepoint).to receive(:fire)
    payload = { name: "User Load" }
    allow(payload).to receive(:[]).and_call_original
    instrument("sql.active_record", payload)
    expect(probe.tracepoint).not_to have_received(:fire)
    expect(payload).not_to have_received(:[]).with(:name)
  end

  it "ignores an event that started before it subscribed" do
    probe = probe_of("sql.active_record")
    fired = []
    allow(probe.tracepoint).to receive(:enabled?).and_return(true)
    allow(probe.tracepoint).to receive(:fire) { |*args| fired << args }
    expect(instrument("sql.active_record", name: "early") { probe.subscribe && :done }).to eq(:done)
    instrument("sql.active_record", name: "late")
    expect(fired.map { |args| args[1] }).to eq(["late"])
  end

  it "never fails the app over a payload it cannot read: says so once, and the block's value comes back" do
    unreadable = Class.new { def to_s = raise(EncodingError, "not a label") }.new
    fired = nil
    expect do
      fired = fired_by("sql.active_record") do
        2.times { expect(instrument("sql.active_record", name: unreadable) { :value }).to eq(:value) }
      end
    end.to output(/\Astatic_tracing: .*sql\.active_record.*EncodingError: not a label\n\z/).to_stderr
    expect(fired).to eq([])
  end
end
