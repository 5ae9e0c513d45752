# frozen_string_literal: true

require "fileutils"
require "tmpdir"
require "static_tracing/cli"

# What the command says about the process behind a PID before it reads
# anything else: a kernel thread is not a program, and a refusal names what
# actually blocks, not a remedy that is already in effect.
RSpec.describe StaticTracing::CLI::ProcessDir do
  let(:pid) { 4_194_301 }
  let(:root) { Dir.mktmpdir("process_dir") }
  let(:proc_dir) { File.join(root, "proc") }

  after { FileUtils.rm_rf(root) }

  # /proc/PID with a stat whose flags and parent are given, and a command line.
  def fake_process(flags: 0, ppid: 1, cmdline: "ruby\0app.rb\0", comm: "ruby")
    dir = File.join(proc_dir, pid.to_s)
    FileUtils.mkdir_p(dir)
    fields = ["S", ppid.to_s, *Array.new(4, "0"), flags.to_s, *Array.new(43, "0")]
    File.write(File.join(dir, "stat"), "#{pid} (#{comm}) #{fields.join(" ")}\n")
    File.write(File.join(dir, "cmdline"), cmdline)
    File.write(File.join(dir, "comm"), "#{comm}\n")
    dir
  end

  describe "a kernel thread" do
    it "is refused as a kernel thread that runs no Ruby, when the kernel flags it" do
      fake_process(flags: 0x00208040, ppid: 2, cmdline: "", comm: "kworker/0:1")
      expect { described_class.new(pid, proc_dir:) }.to raise_error(StaticTracing::CLI::Error) { |error|
        expect(error.message).to include("process #{pid} is a kernel thread (kworker/0:1)", "runs no Ruby")
        expect(error.message).not_to include("exited")
      }
    end

    it "is recognized without the flag as a child of kthreadd with no command line" do
      fake_process(ppid: 2, cmdline: "", comm: "ksoftirqd/0")
      expect { described_class.new(pid, proc_dir:) }.to raise_error(StaticTracing::CLI::Error, /kernel thread/)
    end

    it "is not a process that has a command line" do
      fake_process(ppid: 2)
      expect(described_class.new(pid, proc_dir:).pid).to eq(pid)
    end
  end

  it "refuses a real kernel thread (kthreadd, or any flagged one) by what it is, through the command" do
    thread = Dir.glob("/proc/[0-9]*/stat").find do |stat|
      (Integer(File.read(stat).rpartition(")").last.split[6], 10) & 0x00200000).nonzero?
    rescue SystemCallError
      false
    end
    skip "no kernel thread is visible in this pid namespace" unless thread

    kernel_pid = Integer(File.basename(File.dirname(thread)), 10)
    %w[list enable latency].each do |command|
      result = cli(command, kernel_pid)
      expect(result).to have_attributes(exitstatus: 1, stdout: "")
      expect(result.stderr).to include("process #{kernel_pid} is a kernel thread", "runs no Ruby")
      expect(result.stderr).not_to include("exited")
    end
  end

  describe "#permission_message" do
    let(:process) do
      fake_process
      described_class.new(pid, proc_dir:)
    end

    it "does not tell root to run as root: it names what blocks root" do
      allow(Process).to receive(:euid).and_return(0)
      message = process.permission_message("reading /proc/#{pid}/environ")
      expect(message).to include("reading /proc/#{pid}/environ", "runs as root", "ptrace", "security module",
                                 "container")
      expect(message).not_to match(/run static-tracing as root|you as uid/)
    end

    it "does not call equal uids a mismatch" do
      process
      owner = 4242
      if Process.euid.zero?
        File.chown(owner, nil, File.join(proc_dir, pid.to_s))
      else
        owner = Process.euid
      end
      allow(Process).to receive(:euid).and_return(owner)
      message = process.permission_message("reading /proc/#{pid}/maps")
      expect(message).to include("process #{pid} runs as your uid #{owner}", "ptrace", "run static-tracing as root")
      expect(message).not_to include("you as uid")
    end

    it "names both uids when they differ" do
      allow(Process).to receive(:euid).and_return(4243)
      process
      owner = File.stat(File.join(proc_dir, pid.to_s)).uid
      expect(process.permission_message("reading /proc/#{pid}/maps"))
        .to include("process #{pid} runs as uid #{owner}, you as uid 4243", "as root or as uid #{owner}")
    end
  end
end
