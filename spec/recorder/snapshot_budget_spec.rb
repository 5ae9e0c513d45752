# frozen_string_literal: true

require "tmpdir"
require "static_tracing/cli"

# Trigger snapshots within a budget: each holds the slow call and a bounded
# window before it, not the whole ring, and the dump directory's budget
# (--max-dumps files, --max-dump-bytes bytes) holds for every process
# writing there: workers a master replaces, and masters restarted.
RSpec.describe "Trigger snapshots within a budget", :subprocess do
  include CLIHelpers
  include E2E::Recording

  let(:record) do
    "--size 1M --dump-when 'budget_app:request > 100ms' --dump-interval 0 --max-dumps 5 " \
      "--max-dump-bytes 2M --dump-records 100 --dump-dir #{dir}"
  end

  let(:dir) { Dir.mktmpdir("static_tracing-budget") }

  after { FileUtils.rm_rf(dir) }

  # A master recording from boot (STATIC_TRACING_RECORD) that forks
  # +workers+ workers one after another, each replacing the last, each
  # making 3 slow calls after 2,000 fast ones; a worker waits for what
  # its process says of each snapshot before the next slow call.
  def master(workers)
    script = <<~RUBY
      $stdout.sync = true
      request = StaticTracing::Tracepoint.new(:budget_app, :request, Integer, latency: 0)
      #{workers}.times do
        pid = fork do
          said = Queue.new
          $stderr = Object.new.tap do |io|
            io.define_singleton_method(:write) { |*text| said << text.join; STDERR.write(*text) }
          end
          3.times do |n|
            2_000.times { request.fire(1_000) }
            request.fire(300_000_000 + n)
            deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 20
            sleep 0.01 while said.empty? && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
            raise "no word of the snapshot" if said.empty?
            said.pop
          end
          exit!(0)
        end
        Process.wait(pid)
        raise "worker failed: \#{$?.inspect}" unless $?.success?
      end
      puts "master done"
    RUBY
    ruby_process(script, env: { "STATIC_TRACING_RECORD" => record })
  end

  it "keeps every process writing into one directory, replaced workers and restarted masters, within its budget" do
    2.times do
      process = master(3)
      process.wait_for(/^master done$/, timeout: 60)
      expect(process.wait.success?).to be(true), process.output
    end

    snapshots = Dir[File.join(dir, "*.trace")]
    # 2 masters x 3 workers x 3 slow calls: the first 5 are kept.
    expect(snapshots.size).to eq(5)
    expect(snapshots.sum { |path| File.size(path) }).to be <= 2 * 1024 * 1024
    snapshots.each do |path|
      records = read_trace(path).records
      slow = records.select { |record| record.args.first >= 300_000_000 }
      expect(slow.size).to eq(1), path
      # The slow call and the 99 records before it, not the ring's 32768.
      expect(records.size).to eq(100)
      expect(records.last).to eq(slow.first)
    end
  end
end
