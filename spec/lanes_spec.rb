# frozen_string_literal: true

require "json"
require "open3"
require "rbconfig"
require "tempfile"

# What each CI lane runs (spec/support/lanes.rb), as bin/matrix selects it:
# every entry of the list still selects examples (a file renamed or a group
# reworded would otherwise put them back under every Ruby, or leave its
# entry meaning nothing), and every file that defines examples has a name
# rspec runs, so that no spec is left out of both lanes by its name.
RSpec.describe "What each CI lane runs" do
  # The examples `rspec --dry-run ARGS` selects, by their metadata.
  def selected(*args)
    Tempfile.create(["lanes", ".json"]) do |report|
      out, status = Open3.capture2e({ "SPEC_OPTS" => nil }, RbConfig.ruby, "-S", "rspec", "--dry-run",
                                    "--format", "json", "--out", report.path, *args, chdir: Lanes::ROOT)
      expect(status).to be_success, out
      JSON.parse(File.read(report.path)).fetch("examples")
    end
  end

  # What Entry#covers? reads, from a dry run's example.
  def metadata_of(example)
    { absolute_file_path: File.expand_path(example.fetch("file_path"), Lanes::ROOT),
      full_description: example.fetch("full_description") }
  end

  Lanes::TAGS.each do |tag, entries|
    it "selects, with --tag #{tag}, the examples of each #{tag} entry and no others" do
      examples = selected("--tag", tag.to_s).map { |example| metadata_of(example) }
      entries.each do |entry|
        covered = examples.count { |example| entry.covers?(example) }
        expect(covered).to be_positive, "#{[entry.file, entry.group].compact.join(": ")} selects no example"
      end
      strays = examples.reject { |example| entries.any? { |entry| entry.covers?(example) } }
      expect(strays).to be_empty
    end
  end

  it "finds every file that defines examples by the name rspec runs, *_spec.rb" do
    defining = Dir.glob("spec/**/*.rb", base: Lanes::ROOT).select do |path|
      File.foreach(File.join(Lanes::ROOT, path)).any?(/^RSpec\.describe\b/)
    end
    expect(defining.reject { |path| path.end_with?("_spec.rb") }).to be_empty
  end
end
