# frozen_string_literal: true

# A real Rails app (spec/support/rails_app.rb: SQLite, one model, one
# controller) served by puma in attach mode, traced by the real bpftrace
# through provider rails.
RSpec.describe "A Rails app traced through provider rails", :e2e, :rails do
  let(:app) { start_rails_app(env: { "STATIC_TRACING_MODE" => "attach" }) }

  # The counts of a bpftrace histogram's buckets, from its printed lines.
  def bucket_counts(output, map)
    section = output[/^@#{map}: *\n((?:\[.*\n)+)/, 1] or raise "no histogram @#{map} in:\n#{output}"
    section.lines.map { |line| Integer(line[/\A\[[^\]]*[\])]\s+(\d+)\s+\|/, 1]) }
  end

  # bpftrace's printed map +map+ with String (or String, Integer) keys: {"key" => count}.
  def counts(output, map)
    output.scan(/^@#{map}\[(.+)\]: (\d+)$/).to_h.transform_values { |count| Integer(count) }
  end

  def ours_subscribed(events)
    tracing = app.tracing
    tracing["subscribed"].sort == events.sort &&
      tracing["listeners"] == StaticTracing::Rails::EVENTS.keys.to_h { |event| [event, events.include?(event) ? 1 : 0] }
  end

  it "subscribes only while bpftrace is attached; a SQL latency histogram adds up to the queries made, " \
     "and each request is one process_action" do
    wait_until_listed(app.pid, "usdt:*:rails:*", count: StaticTracing::Rails::EVENTS.size)
    app.get("/users") # the thread's database connection and the schema, before counting
    expect(ours_subscribed([])).to be(true)

    bpftrace = attach_bpftrace(app.pid, <<~BPF)
      usdt:*:rails:sql_active_record { @sql = hist(arg0); @queries[str(arg1)] = count(); }
      usdt:*:rails:process_action_action_controller { @actions[str(arg1), arg2] = count(); }
    BPF
    eventually("the app subscribed to the two events traced") do
      ours_subscribed(%w[sql.active_record process_action.action_controller])
    end

    requests = 5
    requests.times { app.get("/users") }
    app.get("/users/999", status: 404)
    output = bpftrace.finish

    buckets = bucket_counts(output, "sql")
    expect(buckets.sum).to eq((2 * requests) + 1)
    expect(buckets.size).to be >= 1
    # The index's User.count: Rails 6.1 names it "SQL" (no name), 7.x "User Count".
    count_name = Gem::Version.new(app.tracing["rails"]) < Gem::Version.new("7") ? "SQL" : "User Count"
    expect(counts(output, "queries")).to eq("User Load" => requests + 1, count_name => requests)
    actions = counts(output, "actions")
    expect(actions.reject { |key, _| key.start_with?("UsersController#static_tracing") })
      .to eq("UsersController#index, 200" => requests, "UsersController#show, 404" => 1)

    eventually("the app unsubscribed once bpftrace left") { ours_subscribed([]) }
  end

  it "labels templates and cache reads, hits and misses told apart" do
    wait_until_listed(app.pid, "usdt:*:rails:*", count: StaticTracing::Rails::EVENTS.size)
    bpftrace = attach_bpftrace(app.pid, <<~BPF)
      usdt:*:rails:render_template_action_view { @templates[str(arg1)] = count(); }
      usdt:*:rails:cache_read_active_support { @reads[str(arg1), arg2] = count(); }
    BPF
    eventually("the app subscribed to the two events traced") do
      ours_subscribed(%w[render_template.action_view cache_read.active_support])
    end

    3.times { expect(app.get("/greeting")).to eq("hello") }
    2.times { app.get("/users") }
    output = bpftrace.finish

    expect(counts(output, "templates")).to eq("users/index.html.erb" => 2, "text template" => 3) # render plain:
    expect(counts(output, "reads")).to eq("greeting, 0" => 1, "greeting, 1" => 2)
  end
end
