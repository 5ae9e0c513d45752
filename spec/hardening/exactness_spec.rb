# frozen_string_literal: true

# N calls while a tracer is attached are exactly N probe hits: from many
# threads at once, and while the provider's image is reloaded in place
# under the tracer by another thread adding tracepoints.
RSpec.describe "Exactness under threads and reloads", :e2e do
  threads = 8
  calls = 5_000

  let(:app) do
    ruby_repl(<<~RUBY)
      StaticTracing::Configuration.mode = :on
      class ExactWorker
        include StaticTracing::LatencyTracer
        def work(index) = index
      end

      # Runs +threads+ threads of +calls+ calls each, which give way to one
      # another (and to anything else) every few calls so that they
      # interleave, as the GVL would let them run whole otherwise.
      def hammer(threads, calls, &call)
        progress = Array.new(threads, 0)
        workers = Array.new(threads) do |thread|
          Thread.new do
            calls.times do |index|
              call.call(index, thread)
              progress[thread] = index + 1
              Thread.pass if (index % 25).zero?
            end
          end
        end
        [workers, progress]
      end

      # Adds a tracepoint to +provider+ whenever it gets the GVL, until the
      # workers are done; returns how many it added while calls were under
      # way, and how many in all.
      def add_while(provider, workers, progress, total)
        added_during = 0
        added = 0
        while workers.any?(&:alive?)
          done = progress.sum
          provider.add_tracepoint(:"extra_\#{added += 1}", Integer)
          added_during += 1 if done.positive? && progress.sum < total
          Thread.pass
        end
        [added_during, added]
      end
    RUBY
  end

  def counts(output)
    per_thread = output.scan(/^@per_thread\[\d+\]: (\d+)$/).flatten.map(&:to_i)
    [output[/^@calls: (\d+)$/, 1].to_i, per_thread]
  end

  it "counts every call of a traced method from #{threads} threads exactly" do
    expect(app.evaluate("ExactWorker.instance_method(:work).owner == ExactWorker")).to be(false)
    tracer = attach_bpftrace(app.pid, "usdt:*:exact_worker:work { @calls = count(); @per_thread[tid] = count(); }")
    expect(app.evaluate(<<~RUBY, timeout: 60)).to eq(threads * calls)
      worker = ExactWorker.new
      workers, progress = hammer(#{threads}, #{calls}) { |index| worker.work(index) }
      workers.each(&:join)
      progress.sum
    RUBY
    hits, per_thread = counts(tracer.finish)
    expect(hits).to eq(threads * calls)
    expect(per_thread).to eq([calls] * threads)
  end

  it "counts every call exactly while another thread reloads the provider in place under the tracer" do
    path = app.evaluate("StaticTracing.providers[:exact_worker].path")
    inode = File.stat(path).ino
    tracer = attach_bpftrace(app.pid, "usdt:*:exact_worker:work { @calls = count(); @per_thread[tid] = count(); }")
    added_during, added = app.evaluate(<<~RUBY, timeout: 60)
      provider = StaticTracing.providers[:exact_worker]
      worker = ExactWorker.new
      workers, progress = hammer(#{threads}, #{calls}) { |index| worker.work(index) }
      counts = add_while(provider, workers, progress, #{threads * calls})
      workers.each(&:join)
      counts
    RUBY
    expect(added_during).to be >= 20
    hits, per_thread = counts(tracer.finish)
    expect(hits).to eq(threads * calls)
    expect(per_thread).to eq([calls] * threads)

    # Every add was a reload of the same file, which the tracer stayed attached to.
    expect(app.evaluate("StaticTracing.providers[:exact_worker].path")).to eq(path)
    expect(File.stat(path).ino).to eq(inode)
    expect(app.evaluate("StaticTracing.providers[:exact_worker].tracepoints.size")).to eq(added + 1)
  end

  it "counts every Tracepoint#fire from #{threads} threads exactly, arguments intact" do
    app.evaluate("plain = StaticTracing::Provider.register(:exact_plain)")
    app.evaluate("hit = plain.add_tracepoint(:hit, Integer, String); plain.load")
    # Each thread fires 0...calls with its own tag: any lost, doubled or
    # mixed-up fire changes the sums or the per-tag counts.
    tracer = attach_bpftrace(app.pid, "usdt:*:exact_plain:hit { @fires[str(arg1)] = count(); @sum = sum(arg0); }")
    fired = app.evaluate(<<~RUBY, timeout: 60)
      workers, = hammer(#{threads}, #{calls}) { |index, thread| hit.fire(index, "thread-\#{thread}") }
      workers.each(&:join)
      :done
    RUBY
    expect(fired).to eq(:done)
    output = tracer.finish
    per_tag = output.scan(/^@fires\[(thread-\d+)\]: (\d+)$/).to_h.transform_values(&:to_i)
    expect(per_tag).to eq(Array.new(threads) { |thread| ["thread-#{thread}", calls] }.to_h)
    expect(output[/^@sum: (\d+)$/, 1].to_i).to eq(threads * (calls * (calls - 1) / 2))
  end
end
