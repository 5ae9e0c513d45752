# frozen_string_literal: true

require "json"
require "open3"

# The Railtie in a real Rails app (spec/support/rails_app.rb) booted in a
# child process, so that no app is initialized in this one: what it declares,
# when, what config.static_tracing accepts, and that the app boots and
# serves where tracing cannot work.
RSpec.describe "StaticTracing::Rails::Railtie", :subprocess, :rails do
  before do
    reason = E2E::RailsApp.unavailable_reason
    cannot_run!(reason, component: :rails) if reason
    @root = E2E::RailsApp.write(Dir.mktmpdir("static_tracing-railtie"))
  end

  after { FileUtils.rm_rf(@root) if @root }

  # What +code+ can call to make a request: app_get("/users") => [status, body].
  let(:app_get) do
    <<~RUBY
      def app_get(path)
        status, _, body = Rails.application.call(Rack::MockRequest.env_for(path))
        text = +""
        body.each { |part| text << part }
        body.close if body.respond_to?(:close)
        [status, text]
      end
    RUBY
  end

  # Boots the app in a child (production, eager loading), runs +code+ and
  # returns [stdout, stderr, status]. +prelude+ runs first.
  def boot(code, env: {}, lib: E2E::LIB, prelude: "")
    script = "#{prelude}\nrequire \"./config/environment\"\n#{app_get}\n#{code}"
    Open3.capture3({ "RAILS_ENV" => "production" }.merge(env), RbConfig.ruby, "-I", lib, "-e", script, chdir: @root)
  end

  def initializer(content)
    File.write(File.join(@root, "config", "initializers", "static_tracing.rb"), content)
  end

  it "declares provider rails with every event's probe once the app is initialized, loaded in attach mode" do
    out, err, status = boot(<<~RUBY, env: { "STATIC_TRACING_MODE" => "attach" })
      provider = StaticTracing.providers[:rails]
      puts JSON.generate(loaded: provider.loaded?, probes: provider.tracepoints.keys,
                         watched: provider.tracepoints.values.all? { |tp| StaticTracing::Watcher.watching?(tp) },
                         subscribed: StaticTracing::Rails.subscribed_events, users: app_get("/users")[0])
    RUBY
    expect(status).to be_success, err
    expect(JSON.parse(out)).to eq("loaded" => true, "probes" => StaticTracing::Rails::EVENTS.values.map do |e|
                                                                  e.probe.to_s
                                                                end,
                                  "watched" => true, "subscribed" => [], "users" => 200)
  end

  it "declares only the events config.static_tracing.events names, as config/initializers leave it" do
    initializer(%(Rails.application.config.static_tracing.events = %w[sql.active_record cache_read.active_support]\n))
    out, err, status = boot("puts StaticTracing.providers[:rails].tracepoints.keys.join(' ')")
    expect(status).to be_success, err
    expect(out.strip).to eq("sql_active_record cache_read_active_support")
  end

  it "runs each request in its traceparent's trace context, from the first middleware on, unless told not to" do
    request = <<~RUBY
      seen = []
      ActiveSupport::Notifications.subscribe("process_action.action_controller") do
        seen << StaticTracing.current_trace_context&.to_s
      end
      header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
      status, = Rails.application.call(Rack::MockRequest.env_for("/users", "HTTP_TRACEPARENT" => header))
      Rails.application.call(Rack::MockRequest.env_for("/users"))
      puts JSON.generate(first: Rails.application.middleware.first.klass.name, status:, seen:,
                         after: StaticTracing.current_trace_context)
    RUBY
    out, err, status = boot(request)
    expect(status).to be_success, err
    expect(JSON.parse(out)).to eq("first" => "StaticTracing::TraceContextMiddleware", "status" => 200,
                                  "seen" => ["trace 4bf92f3577b34da6a3ce929d0e0e4736 span 00f067aa0ba902b7", nil],
                                  "after" => nil)

    initializer(%(Rails.application.config.static_tracing.trace_context = false\n))
    out, err, status = boot(request)
    expect(status).to be_success, err
    expect(JSON.parse(out)).to include("seen" => [nil, nil])
    expect(JSON.parse(out)["first"]).not_to eq("StaticTracing::TraceContextMiddleware")
  end

  it "stops the boot on bad config, naming the setting, the value and what it takes" do
    initializer(%(Rails.application.config.static_tracing.trace_actions = "yes"\n))
    _, err, status = boot("puts :booted")
    expect(status).not_to be_success
    expect(err).to match(/config\.static_tracing\.trace_actions "yes": give true or false \(ArgumentError\)/)

    initializer(%(Rails.application.config.static_tracing.events = %w[sql.activerecord]\n))
    _, err, status = boot("puts :booted")
    expect(status).not_to be_success
    expect(err).to match(/unknown event "sql\.activerecord"; the events are sql\.active_record.*\(ArgumentError\)/)
  end

  it "traces every method controllers define (Rails's _layout too) with LatencyTracer under trace_actions, " \
     "and none without" do
    code = "puts StaticTracing.providers.key?(:users_controller) && " \
           "StaticTracing.providers[:users_controller].tracepoints.keys.sort.join(' ')"
    out, err, status = boot(code, env: { "TRACE_ACTIONS" => "1" })
    expect(status).to be_success, err
    expect(out.strip).to eq("_layout greeting index show static_tracing")

    out, err, status = boot(code)
    expect(status).to be_success, err
    expect(out.strip).to eq("false")
  end

  it "boots and serves where the extension cannot load, saying once that Rails events are not traced" do
    lib = File.join(Dir.mktmpdir("static_tracing-lib", @root), "lib")
    FileUtils.cp_r(E2E::LIB, lib)
    FileUtils.rm_f(File.join(lib, "static_tracing", "static_tracing.so"))
    out, err, status = boot('p app_get("/users")[0]', env: { "TRACE_ACTIONS" => "1" }, lib:)
    expect(status).to be_success, err
    expect(out.strip).to eq("200")
    warning = /static_tracing: Rails events are not traced in this process: the gem did not load .*LoadError/
    expect(err.scan(warning).size).to eq(1)
  end

  it "boots and serves where USDT probes are unsupported, watching nothing" do
    prelude = "require 'static_tracing'\nmodule StaticTracing::Native\n  def self.supported? = false\nend"
    out, err, status = boot(<<~RUBY, env: { "STATIC_TRACING_MODE" => "attach" }, prelude:)
      tracepoints = StaticTracing.providers[:rails].tracepoints.values
      p [app_get("/users")[0], tracepoints.size, tracepoints.any? { |tp| StaticTracing::Watcher.watching?(tp) }]
    RUBY
    expect(status).to be_success, err
    expect(out.strip).to eq("[200, #{StaticTracing::Rails::EVENTS.size}, false]")
  end
end
