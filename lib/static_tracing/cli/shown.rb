# frozen_string_literal: true

module StaticTracing
  # The static-tracing command (lib/static_tracing/cli.rb); here, how it
  # shows text that another process wrote, for every file of it that
  # quotes some (ProcessState is also loaded by the Rack endpoint, without
  # the rest of the command).
  module CLI
    # What shown escapes: C0 and C1 controls and DEL, format characters
    # (bidirectional overrides), and the line and paragraph separators.
    UNSHOWN = /[\p{Cc}\p{Cf}\u2028\u2029]/
    UNSHOWN_IN_LINES = /(?![\n\t])#{UNSHOWN}/

    # Text another process wrote (its state file, its replies), as the
    # command shows it: control characters (a newline too), escape
    # sequences, invisible format characters and bytes that are not UTF-8
    # are written out as a Ruby literal writes them (\e, \n, \u009B,
    # \xFF), never sent to the terminal, so that such text can neither
    # drive the terminal nor forge a line of the command's own.
    #
    # +lines+ keeps newlines and tabs as they are: for the command's own
    # messages, each its own line, where a field was shown already.
    def self.shown(text, lines: false)
      unshown = lines ? UNSHOWN_IN_LINES : UNSHOWN
      text.to_s.dup.force_encoding(Encoding::UTF_8).each_char.map do |char|
        if !char.valid_encoding?
          char.unpack("C*").map { |byte| format("\\x%02X", byte) }.join
        elsif char.match?(unshown)
          char.dump[1..-2]
        else
          char
        end
      end.join
    end
  end
end
