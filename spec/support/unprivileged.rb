# frozen_string_literal: true

require "fileutils"
require "tmpdir"

module E2E
  # Processes run as a user with no privilege at all, for the specs that
  # promise something works without: uid and gid 65534 (nobody and nogroup
  # on Debian), no supplementary group, no capability (none inheritable,
  # an empty bounding set) and no_new_privs, by setpriv(1) as root. Their
  # code must come from E2E.portable_root, which that user can read.
  module Unprivileged
    UID = 65_534
    GID = 65_534
    SETPRIV = ["setpriv", "--reuid=#{UID}", "--regid=#{GID}", "--clear-groups", "--inh-caps=-all",
               "--bounding-set=-all", "--no-new-privs"].freeze
    # Where the gem's files go for a process of that user: its own default
    # stub and ring directories, whatever root's environment says.
    ENV_RESET = { "STATIC_TRACING_DIR" => nil, "XDG_RUNTIME_DIR" => nil, "STATIC_TRACING_RING_DIR" => nil,
                  "HOME" => "/" }.freeze
    # Hides tracefs and debugfs (where tracefs also shows) under an empty,
    # read-only tmpfs, in a mount namespace of its own, then runs "$@".
    HIDE_TRACEFS = <<~'SH'
      for dir in /sys/kernel/tracing /sys/kernel/debug; do
        if [ -d "$dir" ]; then mount -t tmpfs -o ro,size=4k,mode=0555 static_tracing_none "$dir" || exit 97; fi
      done
      exec "$@"
    SH

    class << self
      # Why such processes cannot be started here, or nil.
      def unavailable_reason
        return @unavailable_reason if defined?(@unavailable_reason)

        @unavailable_reason =
          if Process.euid != 0 then "running as another user needs root (running as uid #{Process.euid})"
          elsif !E2E.which("setpriv") then "setpriv(1) is not installed"
          elsif !system(*SETPRIV, "true", out: File::NULL, err: File::NULL)
            "setpriv cannot drop every privilege here"
          end
      end

      # Why tracefs cannot be hidden from a process here, or nil.
      def isolation_unavailable_reason
        return @isolation_unavailable_reason if defined?(@isolation_unavailable_reason)

        @isolation_unavailable_reason =
          if !E2E.which("unshare") then "unshare(1) is not installed"
          elsif !system(*hiding_tracefs("true"), out: File::NULL, err: File::NULL)
            "unshare --mount cannot hide tracefs here"
          end
      end

      # +command+ run as that user.
      def command(*command)
        [*SETPRIV, *command]
      end

      # +command+ run where tracefs and debugfs show nothing (run it as root:
      # it mounts first, and may drop its privileges after).
      def hiding_tracefs(*command)
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", HIDE_TRACEFS, "sh", *command]
      end

      # A new directory that user owns (mode 0755), removed by the block's end.
      def directory
        dir = Dir.mktmpdir("static_tracing-unprivileged", File.directory?("/var/tmp") ? "/var/tmp" : nil)
        File.chmod(0o755, dir)
        File.chown(UID, GID, dir)
        yield dir
      ensure
        FileUtils.rm_rf(dir) if dir
      end

      # A script at +path+ that stands in for bpftrace: run, it appends
      # how to +log+ and fails. Lets a spec show that bpftrace was not run.
      def bpftrace_trap(path, log)
        File.write(path, "#!/bin/sh\necho \"$0 $*\" >> '#{log}'\nexit 1\n")
        File.chmod(0o755, path)
        path
      end

      # What /proc says of process +pid+'s privileges: the uids and gids
      # (real, effective, saved, filesystem), the supplementary groups, the
      # capability sets and no_new_privs.
      def credentials(pid)
        status = File.read("/proc/#{pid}/status")
        field = ->(name) { status[/^#{name}:[ \t]*(.*)$/, 1].to_s.split }
        {
          uids: field.call("Uid").map(&:to_i), gids: field.call("Gid").map(&:to_i),
          groups: field.call("Groups").map(&:to_i),
          capabilities: %w[CapInh CapPrm CapEff CapBnd CapAmb].to_h { |set| [set, field.call(set).first.to_i(16)] },
          no_new_privs: field.call("NoNewPrivs").first == "1"
        }
      end

      # What #credentials says of a process that runs as that user with nothing more.
      def expected_credentials
        { uids: [UID] * 4, gids: [GID] * 4, groups: [],
          capabilities: %w[CapInh CapPrm CapEff CapBnd CapAmb].to_h { |set| [set, 0] }, no_new_privs: true }
      end
    end
  end

  module Helpers
    # Skips, or fails when end-to-end examples are required, where
    # processes cannot be run without privilege (or tracefs hidden from
    # them, with +hiding_tracefs+).
    def require_unprivileged!(hiding_tracefs: false)
      reason = Unprivileged.unavailable_reason
      reason ||= Unprivileged.isolation_unavailable_reason if hiding_tracefs
      cannot_run!(reason) if reason
    end
  end
end
