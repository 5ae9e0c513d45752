# frozen_string_literal: true

require "json"
require_relative "../process_start"
require_relative "../ring_directories"
require_relative "../signal_rules"
require_relative "errors"
require_relative "process_dir"
require_relative "shown"
require_relative "private_file"

module StaticTracing
  module CLI
    # What a live process published about its tracing: the
    # `<pid>-<pidns>.state` file StaticTracing::State writes next to its stubs
    # (mode, toggle signal, whether tracing is on).
    #
    # The file is looked for where that process puts its stubs, so in the
    # directories its own environment names, in the same order: its
    # $STATIC_TRACING_DIR, its $XDG_RUNTIME_DIR/static_tracing, then
    # /tmp/static_tracing-<its uid>; all as the process sees them, through its
    # root, and named by its pid as it sees it and its pid namespace, so
    # that a process in a container is found by its pid on the host.
    #
    # A file is believed only if the gem's own rules say its user wrote it
    # (PrivateFile), and it counts only if it is this process's: pids are
    # reused, so the file's pid and start time must be the process's own; one
    # left by an earlier process is set aside. It must name a signal the gem
    # toggles on, by its right number: nothing else is ever sent.
    class ProcessState
      FORMAT = 1
      MODES = %w[on off signal attach].freeze
      # Far more than the gem writes (a few hundred bytes).
      MAX_SIZE = 64 * 1024
      # The gem skips a directory whose path holds one of these.
      CONTROL_CHARACTER = /[\x00-\x1f\x7f]/

      # A published state. +path+ is the file it was read from.
      # +armed+: in mode attach, the probes ("provider:probe") whose method is wrapped now.
      # +block_errors+: tracepoint blocks that failed while traced (StaticTracing.tracepoint).
      # +control+: the FIFO the process takes requests from (`record`), nil
      # if it has none. +recorder+: what it records (a Hash, see
      # StaticTracing::Recorder.status), or nil; +recorder_reply+: its answer
      # to the last request ({"id", "ok", "message"}), or nil.
      # +recorder_ended+: why its last recording ended, and the probes it
      # could not record ({"id", "reason", "unrecorded",
      # "unrecorded_probes"}), or nil.
      Published = Struct.new(:path, :mode, :signal, :signal_number, :enabled, :armed, :block_errors, :control,
                             :recorder, :recorder_reply, :recorder_ended, :version, :ruby, keyword_init: true) do
        def signal_name
          "SIG#{signal}"
        end

        # The directory the state file is in, as the process sees it: its
        # control channel is trusted only there (its ring where
        # RingDirectories allows).
        def dir
          File.dirname(path)
        end

        def to_h
          { mode:, signal:, signal_number:, enabled:, armed:, block_errors:, recorder:, state_file: path,
            version: }.compact
        end
      end

      # A directory the process may publish to, and the setting that names it.
      Candidate = Struct.new(:dir, :origin)

      # A state file that was found but does not count, and why; +untrusted+
      # when someone other than the process's user could have written it.
      Rejected = Struct.new(:path, :reason, :untrusted) do
        def to_s
          "#{untrusted ? "refusing" : "set aside"} #{path}: #{reason}"
        end
      end

      attr_reader :pid, :rejected, :process

      def initialize(pid, proc_dir: "/proc")
        @pid = pid
        @process = ProcessDir.new(pid, proc_dir:)
        @rejected = []
      end

      # The directories the process publishes to, best first: those its
      # environment names (as it started; a change it made to ENV later is
      # not visible here), then the default for its effective uid.
      def candidates
        @candidates ||= begin
          env = environment
          list = []
          dir = env["STATIC_TRACING_DIR"].to_s
          list << Candidate.new(absolute(dir), "$STATIC_TRACING_DIR") unless dir.empty?
          runtime = env["XDG_RUNTIME_DIR"].to_s
          # The XDG spec says to ignore a relative $XDG_RUNTIME_DIR.
          list << Candidate.new(File.join(runtime, "static_tracing"), "$XDG_RUNTIME_DIR") if runtime.start_with?("/")
          list << Candidate.new("/tmp/static_tracing-#{process.uid_as_seen_inside(uid)}", "default")
          list.reject { |candidate| candidate.dir.match?(CONTROL_CHARACTER) }
        end
      end

      # The state the process publishes now, or nil if it publishes none.
      # Reads the file anew on each call.
      def read
        @rejected = []
        candidates.each do |candidate|
          file_names.each do |name|
            state = read_file(candidate.dir, name)
            return state if state
          end
        end
        nil
      end

      # `<pid>-<pidns>.state`, by the pid the process sees itself as.
      def file_name
        file_names.first
      end

      # When the process started (see StaticTracing::ProcessStart).
      def start_time
        @start_time ||= ProcessStart.parse(process.read("stat"))
      end

      # Whether the process has a handler installed for +signal_number+ now
      # (SigCgt in /proc/PID/status).
      def catches?(signal_number)
        mask = process.status_field("SigCgt") or return false
        mask.to_i(16)[signal_number - 1] == 1
      end

      # Whether the process is still the one this object was made for, and
      # running: a zombie (exited, its parent has not reaped it yet) has
      # its /proc entry still, and nothing more.
      def alive?
        return false unless File.directory?(process.path)
        return false if process.zombie?

        ProcessStart.parse(process.read("stat")) == start_time
      rescue Error, SystemCallError
        false
      end

      def uid
        process.uid
      end

      # The directories the process may keep its ring in, as it sees them,
      # for a state file at +state_path+ (RingDirectories).
      def ring_dirs(state_path)
        named = environment[RingDirectories::SETTING].to_s
        RingDirectories.of(named: (absolute(named) unless named.empty?), state_dir: File.dirname(state_path),
                           uid: process.uid_as_seen_inside(uid))
      end

      private

      # A process that could not read its own /proc names itself with pid
      # namespace 0.
      def file_names
        @file_names ||= [process.pid_namespace, 0].map { |namespace| "#{process.own_pid}-#{namespace}.state" }
      end

      def read_file(dir, name)
        path = File.join(dir, name)
        text = process.guard(path) do
          PrivateFile.read(process.reach(dir), name, owner: uid, described: "the uid process #{pid} runs as",
                                                     limit: MAX_SIZE)
        end
        text && check(path, JSON.parse(text))
      rescue PrivateFile::Untrusted => e
        reject(path, e.message, untrusted: true)
      rescue JSON::ParserError => e
        reject(path, "it is not valid JSON (#{e.message.lines.first.strip})")
      end

      def check(path, data)
        return reject(path, "it is not a JSON object") unless data.is_a?(Hash)
        unless data["format"] == FORMAT
          return reject(path, "it has format #{data["format"].inspect}, this static-tracing reads format #{FORMAT}")
        end
        return reject(path, "it names pid #{data["pid"].inspect}") unless data["pid"] == process.own_pid

        unless data["start_time"] == start_time
          return reject(path, "it was written by an earlier process with the same pid (started at tick " \
                              "#{data["start_time"].inspect}; process #{pid} started at tick #{start_time})")
        end
        return reject(path, "its mode #{data["mode"].inspect} is not one of #{MODES.join(", ")}") unless
          MODES.include?(data["mode"])

        wrong_signal = signal_problem(data)
        return reject(path, wrong_signal, untrusted: true) if wrong_signal

        published(path, data)
      end

      # What is wrong with the signal the file names, or nil. Only mode
      # signal needs one; whatever is named must be a toggle signal, by its
      # number here, which is the number that would be sent.
      def signal_problem(data)
        signal = data["signal"]
        return if signal.nil? && data["signal_number"].nil? && data["mode"] != "signal"
        return "it names no signal although its mode is signal" if signal.nil?

        unknown_signal(signal) || toggle_problem(signal, data["signal_number"])
      end

      def unknown_signal(signal)
        return if signal.is_a?(String) && Signal.list.key?(signal) && signal != "EXIT"

        "it names signal #{signal.inspect}, which is no signal's name"
      end

      def toggle_problem(signal, number)
        refusal = SignalRules.refusal(signal)
        return "it names SIG#{signal}, which static_tracing never toggles on (#{refusal})" if refusal
        return if number == Signal.list[signal]

        "it names SIG#{signal} with signal number #{number.inspect}, but SIG#{signal} is #{Signal.list[signal]}"
      end

      def published(path, data)
        Published.new(path:, mode: data["mode"], signal: data["signal"], signal_number: data["signal_number"],
                      enabled: data["enabled"] == true, armed: armed(data),
                      block_errors: published_count(data["block_errors"]),
                      control: own_file(path, data["control"], "control"),
                      recorder: recorder(path, data["recorder"]), recorder_reply: reply(data["recorder_reply"]),
                      recorder_ended: ended(data["recorder_ended"]),
                      version: shown(data["version"]), ruby: shown(data["ruby"]))
      end

      # +file+ if it is the process's own file of that +kind+ next to its
      # state file (`<pid>-<pidns>.<kind>`), else nil: nothing is ever
      # opened elsewhere on the word of a file.
      def own_file(state_path, file, kind)
        return unless file.is_a?(String) && File.dirname(file) == File.dirname(state_path)

        file if file_names.any? { |name| File.basename(file) == name.sub(/\.state\z/, ".#{kind}") }
      end

      # What the process records: only with a ring of its own name, in a
      # directory it may keep rings in (RingDirectories), as it sees them.
      def recorder(state_path, data)
        return unless data.is_a?(Hash)

        ring = data["ring"]
        return unless file_names.any? { |name| RingDirectories.holds?(ring_dirs(state_path), ring, ring_name(name)) }

        data
      end

      def ring_name(state_name)
        state_name.sub(/\.state\z/, ".ring")
      end

      def reply(data)
        return unless data.is_a?(Hash) && data["id"].is_a?(String)

        { "id" => data["id"], "ok" => data["ok"] == true, "message" => CLI.shown(data["message"]),
          "pending" => data["pending"] == true }
      end

      def ended(data)
        return unless data.is_a?(Hash) && data["id"].is_a?(String) && data["reason"].is_a?(String)

        { "id" => data["id"], "reason" => CLI.shown(data["reason"]),
          "unrecorded" => published_count(data["unrecorded"]) || 0,
          "unrecorded_probes" => Array(data["unrecorded_probes"]).grep(String).map { |name| CLI.shown(name) } }
      end

      # Text the process published, only ever shown: escaped (CLI.shown).
      def shown(text)
        CLI.shown(text) if text.is_a?(String)
      end

      # A count the process published: a non-negative Integer, else none.
      def published_count(value)
        value if value.is_a?(Integer) && !value.negative?
      end

      # Only strings count: the list is shown, never acted on.
      def armed(data)
        return unless data["mode"] == "attach"

        Array(data["armed"]).grep(String)
      end

      def reject(path, reason, untrusted: false)
        @rejected << Rejected.new(path, reason, untrusted)
        nil
      end

      # As the process started (a change it made to ENV later is not
      # visible here), read once.
      def environment
        @environment ||= process.read("environ").split("\0").each_with_object({}) do |entry, env|
          name, value = entry.split("=", 2)
          env[name] = value if value
        end
      end

      # A relative $STATIC_TRACING_DIR is relative to the process's working
      # directory, which the process resolved when it started.
      def absolute(dir)
        return dir if dir.start_with?("/")

        File.join(File.readlink(process.join("cwd")), dir)
      rescue SystemCallError
        dir
      end
    end
  end
end
