# frozen_string_literal: true

require "ripper"

module Docs
  # A ```ruby block turned into a program that runs it top to bottom and
  # checks what its comments show:
  #   expression   # => inspect of its value
  #   expression   # ~> ExceptionClass: message
  # where "..." stands for any text. The expression is the line, or the
  # shortest run of lines ending there that parses (a block's `end`).
  class RubyExample
    CHECK = /\s# ([=~])> (.*)\z/

    PRELUDE = <<~'RUBY'
      module DocCheck
        class Failure < Exception; end # rubocop:disable Lint/InheritException

        def self.pattern(expected)
          Regexp.new("\\A#{expected.split("...", -1).map { Regexp.escape(_1) }.join(".*")}\\z", Regexp::MULTILINE)
        end

        # The docs show Hashes as Ruby 3.1 to 3.3 inspect them ({:k=>1}, {"s"=>1});
        # from 3.4 they read {k: 1}, {"s" => 1}.
        def self.as_inspected_here(expected)
          return expected if { k: 1 }.inspect == "{:k=>1}"

          expected.gsub(/:(\w+[?!]?)=>/) { "#{Regexp.last_match(1)}: " }.gsub(/(?<=\S)=>(?=\S)/, " => ")
        end

        def self.value(line, expected, value)
          shown = value.inspect
          expected = as_inspected_here(expected)
          raise Failure, "line #{line}: shows # => #{expected}, the value is #{shown}" unless pattern(expected).match?(shown)
        end

        def self.raised(line, expected, error)
          shown = "#{error.class}: #{error.message}"
          raise Failure, "line #{line}: shows # ~> #{expected}, it raised #{shown}" unless pattern(expected).match?(shown)
        end

        def self.returned(line, expected, value)
          raise Failure, "line #{line}: shows # ~> #{expected}, it returned #{value.inspect}"
        end
      end
    RUBY

    # +parts+: [text, the document's line number of its first line], one
    # for each block run together.
    def initialize(parts)
      @lines = []
      @numbers = []
      parts.each do |text, first_line|
        text.lines.each_with_index do |line, index|
          @lines << line.chomp
          @numbers << (first_line + index)
        end
      end
    end

    def program
      PRELUDE + body
    end

    # The blocks' code, checks added, without the checks' helpers.
    def body
      out = []
      done = 0
      @lines.each_with_index do |line, index|
        check = line.match(CHECK) or next
        code = line[0...check.begin(0)]
        start = (done..index).reverse_each.find { |from| parses?([*@lines[from...index], code]) }
        raise "line #{@numbers[index]}: no expression ends here: #{line.strip}" unless start

        out.concat(@lines[done...start])
        out << wrap([*@lines[start...index], code], check[1], check[2], @numbers[index])
        done = index + 1
      end
      out.concat(@lines[done..])
      "#{out.join("\n")}\n"
    end

    private

    def parses?(lines)
      !Ripper.sexp(lines.join("\n")).nil?
    end

    def wrap(code, kind, expected, line)
      if kind == "="
        "__doc_value = begin\n#{code.join("\n")}\nend; DocCheck.value(#{line}, #{expected.dump}, __doc_value)"
      else
        "begin\n#{code.join("\n")}\nrescue Exception => e # rubocop:disable Lint/RescueException\n" \
          "DocCheck.raised(#{line}, #{expected.dump}, e)\nelse\n" \
          "DocCheck.returned(#{line}, #{expected.dump}, nil)\nend"
      end
    end
  end
end
