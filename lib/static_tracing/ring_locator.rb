# frozen_string_literal: true

require_relative "recording_options"
require_relative "cli/errors"
require_relative "cli/private_file"
require_relative "cli/process_state"

module StaticTracing
  # The one way to a recording process's ring, for `record`, `dump`,
  # `export` and StaticTracing::Rack::Metrics: the ring is the file that
  # the process's state file names (CLI::ProcessState, which believes the
  # state file only if it is that process's own, and the ring only if it is
  # the process's own `<pid>-<pidns>.ring` beside it), and it is opened
  # only as CLI::PrivateFile trusts a file: owned by the uid the process
  # runs as, private, in a private directory of that uid, no larger than a
  # ring can be. Where rings live is the state file's to say; this is the
  # one place that opens one on its word.
  #
  #   state = StaticTracing::CLI::ProcessState.new(pid)
  #   published = state.read
  #   RingLocator.open(state, published) { |file| reader::Tally.new(name).scrape(file.fileno) }
  module RingLocator
    # A ring file: its header and probe table (at most 16 MiB: it grows
    # with the probes a recording names), then its slots.
    MAX_RING_FILE = RecordingOptions::MAX_SIZE + (17 << 20)

    module_function

    # The path of the ring +published+ (a CLI::ProcessState::Published)
    # names, or nil when the process records nothing.
    def ring(published)
      published&.recorder&.fetch("ring", nil)
    end

    # Yields the ring of the process +state+ (a CLI::ProcessState) as
    # +published+ names it, open for reading (and writing with +write+: a
    # reader without overwrite stores how far it read), and returns what the
    # block returns. Raises CLI::Error when it records nothing, when its
    # ring is gone, or when the ring is not to be trusted.
    def open(state, published, write: false, &block)
      path = ring(published) or raise CLI::Error, "process #{state.pid} is not recording"
      process = state.process
      rules = { write:, owner: state.uid, described: "the uid process #{state.pid} runs as", limit: MAX_RING_FILE }
      opened = process.guard(path) do
        CLI::PrivateFile.open_checked(process.reach(File.dirname(path)), File.basename(path), **rules, &block)
      end
      opened.nil? ? raise(CLI::Error, "the ring #{path} of process #{state.pid} is gone") : opened
    rescue CLI::PrivateFile::Untrusted => e
      raise CLI::Error, "refusing the ring #{path} of process #{state.pid}: #{e.message}"
    end
  end
end
