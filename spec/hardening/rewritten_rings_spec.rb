# frozen_string_literal: true

require "net/http"
require "rbconfig"
require "static_tracing/cli"

# A process's ring is its user's file, which that process may rewrite
# while the command reads it: a table that shrinks, a string limit
# lowered, an anchor moved, counters sent back. Nothing it writes there
# may crash, stall or fool the reader: export (run as root, serving every
# process that records) goes on serving the others, and marks that ring's
# series; record keeps what it read, in a trace file its own report reads.
# The processes run as an unprivileged user, as a hostile one would.
RSpec.describe "Rings rewritten by their processes under the reader", :subprocess do
  include CLIHelpers
  include E2E::Recording

  let(:unprivileged) { E2E::Unprivileged }
  # Where the fields are, from the specs' own layout of the format.
  let(:field) { RingImage::FIELDS }

  before { require_unprivileged! }

  # A process of that user that records from boot (STATIC_TRACING_RECORD)
  # two latency probes, calls them when told to, and reads (#peek) and
  # rewrites (#poke) a field of its own ring's header.
  def recording_process(record = "--flight --size 64K")
    env = unprivileged::ENV_RESET.merge("STATIC_TRACING_RECORD" => record)
    ruby = [RbConfig.ruby, "-I", File.join(E2E.portable_root, "lib")]
    E2E::Repl.new(rewriting_app, env:, ruby:, prefix: unprivileged.command)
             .tap { |child| started_processes << child }
  end

  let(:rewriting_app) do
    <<~'RUBY'
      class RewritingApp
        include StaticTracing::LatencyTracer
        def index = nil
        def show = nil
      end

      def calls(count)
        count.times do
          RewritingApp.new.index
          RewritingApp.new.show
        end
        count
      end

      def peek((offset, directive))
        File.open(StaticTracing::Recorder.status.fetch("ring"), "rb") do |ring|
          ring.pread([0].pack(directive).bytesize, offset).unpack1(directive)
        end
      end

      def poke((offset, directive), value)
        File.open(StaticTracing::Recorder.status.fetch("ring"), "r+b") { |ring| ring.pwrite([value].pack(directive), offset) }
      end
    RUBY
  end

  def calls(child, count)
    child.evaluate("calls(#{count})")
  end

  def peek(child, name)
    child.evaluate("peek(#{field.fetch(name).inspect})")
  end

  def poke(child, name, value)
    child.evaluate("poke(#{field.fetch(name).inspect}, #{value})")
  end

  describe "export, as root, of every process that records" do
    def start_export
      command = E2E::Child.new(RbConfig.ruby, CLIHelpers::EXE, "export", "--listen", "127.0.0.1:0")
      started_processes << command
      @address = command.wait_for(%r{ at http://(\S+)/metrics \(Ctrl-C to stop\)$})[1]
      command
    end

    def scrape
      response = Net::HTTP.start(*@address.split(":"), open_timeout: 5, read_timeout: 20) do |http|
        http.get("/metrics")
      end
      expect(response.code).to eq("200"), response.body
      PrometheusText.parse(response.body)
    end

    def counted(families, *pids)
      PrometheusText.values(families, "static_tracing_probe_calls_total", by: %i[pid probe])
                    .select { |(pid, _), _| pids.include?(pid.to_i) }
    end

    def refused(families, pid)
      PrometheusText.values(families, "static_tracing_ring_refused", by: [:pid])[[pid.to_s]]
    end

    {
      "shrinks its probe table" => [:table_used, ->(used) { used / 2 }],
      "moves its anchor" => [:anchor_monotonic_ns, ->(anchor) { anchor + 1 }],
      "sends its head back" => [:head, ->(_head) { 0 }]
    }.each do |what, (name, rewrite)|
      it "serves the others when one #{what}, marks its series, and counts nothing twice" do
        hostile, bystander = Array.new(2) { recording_process }
        calls(hostile, 100)
        calls(bystander, 7)
        export = start_export
        ids = [hostile.pid, bystander.pid]
        expect(counted(scrape, *ids).values).to eq([100, 100, 7, 7])
        before = counted(scrape, hostile.pid)

        # The field rewritten, then put back: the ring is read no more, and
        # its series stay as they were; the other process is read on.
        original = peek(hostile, name)
        poke(hostile, name, rewrite.call(original))
        calls(hostile, 50)
        calls(bystander, 3)
        families = scrape
        expect(counted(families, hostile.pid)).to eq(before)
        expect(counted(families, bystander.pid).values).to eq([10, 10])
        expect(refused(families, hostile.pid)).to eq(1)
        expect(refused(families, bystander.pid)).to eq(0)

        poke(hostile, name, original)
        3.times do
          families = scrape
          expect(counted(families, hostile.pid)).to eq(before)
          expect(refused(families, hostile.pid)).to eq(1)
        end
        said = export.wait_for(/^static-tracing: process #{hostile.pid}: .*$/, timeout: 10)[0]
        expect(said).to match(/the ring was rewritten since it was last read: .*; it is read no more\z/)
        expect(export.output.lines.grep(/process #{hostile.pid}/).size).to eq(1)
        expect(export.output).not_to match(/panicked|fatal|internal error/)
        expect(export.alive?).to be(true)
      end
    end
  end

  describe "record, as root, of a process that rewrites its ring as it is read" do
    it "writes what it read before, in a trace file its own report reads, and says why it stopped" do
      child = recording_process(nil)
      dir = Dir.mktmpdir("rewritten")
      trace = File.join(dir, "rewritten.trace")
      command = E2E::Child.new(RbConfig.ruby, CLIHelpers::EXE, "record", child.pid.to_s, "-o", trace)
      started_processes << command
      command.wait_for(/^Recording /)
      calls(child, 30)
      # Read: record frees the slots it read by moving the ring's tail.
      eventually("record read the 60 records") { peek(child, :tail) == 60 }

      poke(child, :table_used, peek(child, :table_used) / 2)
      expect(command.wait(timeout: 20).exitstatus).to eq(1), command.output
      expect(command.output).to include("the ring was rewritten since it was last read: its probe table shrank")
      expect(command.output).to match(/^Wrote 60 records to #{Regexp.escape(trace)}, /)
      report = run_cli("report", trace)
      expect(report).to have_attributes(exitstatus: 0, stderr: "")
      expect(report.stdout).to match(/^rewriting_app:index  30 calls/).and match(/^rewriting_app:show  30 calls/)
    ensure
      FileUtils.rm_rf(dir) if dir
    end
  end
end
