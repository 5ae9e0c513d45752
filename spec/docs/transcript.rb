# frozen_string_literal: true

module Docs
  # A console transcript: `$ command` lines, each followed by what it
  # prints. Compared with what the command really prints after both are
  # normalised: colours, trailing blanks and bpftrace's version-dependent
  # chatter dropped (without_bpftrace_chatter), a histogram's rows
  # (whose buckets vary from run to run; bpftrace's or static-tracing's)
  # counted as one, the uid in /tmp/static_tracing-UID and
  # /dev/shm/static_tracing-UID made UID, and the numbers that change between
  # runs (ID_NUMBER: PIDs, ports, pid namespaces) renamed in order of first
  # appearance, so that the same PID must appear in the same places; every
  # other number, a count say, must be as shown. "..." in the
  # transcript stands for any text, across lines: what was trimmed.
  module Transcript
    Step = Struct.new(:command, :output)

    # bpftrace's rows ("[4, 8)   2 |@@ |"), and static-tracing's, indented
    # and labelled in time units ("  [1us, 2us)  81 |@@ |", "  < 1us  13 |@ |").
    HISTOGRAM_ROW = /\A\s*(?:\[[^\]]*[\])]|< \S+)\s+\d+ \|[@ ]*\|\z/
    # A number of four digits or more, or one where a PID or a port goes
    # (PIDs are short on a machine that has just booted, or wrapped).
    ID_CONTEXTS = ["PID ", "process ", "Process ", "pid ", "-p ", "/proc/", "master ", "worker ", "-TRAP ", "list ",
                   "enable ", "disable ", "toggle ", "latency ", "record ", "dump ", "127.0.0.1:"]
                  .map { |text| Regexp.escape(text) }.join("|")
    # ... and a stub's name (provider-PID-N-M.so), a state or ring file's (PID-PIDNS.ring).
    ID_NUMBER = %r{\d{4,}|(?<=#{ID_CONTEXTS})\d+|(?<=-)\d+(?=-\d+-\d+\.so)|(?<=/)\d+(?=-\d+\.[a-z]+\b)}

    def self.steps(text)
      text.lines.map(&:chomp).each_with_object([]) do |line, steps|
        if line.start_with?("$ ")
          steps << Step.new(line.delete_prefix("$ "), +"")
        else
          raise "a transcript starts with a `$ command` line, not #{line.inspect}" if steps.empty?

          steps.last.output << line << "\n"
        end
      end
    end

    # bpftrace's chatter, which differs by version and host: warnings (a
    # warning about the program is followed by the program line and a
    # ~~~ underline), and its attach line (E2E::Bpftrace::ATTACHED, here the
    # whole line), read as 0.17 prints it.
    BPFTRACE_WARNING = /\A(?:WARNING: |stdin:[\d:-]+: WARNING: )/
    PROGRAM_UNDERLINE = /\A\s*~+\z/
    BPFTRACE_ATTACHED = /#{E2E::Bpftrace::ATTACHED}(?:\.\.\.)?\z/

    def self.without_bpftrace_chatter(lines)
      kept = lines.each_index.reject { |index| bpftrace_chatter?(lines, index) }.map { |index| lines[index] }
      kept.map { |line| line.sub(BPFTRACE_ATTACHED) { "Attaching #{Regexp.last_match(1)} probes..." } }
    end

    def self.bpftrace_chatter?(lines, index)
      line = lines[index]
      return true if line.match?(BPFTRACE_WARNING) || line.match?(PROGRAM_UNDERLINE)

      # The program line between a warning and its underline.
      index.positive? && lines[index - 1].start_with?("stdin:") && lines[index + 1]&.match?(PROGRAM_UNDERLINE)
    end

    def self.normalize(text)
      numbers = {}
      lines = without_bpftrace_chatter(text.gsub(/\e\[[\d;]*m/, "").lines.map(&:rstrip))
      rows = lines.map do |line|
        line.match?(HISTOGRAM_ROW) ? "[histogram]" : rename_numbers(line, numbers)
      end
      rows.chunk_while { |a, b| a == "[histogram]" && b == a }.map(&:first).join("\n").strip
    end

    def self.rename_numbers(line, numbers)
      line.gsub(%r{(/tmp|/dev/shm)/static_tracing-\d+}, "\\1/static_tracing-UID")
          .gsub(ID_NUMBER) { |number| numbers[number] ||= "<n#{numbers.size + 1}>" }
    end

    def self.match?(expected, actual)
      pattern = normalize(expected).split("...", -1).map { |part| Regexp.escape(part) }.join(".*")
      Regexp.new("\\A#{pattern}\\z", Regexp::MULTILINE).match?(normalize(actual))
    end
  end
end
