# frozen_string_literal: true

require "json"
require_relative "../process_start"

module StaticTracing
  module CLI
    # What a live process published about its tracing: the `<pid>.state`
    # file StaticTracing::State writes next to its stubs (mode, toggle
    # signal, whether tracing is on).
    #
    # The file is looked for where that process puts its stubs, so in the
    # directories its own environment names, in the same order: its
    # $STATIC_TRACING_DIR, its $XDG_RUNTIME_DIR/static_tracing, then
    # /tmp/static_tracing-<its uid>. A file counts only if it is this
    # process's: pids are reused, so the file's pid and start time must be
    # the process's own; one left by an earlier process is set aside.
    class ProcessState
      FORMAT = 1
      MODES = %w[on off signal].freeze

      # A published state. +path+ is the file it was read from.
      Published = Struct.new(:path, :mode, :signal, :signal_number, :enabled, :version, :ruby,
                             keyword_init: true) do
        def signal_name
          "SIG#{signal}"
        end

        def to_h
          { mode:, signal:, signal_number:, enabled:, state_file: path, version: }
        end
      end

      # A directory the process may publish to, and the setting that names it.
      Candidate = Struct.new(:dir, :origin)

      # A state file that was found but does not count, and why.
      Rejected = Struct.new(:path, :reason)

      attr_reader :pid, :rejected

      def initialize(pid, proc_dir: "/proc")
        @pid = pid
        @proc = CLI.process_dir(pid, proc_dir)
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
          list << Candidate.new("/tmp/static_tracing-#{uid}", "default")
        end
      end

      # The state the process publishes now, or nil if it publishes none.
      # Reads the file anew on each call.
      def read
        @rejected = []
        candidates.each do |candidate|
          path = File.join(candidate.dir, file_name)
          state = read_file(path)
          return state if state
        end
        nil
      end

      def file_name
        "#{pid}.state"
      end

      # When the process started (see StaticTracing::ProcessStart).
      def start_time
        @start_time ||= ProcessStart.parse(read_proc("stat"))
      end

      # Whether the process has a handler installed for +signal_number+ now
      # (SigCgt in /proc/PID/status).
      def catches?(signal_number)
        mask = status_field("SigCgt") or return false
        mask.to_i(16)[signal_number - 1] == 1
      end

      # Whether the process is still the one this object was made for.
      def alive?
        return false unless File.directory?(@proc)

        ProcessStart.parse(read_proc("stat")) == start_time
      rescue Error, SystemCallError
        false
      end

      def uid
        @uid ||= Integer(status_field("Uid").split[1], 10)
      end

      private

      def read_file(path)
        text = guard(path) { File.read(path) }
        return unless text

        check(path, JSON.parse(text))
      rescue JSON::ParserError => e
        reject(path, "it is not valid JSON (#{e.message.lines.first.strip})")
      end

      def check(path, data)
        return reject(path, "it is not a JSON object") unless data.is_a?(Hash)
        unless data["format"] == FORMAT
          return reject(path, "it has format #{data["format"].inspect}, this static-tracing reads format #{FORMAT}")
        end
        return reject(path, "it names pid #{data["pid"].inspect}") unless data["pid"] == pid

        unless data["start_time"] == start_time
          return reject(path, "it was written by an earlier process with the same pid (started at tick " \
                              "#{data["start_time"].inspect}; process #{pid} started at tick #{start_time})")
        end
        return reject(path, "its mode #{data["mode"].inspect} is not one of #{MODES.join(", ")}") unless
          MODES.include?(data["mode"])

        published(path, data)
      end

      def published(path, data)
        Published.new(path:, mode: data["mode"], signal: data["signal"], signal_number: data["signal_number"],
                      enabled: data["enabled"] == true, version: data["version"], ruby: data["ruby"])
      end

      def reject(path, reason)
        @rejected << Rejected.new(path, reason)
        nil
      end

      def environment
        read_proc("environ").split("\0").each_with_object({}) do |entry, env|
          name, value = entry.split("=", 2)
          env[name] = value if value
        end
      end

      # A relative $STATIC_TRACING_DIR is relative to the process's working
      # directory, which the process resolved when it started.
      def absolute(dir)
        return dir if dir.start_with?("/")

        File.join(File.readlink(File.join(@proc, "cwd")), dir)
      rescue SystemCallError
        dir
      end

      def status_field(name)
        read_proc("status")[/^#{name}:\s*(.*)$/, 1]
      end

      def read_proc(name)
        path = File.join(@proc, name)
        guard(path) { File.read(path) } or raise Error, "process #{pid} exited (#{path} is gone)"
      end

      # nil for a file that is not there; the errors of reading another
      # process's files turned into what to do about them.
      def guard(path)
        yield
      rescue Errno::ENOENT, Errno::ESRCH, Errno::ENOTDIR
        nil
      rescue Errno::EACCES, Errno::EPERM
        raise Error, permission_message(path)
      end

      def permission_message(path)
        owner = File.stat(@proc).uid
        "permission denied reading #{path}: process #{pid} runs as uid #{owner}, you as uid #{::Process.euid}; " \
          "run static-tracing as root or as uid #{owner}"
      rescue SystemCallError
        "permission denied reading #{path}: run static-tracing as root"
      end
    end
  end
end
