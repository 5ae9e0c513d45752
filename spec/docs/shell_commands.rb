# frozen_string_literal: true

require "shellwords"

module Docs
  # The simple commands of a ```sh block, as words: comments dropped, each
  # pipeline, list or redirection cut into its commands, leading
  # VAR=value assignments kept apart.
  module ShellCommands
    Command = Struct.new(:line, :env, :words) do
      def name = words.first
    end

    OPERATORS = %w[| || && ; &].freeze
    REDIRECTION = /\A\d?[<>]/

    def self.in(text)
      text.lines.each_with_index.flat_map do |line, index|
        next [] if line.strip.empty? || line.strip.start_with?("#")

        words = Shellwords.split(line)
        words = words.take_while { |word| !word.start_with?("#") }
        split(words).map { |command| build(index, command) }
      end
    end

    def self.split(words)
      words.slice_when { |_, b| OPERATORS.include?(b) }.map { |part| part.reject { |word| OPERATORS.include?(word) } }
           .map { |part| drop_redirections(part) }.reject(&:empty?)
    end

    def self.drop_redirections(words)
      kept = []
      skip = false
      words.each do |word|
        if skip
          skip = false
        elsif word.match?(REDIRECTION)
          skip = !word.match?(/\A\d?[<>]&?\S/) # `> file`: the file is the next word
        else
          kept << word
        end
      end
      kept
    end

    def self.build(index, words)
      env = words.take_while { |word| word.match?(/\A[A-Z_][A-Z0-9_]*=/) }
      Command.new(index, env.to_h { |pair| pair.split("=", 2) }, words.drop(env.size))
    end
  end
end
