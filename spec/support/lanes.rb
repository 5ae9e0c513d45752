# frozen_string_literal: true

# Which lane of CI runs which spec (docs/development.md, "What each lane
# runs"). The main lane (bin/test) runs every spec, under Debian 12's Ruby
# 3.1 with bpftrace 0.17. The matrix lane (bin/matrix) runs them again
# under newer Rubies, all with bpftrace 0.27, and under Ruby 3.4 with YJIT
# on: it is there for what changes with the Ruby, the JIT or the tracer,
# so it leaves out what is listed here, each with its reason. A spec not
# listed runs in both lanes, under every Ruby: leaving one out is a
# decision written down here, never a default.
# spec/lanes_spec.rb holds every entry to something it selects.
module Lanes
  ROOT = File.expand_path("../..", __dir__)

  # A spec file, or one group of it (by its full description), and why it
  # is left out where it is.
  Entry = Struct.new(:file, :group, :why, keyword_init: true) do
    def covers?(metadata)
      return false unless metadata[:absolute_file_path] == File.join(ROOT, file)

      description = metadata[:full_description]
      group.nil? || description == group || description.start_with?("#{group} ")
    end
  end

  # Tagged :version_independent, run by the main lane only: what they
  # check is the same whatever the Ruby and the tracer, and they cost
  # time a Ruby.
  VERSION_INDEPENDENT = [
    Entry.new(file: "spec/package_spec.rb",
              why: "the .gem's files and its offline install follow from the gemspec; each Ruby of the matrix " \
                   "builds the extension through the same extconf.rb and Makefile (rake compile) and loads it in " \
                   "every other spec. A release build from nothing, 2 minutes a Ruby"),
    Entry.new(file: "spec/platform_gem_spec.rb",
              why: "runs every Ruby itself: the precompiled gem installed and traced under the host's Ruby and, " \
                   "in a root with no toolchain, under each Ruby of the matrix, whose builds (bin/matrix --compile) " \
                   "it packs; the matrix lane then finds them built"),
    Entry.new(file: "spec/bench_support_spec.rb",
              why: "holds bench/support.rb's copies of the specs' rules equal to them, text for text; " \
                   "the benchmark runs on the development machine"),
    Entry.new(file: "spec/lanes_spec.rb", why: "checks this list and the names of the spec files"),
    Entry.new(file: "spec/e2e/report_formats_spec.rb",
              why: "the formats are written by the Rust reader, the same under every Ruby, and checked by go tool " \
                   "pprof, speedscope's schema and an SVG parser, which bin/setup installs for the main lane " \
                   "only; the command that reads the files runs under every Ruby in spec/cli/report_spec.rb"),
    Entry.new(file: "spec/e2e/speedscope_import_spec.rb",
              why: "the Chrome JSON is written by the Rust reader, the same under every Ruby, and read by " \
                   "speedscope's importer under Node.js, which bin/setup installs for the main lane only; the " \
                   "command that writes it runs under every Ruby in spec/cli/report_spec.rb"),
    Entry.new(file: "spec/e2e/prometheus_spec.rb",
              why: "a Prometheus server scraping export over unicorn workers: the counts and histograms are the " \
                   "Rust reader's, the same under every Ruby, and Prometheus is installed for the main lane only; " \
                   "export itself runs under every Ruby in spec/cli/export_spec.rb"),
    Entry.new(file: "spec/e2e/rack_metrics_spec.rb",
              group: "StaticTracing::Rack::Metrics shows a real Prometheus no counter reset, and every call " \
                     "served, as workers are killed",
              why: "Prometheus is installed for the main lane only; the counters it reads are the shared " \
                   "tally's, kept the same whichever worker answers under every Ruby by the example before it " \
                   "(the same workers killed, each scrape checked in order)"),
    Entry.new(file: "spec/e2e/exemplars_spec.rb",
              why: "a Prometheus server keeping exemplars, installed for the main lane only; the exemplars are " \
                   "written by the Rust reader, the same under every Ruby, and the trace contexts they carry are " \
                   "recorded under every Ruby in spec/recorder/trace_contexts_spec.rb and served as OpenMetrics " \
                   "in spec/cli/export_spec.rb")
  ].freeze

  # Tagged :ruby_independent, run by the matrix lane under its first Ruby
  # only (and by the main lane): what they check changes with the tracer
  # and the tools, which are the same under each Ruby of the matrix, and
  # not with the Ruby, which they barely use.
  RUBY_INDEPENDENT = [
    Entry.new(file: "spec/documentation_spec.rb",
              why: "the docs' bpftrace programs, compiled and attached by bpftrace 0.27, and their shell " \
                   "commands and transcripts; their Ruby examples call the API every Ruby runs the specs of"),
    Entry.new(file: "spec/hardening/churn_spec.rb", group: "Churn tracers, reloads and forks",
              why: "bpftrace starting and leaving hundreds of times, two tracers on a probe, gdb and perf reading " \
                   "a reloaded stub: the tracer's side of churn, 130 s of CPU a Ruby with bpftrace 0.27. What the " \
                   "Ruby changes runs under every Ruby: wrapping 10,000 times in no more memory (the same file), " \
                   "forks (fork_spec.rb, process_wide_spec.rb), wrapping while threads call (exactness_spec.rb)")
  ].freeze

  # Tagged :jit_independent, left out of the matrix lane's YJIT suite
  # (3.4-yjit) only, whose time goes to what YJIT changes: how the traced
  # process runs the gem's Ruby code (wrappers, fires, frames, the GC under
  # compiled code). These check what runs elsewhere, or what no Ruby code
  # of the traced process decides; the 3.4 suite runs them under the same
  # Ruby version, and the main lane under every check.
  COMMAND = "the command reads processes and files from outside them: none of it runs in the traced process"
  JIT_INDEPENDENT = [
    *%w[chroot cli container export output_errors output_file private_file process_dir process_state report
        stub_file target trace_file].map { |name| Entry.new(file: "spec/cli/#{name}_spec.rb", why: COMMAND) },
    *%w[commands cut_short large_ring launch messages output_path recording_options typos].map do |name|
      Entry.new(file: "spec/recorder/#{name}_spec.rb",
                why: "#{COMMAND}; the options and the control requests it sends are parsed the same under any JIT")
    end,
    Entry.new(file: "spec/hardening/gc_spec.rb",
              group: "Native objects under GC.stress and GC.compact when the provider and tracepoint specs run " \
                     "with GC.stress around every native call",
              why: "the native objects' marking and moving under GC.stress, the same whatever runs the Ruby code " \
                   "that calls them: 100 s with YJIT; compaction under code YJIT compiled is spec/yjit_spec.rb's"),
    *{ "bad_input" => "declarations refused by the checks of names, types and values",
       "scale" => "stubs of thousands of probes, built and loaded natively",
       "stub_directories" => "the stub directory's rules, applied natively",
       "namespaces" => "stub files shared across pid namespaces",
       "descriptors" => "a process out of file descriptors",
       "control_characters" => "names and values the command prints escaped" }.map do |name, what|
      Entry.new(file: "spec/hardening/#{name}_spec.rb", why: "#{what}: no code the JIT compiles decides it")
    end
  ].freeze

  TAGS = { version_independent: VERSION_INDEPENDENT, ruby_independent: RUBY_INDEPENDENT,
           jit_independent: JIT_INDEPENDENT }.freeze

  def self.tag(config)
    config.define_derived_metadata do |metadata|
      TAGS.each do |tag, entries|
        metadata[tag] = true if entries.any? { |entry| entry.covers?(metadata) }
      end
    end
  end
end
