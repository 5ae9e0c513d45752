# frozen_string_literal: true

require_relative "../errors"

module StaticTracing
  module CLI
    # Something went wrong that the user can act on: the message says what.
    class Error < StaticTracing::Error; end

    # The command line itself is wrong.
    class UsageError < Error; end

    # Ctrl-C (or SIGTERM) ended the command before it was done: the
    # message says what was left undone.
    class Interrupted < Error; end
  end
end
