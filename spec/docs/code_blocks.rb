# frozen_string_literal: true

module Docs
  ROOT = File.expand_path("../..", __dir__)

  # A fenced code block of a Markdown file, with the `<!-- doc: ... -->`
  # comment on the line right before its fence, if any.
  CodeBlock = Struct.new(:file, :line, :language, :marker, :text, keyword_init: true) do
    def location
      "#{file}:#{line}"
    end

    def marker_value(name)
      marker&.match(/\A#{Regexp.escape(name)}:?\s*(.*)\z/m)&.captures&.first
    end
  end

  MARKER = /\A\s*<!-- doc: (.*?) -->\s*\z/m
  FENCE = /\A(\s*)```([\w-]*)\s*\z/

  # The Markdown files whose blocks must run: the README and every docs/*.md,
  # whoever adds them.
  def self.files
    ["README.md", *Dir.children(File.join(ROOT, "docs")).grep(/\.md\z/).sort.map { |name| "docs/#{name}" }]
  end

  def self.blocks(files = self.files)
    files.flat_map { |file| blocks_in(file, File.read(File.join(ROOT, file))) }
  end

  # The anchors GitHub gives the headings of +markdown+.
  def self.anchors(markdown)
    markdown.scan(/^#+ (.+)$/).flatten.map { |title| title.downcase.gsub(/[^\w\- ]/, "").tr(" ", "-") }
  end

  # The fenced blocks of +markdown+, their text unindented by the fence's own indentation.
  def self.blocks_in(file, markdown)
    lines = markdown.lines
    blocks = []
    index = 0
    while index < lines.size
      fence = lines[index].match(FENCE)
      next index += 1 unless fence

      block, closing = block_at(file, lines, index, *fence.captures)
      blocks << block
      index = closing + 1
    end
    blocks
  end

  def self.block_at(file, lines, index, indent, language)
    closing = (index + 1...lines.size).find { |i| lines[i].match?(/\A#{indent}```\s*\z/) }
    raise "#{file}:#{index + 1}: a code block that is never closed" unless closing

    marker = lines[index - 1].match(MARKER)&.captures&.first if index.positive?
    [CodeBlock.new(file:, line: index + 1, language:, marker:, text: unindent(lines[index + 1...closing], indent)),
     closing]
  end

  def self.unindent(lines, indent)
    lines.map { |line| line.start_with?(indent) ? line[indent.size..] : line.sub(/\A[ \t]+/, "") }.join
  end
end
