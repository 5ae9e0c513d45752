# frozen_string_literal: true

require "json"
require "securerandom"
require_relative "../recording_options"
require_relative "../ring_locator"
require_relative "../trace_reader_library"
require_relative "process_state"
require_relative "private_file"
require_relative "target"

module StaticTracing
  module CLI
    # A process's recorder seen from outside (see StaticTracing::Recorder
    # and Control): requests go to the control FIFO the process published,
    # its answers come back in its state file, and its ring is read where
    # the state file says it is. Nothing is opened but next to the state
    # file or in the directories its rings may be in (RingDirectories), and
    # only files PrivateFile would trust (a FIFO for the channel).
    class ControlChannel
      REQUEST_FORMAT = 1
      REPLY_TIMEOUT = 5.0
      # An answer the process began before the deadline may take this much
      # longer to be published.
      ANSWER_GRACE = 1.0
      # A request still under way after this long is said to be waited for.
      PENDING_SAID = 1.0
      POLL_INTERVAL = 0.02
      WRITE_FLAGS = File::WRONLY | File::NOFOLLOW | File::NONBLOCK

      attr_reader :process, :state

      def initialize(pid)
        @process = ProcessState.new(pid)
        @state = @process.read or raise Error, missing_message
      end

      def pid
        process.pid
      end

      # What the process records now (StaticTracing::Recorder.status), or nil.
      def recording
        state.recorder
      end

      # Sends a request and waits for the process to answer it; returns the
      # answer's message, or raises Error with it when the process refused.
      # The process carries out a request only if it reads it within
      # +timeout+ (its deadline); one it says takes longer (a large ring
      # being made) is waited for as long as it takes, and +waiting+ is
      # called once it has taken a second. A request given up on, at the
      # deadline or at Ctrl-C, is cancelled: it is never carried out late.
      def request(action, id: SecureRandom.hex(8), timeout: REPLY_TIMEOUT, waiting: nil, **fields)
        deadline = CLI.monotonic + timeout
        send_line(JSON.generate({ "format" => REQUEST_FORMAT, "id" => id, "action" => action,
                                  "deadline" => Time.now.to_f + timeout }.merge(fields)))
        reply = wait_reply(id, deadline, timeout, waiting)
        raise Error, "process #{pid} refused: #{reply["message"]}" unless reply["ok"]

        reply["message"]
      end

      # Sends a request and does not wait for its answer.
      def notify(action, id:, **fields)
        send_line(JSON.generate({ "format" => REQUEST_FORMAT, "id" => id, "action" => action }.merge(fields)))
      end

      # Yields the process's ring open (for writing too with +write+: a
      # reader without overwrite stores how far it read), as RingLocator
      # opens one; returns what the block returns. The rings killed
      # processes left beside it are bounded first, as a process starting
      # bounds them (ext/stapsdt/src/leftovers.rs).
      def open_ring(write: false, &block)
        ring = RingLocator.ring(state) or raise Error, not_recording_message

        sweep_leftover_rings(process.process.reach(File.dirname(ring)))
        RingLocator.open(process, state, write:, &block)
      end

      # Only in a directory PrivateFile trusts; a sweep that cannot be made
      # leaves the rings as they are.
      def sweep_leftover_rings(dir)
        rules = PrivateFile::Rules.new(owner: uid, described:)
        PrivateFile.open_directory(dir, rules) do |opened|
          StaticTracing.trace_reader.sweep_leftover_rings(opened.fileno)
        end
      rescue PrivateFile::Untrusted, SystemCallError, IOError
        nil
      end

      # Why the process could not create files in the directory +dir+ (a
      # path as it sees it), or nil when it could, as far as its uid and
      # groups and the directory's mode tell: the process checks again.
      def directory_problem(dir)
        reached = process.process.reach(dir)
        stat = process.process.guard(reached) { File.stat(reached) }
        return "it is not a directory" unless stat.directory?

        # As root, only a read-only file system makes access(2) refuse.
        return "it is on a read-only file system" if ::Process.euid.zero? && !File.writable?(reached)

        uid, groups = process.process.credentials
        return if may_create_files?(reached, stat, uid, groups)

        "uid #{uid}, which process #{pid} runs as, may not create files in it (mode " \
          "#{format("%04o", stat.mode & 0o7777)}, owner #{stat.uid}, group #{stat.gid})"
      rescue Errno::ENOENT, Errno::ENOTDIR
        "it does not exist"
      rescue SystemCallError => e
        CLI.reason(e)
      end

      # The state as the process publishes it now, or nil when it publishes
      # none (it is exiting, say).
      def current_state
        process.read&.tap { |state| @state = state }
      end

      def alive?
        process.alive?
      end

      private

      def uid
        process.uid
      end

      # Not run as root, the command runs as the process's uid (or could
      # not have opened its state file): access(2) then answers for it.
      def may_create_files?(reached, stat, uid, groups)
        return true if uid.zero?

        permits?(stat, uid, groups) && (::Process.euid.zero? || (File.writable?(reached) && File.executable?(reached)))
      end

      # Whether the mode bits let +uid+ (in +groups+) write and search a
      # directory.
      def permits?(stat, uid, groups)
        shift = if stat.uid == uid
                  6
                else
                  groups.include?(stat.gid) ? 3 : 0
                end
        (stat.mode >> shift) & 0o3 == 0o3
      end

      def described
        "the uid process #{pid} runs as"
      end

      def control
        state.control or raise Error, no_control_message
      end

      # One write: a request is at most PIPE_BUF bytes, so it arrives whole.
      def send_line(line)
        raise Error, "a request of #{line.bytesize} bytes is too long (at most 4096): give fewer patterns" if
          line.bytesize >= 4096

        path = control
        with_fifo(path) { |fifo| fifo.syswrite("#{line}\n") }
      rescue Errno::ENXIO
        raise Error, "process #{pid} does not read its control channel #{path} (it is exiting, or stuck)"
      rescue Errno::EAGAIN
        raise Error, "the control channel #{path} of process #{pid} is full: the process is not reading it"
      end

      def with_fifo(path)
        rules = PrivateFile::Rules.new(owner: uid, described:)
        dir = process.process.reach(state.dir)
        process.process.guard(path) do
          PrivateFile.open_directory(dir, rules) do |directory|
            name = File.join(PrivateFile::PROC_FD, directory.fileno.to_s, File.basename(path))
            File.open(name, WRITE_FLAGS) do |fifo|
              check_fifo(fifo.stat, rules)
              yield fifo
            end
          end
        end or raise Error, "process #{pid} has no control channel #{path} any more"
      rescue Errno::ENOENT
        raise Error, "process #{pid} has no control channel #{path} any more"
      rescue Errno::ELOOP, PrivateFile::Untrusted => e
        raise Error, "refusing the control channel #{path} of process #{pid}: " \
                     "#{e.is_a?(Errno::ELOOP) ? "it is a symbolic link" : e.message}"
      end

      def check_fifo(stat, rules)
        raise PrivateFile::Untrusted, "it is a #{stat.ftype}, not a FIFO" unless stat.pipe?

        PrivateFile.check_owner(stat, rules, "it is")
        return if (stat.mode & 0o077).zero?

        raise PrivateFile::Untrusted, "it has mode #{format("%04o", stat.mode & 0o7777)}, not private to its owner"
      end

      # The process's answer to request +id+. A process that has not read
      # the request by +deadline+ will not carry it out; the command waits a
      # moment longer for an answer on its way.
      def wait_reply(id, deadline, timeout, waiting)
        @pending_since = nil
        @waiting = waiting
        loop do
          reply = answer_to(id)
          return reply if reply
          raise Error, "process #{pid} exited before it answered" unless process.alive?

          give_up(id, reply_timeout_message(timeout)) if @pending_since.nil? && CLI.monotonic > deadline + ANSWER_GRACE

          sleep(POLL_INTERVAL)
        end
      rescue Interrupt
        give_up(id, "interrupted while process #{pid} carried out the request", Interrupted)
      end

      # The process's answer to request +id+ once it is final, or nil; one
      # still under way is noted, and said once it has taken a while.
      def answer_to(id)
        reply = current_state&.recorder_reply
        return unless reply && reply["id"] == id
        return reply unless reply["pending"]

        @pending_since ||= CLI.monotonic
        say_waiting if CLI.monotonic - @pending_since >= PENDING_SAID
        nil
      end

      def say_waiting
        waiting = @waiting or return

        @waiting = nil
        waiting.call
      end

      # Cancels request +id+ (if it was a record request, the recording
      # does not start, or stops at once if it just did) and raises +error+.
      def give_up(id, message, error = Error)
        cancelled = begin
          notify("cancel", id: SecureRandom.hex(8), recording: id)
          "; it is cancelled: the process will not carry it out late"
        rescue Error => e
          "; it could not be cancelled (#{e.message})"
        end
        raise error, "#{message}#{cancelled}"
      end

      def reply_timeout_message(timeout)
        "process #{pid} did not answer within #{format("%g", timeout)}s: it may be busy (its " \
          "static_tracing thread needs the GVL: a long request holds it), stopped, or stuck; try again"
      end

      # What `dump` is for, and how the last recording ended if one did.
      def not_recording_message
        ended = state.recorder_ended
        "process #{pid} is not recording#{" (its last recording ended: #{ended["reason"]})" if ended}; dump writes " \
          "what a flight recording holds: start one with static-tracing record #{pid} --flight"
      end

      def missing_message
        loaded = begin
          Target.new(pid).extension_loaded?
        rescue Error
          true
        end
        unless loaded
          return "process #{pid} has not loaded the static_tracing gem (no #{Target::EXTENSION} in " \
                 "/proc/#{pid}/maps): require \"static_tracing\" in it first"
        end

        "process #{pid} has loaded static_tracing but published no tracing state the command can use (looked " \
          "in #{process.candidates.map(&:dir).join(", ")}#{process.rejected.map { |file| "; #{file}" }.join}): " \
          "it cannot write to any stub directory (its stderr says why)"
      end

      def no_control_message
        why = if state.version == VERSION
                "it could not create its control channel (its stderr says why: \"static-tracing cannot send " \
                  "requests to this process\")"
              else
                "it runs static_tracing #{state.version || "older than 0.1.0"}, which has no recorder " \
                  "(#{VERSION} has one)"
              end
        "process #{pid} takes no requests (record, dump): #{why}"
      end
    end
  end
end
