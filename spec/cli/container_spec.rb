# frozen_string_literal: true

require "json"
require "open3"

# `static-tracing` run on the host, by host PID, against a Ruby process in a
# pid and mount namespace of its own (a container, as far as the command
# can tell): pid 1 there, with a /tmp of its own where it publishes its stubs
# and its state.
RSpec.describe "static-tracing against a process in its own pid and mount namespace", :subprocess do
  # Prints its pid as it sees it, then answers whether tracing is on.
  let(:script) do
    <<~'RUBY'
      $stdout.sync = true
      provider = StaticTracing::Provider.register(:container_app)
      provider.add_tracepoint(:tick, Integer)
      provider.load
      puts "READY #{Process.pid}"
      while (line = $stdin.gets)
        puts "ENABLED #{StaticTracing.enabled?}" if line.strip == "enabled?"
      end
    RUBY
  end

  # Why such a process cannot be started here, or nil.
  def self.unavailable_reason
    return "needs root to create namespaces and mount (running as uid #{Process.euid})" unless Process.euid.zero?
    return "unshare(1) is not installed" unless system("command -v unshare >/dev/null 2>&1")

    out, status = Open3.capture2e("unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
                                  "mount -t tmpfs tmpfs /tmp && test $$ = 1")
    "unshare --pid --fork --mount-proc cannot run here: #{out.strip}" unless status.success?
  end

  before do
    skip "USDT probes are not supported on #{RUBY_PLATFORM}" unless StaticTracing.supported?
    reason = self.class.unavailable_reason or next
    cannot_run!(reason)
  end

  # The Ruby process in the namespaces, and its pid on the host. The gem is
  # the portable copy: the checkout may be under the /tmp it cannot see.
  def start_contained
    lib = File.join(E2E.portable_root, "lib")
    unshare = E2E::Child.new("unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
                             'mount -t tmpfs tmpfs /tmp && exec "$0" -I "$1" -r static_tracing -e "$2"',
                             RbConfig.ruby, lib, script)
    started_processes << unshare
    expect(unshare.wait_for(/^READY (\d+)$/)[1]).to eq("1")
    [unshare, host_pid_of_child(unshare.pid)]
  end

  def host_pid_of_child(parent)
    Dir.glob("/proc/[0-9]*/status").each do |status|
      return Integer(File.basename(File.dirname(status)), 10) if File.read(status)[/^PPid:\s*(\d+)$/, 1] == parent.to_s
    rescue SystemCallError
      next
    end
    raise "no child of process #{parent}"
  end

  def enabled?(contained)
    mark = contained.output.size
    contained.puts("enabled?")
    contained.wait_for(/^ENABLED (true|false)$/, from: mark)[1] == "true"
  end

  def expect_success(result, stdout)
    expect(result).to have_attributes(exitstatus: 0, stderr: "", stdout:)
  end

  it "lists, enables, toggles and disables it by its host PID" do
    contained, pid = start_contained
    expect(pid).not_to eq(1)
    expect(File.read("/proc/#{pid}/status")[/^NSpid:\s*(.*)$/, 1].split).to eq([pid.to_s, "1"])

    listed = run_cli("list", pid)
    expect(listed).to have_attributes(exitstatus: 0, stderr: "")
    expect(listed.stdout).to start_with("PID #{pid}: 1 provider, 1 probe, 0 attached; mode signal (SIGTRAP), " \
                                        "tracing disabled\n")
    state = JSON.parse(run_cli("list", "--json", pid).stdout)["tracing"]
    expect(state["state_file"]).to eq("/tmp/static_tracing-0/1-#{File.stat("/proc/#{pid}/ns/pid").ino}.state")

    expect_success(run_cli("enable", pid), "Tracing enabled in process #{pid} (sent SIGTRAP).\n")
    expect(enabled?(contained)).to be(true)
    expect(run_cli("list", pid).stdout).to start_with("PID #{pid}: 1 provider, 1 probe, 0 attached; " \
                                                      "mode signal (SIGTRAP), tracing enabled\n")

    expect_success(run_cli("toggle", pid), "Tracing disabled in process #{pid} (sent SIGTRAP).\n")
    expect(enabled?(contained)).to be(false)
    expect_success(run_cli("enable", pid), "Tracing enabled in process #{pid} (sent SIGTRAP).\n")
    expect_success(run_cli("disable", pid), "Tracing disabled in process #{pid} (sent SIGTRAP).\n")
    expect(enabled?(contained)).to be(false)
    expect(contained).to be_alive
  end
end
