# frozen_string_literal: true

module Bench
  # The method, block and recording paths under YJIT beside the
  # interpreter, in one run. YJIT makes a plain call several times cheaper,
  # so the promises made against one (disarmed = plain, armed near a bare
  # wrapper, held blocks near a yield, a recorded call's cost) are
  # measured again where it is on: this same Ruby, with --yjit, runs the
  # methods and recorder groups, and the targets over them, in a child
  # process; this group sets each of its rows beside this run's, and its
  # targets beside this run's verdicts. Under a Ruby built without YJIT
  # (Debian's) the rows say so: bin/matrix --bench runs the benchmark
  # under the matrix root's YJIT Ruby, with YJIT off, so that both sides
  # are one build.
  class Yjit < Group
    # The groups the child runs under YJIT.
    GROUPS = %i[methods recorder].freeze
    # How the child runs: each loop (a lambda called a dozen times a run)
    # compiled on its first call, as YJIT compiles a caller that is hot,
    # not left to the interpreter under the default threshold of 30 calls.
    OPTIONS = %w[--yjit --yjit-call-threshold=1].freeze
    # The tables compared, and what each row of theirs costs over its
    # reference, in ns: over the plain method, over a yield, or what
    # recording adds. Differences, not ratios: under YJIT an empty method
    # costs nothing measurable (it is compiled into its caller), and a
    # ratio to it means nothing.
    SECTIONS = { methods: :over_plain_ns, blocks: :over_yield_ns, recorder: :recording_adds_ns }.freeze
    # Below this a call is not told from the empty loop's noise.
    MEASURABLE_NS = 1.0
    # The targets judged again under YJIT, by the ids Targets gives them:
    # those over the methods, blocks and recorder tables (the attached
    # budget needs the floor group's C program, which the child does not run).
    TARGETS = /\A(?:disarmed|armed|allocations)\.|\Ablock\.|\Arecorder\.(?:latency_tracer|fire_int)\z/
    # The child pins itself, as a run of its own.
    ONE_CPU = false
    CHILD_TIMEOUT = 1800

    def run
      reason = Yjit.unavailable_reason
      return skipped(reason) if reason

      child = run_child
      compare(child)
      targets(child)
    end

    # Why this Ruby cannot run the benchmark with YJIT on, or nil.
    def self.unavailable_reason
      out, status = Open3.capture2e(RbConfig.ruby, "--yjit", "-e", "print RubyVM::YJIT.enabled? rescue print $!.class")
      return nil if status.success? && out.lines.last == "true"

      "#{RUBY_DESCRIPTION} was built without YJIT (bin/matrix --bench runs this under the matrix root's YJIT Ruby)"
    end

    private

    def skipped(reason)
      table(:yjit, "Under YJIT beside the interpreter", measurement: "measurement")
        .row(id: "yjit", measurement: "YJIT: skipped: #{reason}", skipped: reason)
    end

    # The child's report, as its JSON has it (symbol keys).
    def run_child
      json = work_file("yjit.json")
      FileUtils.rm_f(json)
      env = { "BENCH_ONLY" => GROUPS.join(","), "BENCH_JSON" => json, "RUBYOPT" => nil }
      warn "bench: yjit: the #{GROUPS.join(" and ")} groups again, in ruby #{OPTIONS.join(" ")}"
      Bench.run_command(RbConfig.ruby, *OPTIONS, File.join(__dir__, "harness.rb"),
                        log: work_file("yjit.log"), timeout: CHILD_TIMEOUT, env:)
      JSON.parse(File.read(json), symbolize_names: true)
    end

    def compare(child)
      table = table(:yjit, "Under YJIT beside the interpreter: ns/call of the same rows, this run's and the " \
                           "child's with --yjit (each a median of its own interleaved rounds)",
                    params: { ruby: RUBY_DESCRIPTION, yjit_ruby: child.dig(:machine, :ruby), yjit_options: OPTIONS },
                    table: "table", measurement: "measurement", interpreter_ns: ["interpreter ns", :d1],
                    yjit_ns: ["YJIT ns", :d1], yjit_over_interpreter: ["YJIT / interpreter", :x],
                    interpreter_over: ["over its reference ns, interpreter", :d1],
                    yjit_over: ["over its reference ns, YJIT", :d1])
      SECTIONS.each do |section, over|
        rows = child.dig(:sections, section, :rows) or next
        rows.each { |row| table.row(compare_row(section, over, row)) }
      end
      table.note("over its reference: methods over the plain method, blocks over a bare yield, recorder what " \
                 "recording adds to the same call unrecorded; medians of per-round differences, each side its own")
      table.note("YJIT / interpreter is left blank where YJIT's call costs under #{MEASURABLE_NS} ns, which the " \
                 "empty loop's noise hides: YJIT compiles an empty method into its caller")
      table.note("YJIT: #{OPTIONS.join(" ")}, every loop compiled from its first call, as a hot caller is")
      table.note("the two sides ran one after the other, not interleaved: YJIT / interpreter carries the " \
                 "machine's drift between them, the ratios within each side do not")
    end

    def compare_row(section, over, yjit)
      mine = @report.table(section)&.find(yjit[:id])
      mine = nil if mine&.fetch(:skipped, nil)
      row = { id: "yjit.#{section}.#{yjit[:id]}", table: section.to_s, measurement: label(yjit) }
      return row if yjit[:skipped]

      interpreter = mine&.fetch(:ns_per_call)
      row.merge(interpreter_ns: interpreter, yjit_ns: yjit[:ns_per_call],
                yjit_over_interpreter: ratio(yjit[:ns_per_call], interpreter),
                interpreter_over: mine&.fetch(over, nil), yjit_over: yjit[over]).compact
    end

    def ratio(value, reference)
      value / reference if value >= MEASURABLE_NS && reference && reference >= MEASURABLE_NS
    end

    def label(row) = row[:shape] ? "#{row[:shape]} #{row[:path]}" : row[:path] || row[:measurement]

    # The promises, judged by the same Targets on the child's tables and on
    # this run's.
    def targets(child)
      mine = Targets.evaluate(@report).to_h { |row| [row[:id], row] }
      table = table(:yjit_targets, "Targets under YJIT beside the interpreter (information, not pass/fail)",
                    target: "target", interpreter: ["interpreter", :auto], interpreter_verdict: "verdict",
                    yjit: ["YJIT", :auto], yjit_verdict: "YJIT verdict", limit: ["limit", :auto], unit: "unit")
      child.dig(:sections, :targets, :rows).select { |row| row[:id].match?(TARGETS) }.each do |row|
        table.row(id: "yjit.#{row[:id]}", target: row[:target], interpreter: mine.dig(row[:id], :measured),
                  interpreter_verdict: mine.dig(row[:id], :verdict), yjit: row[:measured],
                  yjit_verdict: row[:verdict], limit: row[:limit], unit: row[:unit])
      end
      table.note("YJIT: the child's Targets table over its own tables; interpreter: the same targets over this " \
                 "run's tables (the final Targets table below has them too)")
    end
  end
end
