# frozen_string_literal: true

require "json"
require "rbconfig"
require "static_tracing/cli"

# Text the command prints that another process wrote (its state file, its
# replies) is data: a process of an unprivileged user that rewrites its
# state file cannot drive root's terminal (OSC 0 sets its title, OSC 52
# its clipboard, CSI 2J clears it) nor forge a line of the command's own.
# Each such character is shown escaped, as a Ruby literal writes it.
RSpec.describe "Text from another process, as the command prints it", :subprocess do
  include CLIHelpers

  let(:unprivileged) { E2E::Unprivileged }
  let(:hostile) { "\e]0;owned\a\e[2J\e]52;c;ZXZpbA==\a\u009b31m\u202e\nstatic-tracing: forged line" }
  let(:escaped) { "\\e]0;owned\\a\\e[2J\\e]52;c;ZXZpbA==\\a\\u009B31m\\u202E\\nstatic-tracing: forged line" }

  before { require_unprivileged! }

  # A process of that user that loads the gem and rewrites its own state
  # file: its last recording "ended" with +reason+, it "runs" +version+.
  def rewriting_process
    E2E::Repl.new(<<~'RUBY', env: unprivileged::ENV_RESET,
      require "json"
      $provider = StaticTracing::Provider.register(:hostile_text)
      $provider.add_tracepoint(:hello)
      $provider.load

      def rewrite(fields)
        path = StaticTracing::State.path
        File.write(path, JSON.generate(JSON.parse(File.read(path)).merge(JSON.parse(fields))))
        true
      end
    RUBY
                             ruby: [RbConfig.ruby, "-I", File.join(E2E.portable_root, "lib")],
                             prefix: unprivileged.command).tap { |child| started_processes << child }
  end

  def command(*args)
    E2E::Child.new(RbConfig.ruby, CLIHelpers::EXE, *args).tap do |child|
      started_processes << child
      child.wait(timeout: 30)
    end
  end

  it "escapes the reason of a recording's end that dump quotes" do
    child = rewriting_process
    child.evaluate("rewrite(#{JSON.generate(JSON.generate("recorder_ended" => { "id" => "x", "reason" => hostile }))})")
    output = command("dump", child.pid.to_s, "-o", File.join(Dir.tmpdir, "never-#{child.pid}.trace")).output
    expect(output).to include("its last recording ended: #{escaped})")
    expect(output.lines.size).to eq(1)
    expect(output).not_to match(/[\e\a\u009b\u202e]/)
  end

  it "escapes the version a process claims, which the command quotes when it takes no requests" do
    child = rewriting_process
    fields = JSON.generate("version" => "9#{hostile}", "control" => nil)
    child.evaluate("rewrite(#{JSON.generate(fields)})")
    output = command("record", child.pid.to_s, "--flight").output
    expect(output).to include("it runs static_tracing 9#{escaped}, which has no recorder")
    expect(output.lines.size).to eq(1)
    expect(output).not_to match(/[\e\a\u009b\u202e]/)
  end

  it "sends no control character to stderr whatever a message quotes" do
    err = StringIO.new
    output = StaticTracing::CLI::Output.new(err, "stderr", text: true)
    output.puts("static-tracing: process 1 refused: #{hostile}")
    output.print("a\tb\n")
    expect(err.string).to eq("static-tracing: process 1 refused: #{escaped.sub("\\n", "\n")}\na\tb\n")
  end
end
