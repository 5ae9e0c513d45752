# frozen_string_literal: true

require "open3"
require "rbconfig"
require "shellwords"
require "tempfile"
require_relative "docs/code_blocks"
require_relative "docs/ruby_example"
require_relative "docs/shell_commands"
require_relative "docs/transcript"

# Every fenced code block of README.md and docs/*.md runs, by its language
# and the `<!-- doc: ... -->` comment on the line before its fence:
#
# ```ruby     runs top to bottom in a fresh Ruby (-Ilib -rstatic_tracing) and
#             raises nothing; `# => value` and `# ~> Error: message` comments
#             are checked (Docs::RubyExample). `continue`: appended to the
#             file's previous ruby block; `rackup`: a config.ru excerpt, run
#             in a Rack::Builder that serves one request.
# ```sh       parses (bash -n); each bpftrace command is compiled and attached
#             (BEGIN { exit(); } added) or, with -l, lists probes, against a
#             process that has every provider the docs trace (PID, WORKER_PID,
#             $UNICORN_WORKER_PID, STUB_PATH stand for it); tplist-bpfcc reads
#             that stub; paths into the repository exist; rake tasks exist.
# ```console  a transcript (Docs::Transcript): each `$ command` runs, with
#             exe/ on PATH, and prints what is shown. `processes PID=NAME ...`:
#             PID stands for a process running spec/docs/fixtures/NAME.rb.
#             `output of `COMMAND``: the whole block is what COMMAND prints.
# ```text     needs a marker: `paths` (each line starts with a path of the
#             repository), `usage` (each line is the Usage line of that
#             command's --help), or `not run: why`.
RSpec.describe "The documentation's code blocks" do
  include CLIHelpers
  include E2E::Helpers

  root = Docs::ROOT
  lib = File.join(root, "lib")
  fixtures = File.join(__dir__, "docs", "fixtures")
  placeholders = %w[PID WORKER_PID $UNICORN_WORKER_PID].freeze
  clean_env = { "STATIC_TRACING_MODE" => nil, "STATIC_TRACING_SIGNAL" => nil, "STATIC_TRACING_ATTACH_DELAY" => nil,
                "STATIC_TRACING_DIR" => nil, "XDG_RUNTIME_DIR" => nil, "RUBYOPT" => nil }.freeze

  def fixture_process(name, env: {})
    path = File.join(__dir__, "docs", "fixtures", "#{name}.rb")
    ruby_process(File.read(path), env:).tap { |child| child.wait_for(/^ready\b/) }
  end

  # docs/rails.md's blocks load Rails, or attach to provider rails: they
  # run where Rails loads, as the Rails specs do (component :rails).
  def rails_blocks_need_rails(block)
    return unless block.file == "docs/rails.md" && (problem = E2E::RailsApp.load_problem)

    cannot_run!(problem, component: :rails)
  end

  def run_ruby(program, block, env:)
    Tempfile.create(["doc", ".rb"]) do |file|
      file.write(program)
      file.flush
      result = run_cli(file.path, env:, timeout: 60,
                                  command: [RbConfig.ruby, "-I", File.join(Docs::ROOT, "lib"), "-r", "static_tracing"])
      expect(result.exitstatus).to eq(0), "#{block.location} failed:\n#{result.stderr}#{result.stdout}"
    end
  end

  # +script+ run by bash in the repository, stderr with stdout as on a terminal.
  def run_shell(script, env: {}, timeout: 120)
    run_cli("cd #{Shellwords.escape(Docs::ROOT)} && exec 2>&1\n#{script}", env:, timeout:, command: ["bash", "-c"])
  end

  blocks = Docs.blocks
  known = { "ruby" => true, "sh" => true, "console" => true, "text" => true }

  it "finds the blocks of the README and of every docs/*.md, each of a kind it knows" do
    expect(blocks.map(&:file)).to include("README.md", "docs/api.md")
    unknown = blocks.reject { |block| known[block.language] }.map { |b| "#{b.location} (#{b.language.inspect})" }
    expect(unknown).to be_empty, "blocks of no known kind: #{unknown.join(", ")}"
  end

  blocks.select { |block| block.language == "ruby" }.each do |block|
    next if block.marker == "continue"

    it "runs the ruby block at #{block.location}" do
      rails_blocks_need_rails(block)
      continued = blocks.drop_while { |other| !other.equal?(block) }.drop(1).take_while do |other|
        other.file == block.file && other.language == "ruby" && other.marker == "continue"
      end
      example = Docs::RubyExample.new([block, *continued].map { |part| [part.text, part.line + 1] })
      program = if block.marker == "rackup"
                  "#{Docs::RubyExample::PRELUDE}require \"rack\"\napp = Rack::Builder.new do\n#{example.body}" \
                    "run ->(_env) { [200, {}, [\"ok\"]] }\nend.to_app\n" \
                    "raise \"the app did not answer\" unless Rack::MockRequest.new(app).get(\"/\").ok?\n"
                else
                  example.program
                end
      run_ruby(program, block, env: clean_env)
    end
  end

  describe "sh blocks", :subprocess do
    sh_blocks = blocks.select { |block| block.language == "sh" }

    sh_blocks.each do |block|
      it "parses the sh block at #{block.location} with bash -n; its repository paths and rake tasks exist" do
        _, status = Open3.capture2e("bash", "-n", stdin_data: block.text)
        expect(status).to be_success, "#{block.location} does not parse"
        commands = Docs::ShellCommands.in(block.text)
        paths = commands.flat_map(&:words).grep(%r{\A[\w.-]+(/[\w.-]+)+/?\z}).grep_v(/\A\d/)
        missing = paths.reject { |path| File.exist?(File.join(root, path)) }
        expect(missing).to be_empty, "#{block.location} names paths that do not exist: #{missing.join(", ")}"
        commands.select { |command| command.name.include?("/") }.each do |command|
          expect(File.executable?(File.join(root, command.name))).to be(true), "#{command.name} is not executable"
        end
        tasks = commands.select { |command| command.name == "rake" }.map { |command| command.words[1] }
        unless tasks.empty?
          listed = run_shell("rake -P").stdout.scan(/^rake (\S+)/).flatten
          expect(tasks - listed).to be_empty, "#{block.location}: no rake task #{(tasks - listed).join(", ")}"
        end
      end
    end

    tracing_blocks = sh_blocks.select do |block|
      Docs::ShellCommands.in(block.text).any? { |command| %w[bpftrace tplist-bpfcc].include?(command.name) }
    end
    unless tracing_blocks.empty?
      describe "tracer commands against a process with the documented probes", :e2e do
        before(:all) do
          next if E2E.unavailable_reason

          @probes = E2E::Child.new(RbConfig.ruby, "-I", lib, "-r", "static_tracing", File.join(fixtures, "probes.rb"),
                                   env: clean_env)
          @stub_path = @probes.wait_for(/^ready (\S+)$/)[1]
        end
        after(:all) { @probes&.kill }

        tracing_blocks.each do |block|
          it "compiles and attaches every bpftrace command of #{block.location}" do
            rails_blocks_need_rails(block)
            substitute = lambda do |word|
              next @probes.pid.to_s if placeholders.include?(word)

              word == "STUB_PATH" ? @stub_path : word
            end
            Docs::ShellCommands.in(block.text).each do |command|
              words = command.words.map(&substitute)
              where = "#{block.location} (line #{command.line + 1}): #{command.words.join(" ")}"
              case command.name
              when "bpftrace"
                if words.include?("-l")
                  out, = Open3.capture2e(command.env, E2E.bpftrace, *words.drop(1))
                  expect(out.lines.grep(/^usdt:/)).not_to be_empty, "#{where} lists nothing:\n#{out}"
                else
                  program = words.index("-e") + 1
                  words[program] = "BEGIN { exit(); } #{words[program]}"
                  out, status = Open3.capture2e(command.env, E2E.bpftrace, *words.drop(1))
                  expect(status).to be_success, "#{where} failed:\n#{out}"
                  expect(out).to match(E2E::Bpftrace::ATTACHED), "#{where} attached nothing:\n#{out}"
                end
              when "tplist-bpfcc"
                require_command!("tplist-bpfcc")
                out, status = Open3.capture2e(*words)
                expect(status).to be_success, "#{where} failed:\n#{out}"
                expect(out).to include("my_app:hello"), "#{where} does not list my_app:hello:\n#{out}"
              end
            end
          end
        end
      end
    end
  end

  describe "console transcripts", :subprocess do
    blocks.select { |block| block.language == "console" }.each do |block|
      if (command = block.marker_value("output of"))
        it "shows at #{block.location} what #{command} prints", :e2e do
          result = run_shell(command.delete("`"), env: clean_env, timeout: 120)
          expect(result.exitstatus).to eq(0), "#{command} failed:\n#{result.stdout}"
          expect(Docs::Transcript.match?(block.text, result.stdout)).to be(true),
                                                                        "#{block.location} shows:\n#{block.text}\n" \
                                                                        "#{command} printed:\n#{result.stdout}"
        end
        next
      end

      processes = block.marker_value("processes").to_s.split.to_h { |pair| pair.split("=", 2) }
      it "shows at #{block.location} what each command prints" do
        if processes.values.any? { |name| File.read(File.join(fixtures, "#{name}.rb")).include?("bpftrace") }
          require_tracing!
        end
        pids = processes.transform_values { |name| fixture_process(name, env: clean_env).pid.to_s }
        path = "#{File.join(root, "exe")}:#{ENV.fetch("PATH", "")}"
        Docs::Transcript.steps(block.text).each do |step|
          command = pids.reduce(step.command) { |text, (shown, real)| text.gsub(/\b#{shown}\b/, real) }
          printed = run_shell(command, env: clean_env.merge("PATH" => path)).stdout
          expect(Docs::Transcript.match?(step.output, printed)).to be(true),
                                                                   "#{block.location}: `#{step.command}` shows:\n" \
                                                                   "#{step.output}\nit printed:\n#{printed}"
        end
      end
    end
  end

  it "links only to files and headings that exist" do
    broken = Docs.files.flat_map do |file|
      File.read(File.join(root, file)).scan(/\]\(([^)\s]+)\)/).flatten.grep_v(/\A[a-z]+:/).filter_map do |link|
        target, anchor = link.split("#", 2)
        path = target.empty? ? File.join(root, file) : File.expand_path(target, File.dirname(File.join(root, file)))
        next "#{file}: #{link} (no such file)" unless File.exist?(path)
        next unless anchor

        "#{file}: #{link} (no such heading)" unless Docs.anchors(File.read(path)).include?(anchor)
      end
    end
    expect(broken).to be_empty, "broken links:\n#{broken.join("\n")}"
  end

  describe "text blocks" do
    blocks.select { |block| block.language == "text" }.each do |block|
      it "marks the text block at #{block.location} as checked or not runnable, and checks it" do
        expect(block.marker).to match(/\A(paths|usage|not run: \S.*)\z/m),
                                "#{block.location}: a text block needs <!-- doc: paths -->, <!-- doc: usage --> or " \
                                "<!-- doc: not run: why -->, it has #{block.marker.inspect}"
        lines = block.text.lines.map(&:strip).reject(&:empty?)
        case block.marker
        when "paths"
          missing = lines.map { |line| line.split.first }.reject { |path| File.exist?(File.join(root, path)) }
          expect(missing).to be_empty, "#{block.location} lists paths that do not exist: #{missing.join(", ")}"
        when "usage"
          lines.each do |line|
            help = run_cli(*line.split[1], "--help").stdout
            expect(help.lines.first.chomp).to eq("Usage: #{line}"), "#{block.location}: #{line}"
          end
        end
      end
    end
  end
end
