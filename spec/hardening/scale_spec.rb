# frozen_string_literal: true

# Thousands of probes: one provider of 10,000, and 500 providers of 10,
# listed exactly by bpftrace, fired through it on a sample, and gone
# without a trace when unloaded.
RSpec.describe "Thousands of probes", :e2e do
  include_context "with a private stub directory"

  let(:app) { ruby_repl("", env: { "STATIC_TRACING_DIR" => @stub_dir }) }

  def listed(pid, pattern)
    bpftrace_list(pid, pattern).map { |line| line.split(":", 4).values_at(2, 3).join(":") }
  end

  def counts(output)
    hits = output.scan(/^@hits\[usdt:[^\]]*:(\w+):(\w+)\]: (\d+)$/)
    hits.to_h { |provider, probe, count| ["#{provider}:#{probe}", count.to_i] }
  end

  it "loads one provider of 10,000 probes, lists them all, fires a sample and unloads it" do
    path = app.evaluate(<<~'RUBY', timeout: 60)
      $big = StaticTracing::Provider.register(:big)
      10_000.times { |index| $big.add_tracepoint(:"probe_#{index}", Integer) }
      $big.load.path
    RUBY
    expect(stub_files(app.pid)).to eq([File.basename(path)])
    expect(File.read("/proc/#{app.pid}/maps")).not_to include("(deleted)")

    all = listed(app.pid, "usdt:*")
    expect(all.grep(/\Abig:/).sort).to eq(Array.new(10_000) { |index| "big:probe_#{index}" }.sort)
    expect(all.grep(/\Abig:/).uniq.size).to eq(10_000)

    # bpftrace 0.17 reads all 10,000 notes again for each probe it attaches: a small sample.
    # Even so it takes 10 s of CPU to attach these three, and took 58 s with the
    # machine's two cores busy: the wait is for it to be attached, however long.
    sample = [0, rand(1...9_999), 9_999]
    program = sample.map { |index| "usdt:*:big:probe_#{index} { @hits[probe] = count(); @arg[probe] = sum(arg0); }" }
                    .join(" ")
    tracer = attach_bpftrace(app.pid, program, timeout: 300)
    fired = app.evaluate(<<~RUBY, timeout: 60)
      points = $big.tracepoints
      (0...10_000).select { |index| points[:"probe_\#{index}"].fire(index) }
    RUBY
    # Every probe fired once; only the attached ones reach the tracer.
    expect(fired).to match_array(sample)
    output = tracer.finish
    expect(counts(output)).to eq(sample.to_h { |index| ["big:probe_#{index}", 1] })
    args = output.scan(/^@arg\[usdt:[^\]]*:big:probe_(\d+)\]: (\d+)$/).map { |pair| pair.map(&:to_i) }
    expect(args).to match_array(sample.map { |index| [index, index] })

    app.evaluate("$big.unload")
    expect(stub_files(app.pid)).to be_empty
    expect(listed(app.pid, "usdt:*:big:*")).to be_empty
  end

  it "loads 500 providers of 10 probes, lists them all, fires a sample and unloads them" do
    paths = app.evaluate(<<~'RUBY', timeout: 60)
      $many = Array.new(500) do |index|
        provider = StaticTracing::Provider.register(:"many_#{index}")
        10.times { |probe| provider.add_tracepoint(:"probe_#{probe}", Integer) }
        provider.load
      end
      $many.map(&:path)
    RUBY
    expect(paths.uniq.size).to eq(500)
    expect(stub_files(app.pid)).to match_array(paths.map { |path| File.basename(path) })

    all = listed(app.pid, "usdt:*").grep(/\Amany_/)
    expected = Array.new(500) { |provider| Array.new(10) { |probe| "many_#{provider}:probe_#{probe}" } }.flatten
    expect(all.sort).to eq(expected.sort)

    sample = ([0, 499] + Array.new(8) { rand(500) }).uniq.map { |provider| [provider, rand(10)] }
    program = sample.map { |provider, probe| "usdt:*:many_#{provider}:probe_#{probe} { @hits[probe] = count(); }" }
                    .join(" ")
    tracer = attach_bpftrace(app.pid, program, timeout: 60)
    fired = app.evaluate(<<~RUBY, timeout: 60)
      $many.flat_map { |provider| provider.tracepoints.values.map { |point| [provider.name, point.name, point.fire(1)] } }
           .select(&:last).map { |provider, point, _| "\#{provider}:\#{point}" }
    RUBY
    expected_hits = sample.map { |provider, probe| "many_#{provider}:probe_#{probe}" }
    expect(fired).to match_array(expected_hits)
    expect(counts(tracer.finish)).to eq(expected_hits.to_h { |probe| [probe, 1] })

    app.evaluate("$many.each(&:unload)")
    expect(stub_files(app.pid)).to be_empty
    expect(listed(app.pid, "usdt:*:many_*:*")).to be_empty
    expect(File.read("/proc/#{app.pid}/maps")).not_to include("#{@stub_dir}/many_")
  end
end
