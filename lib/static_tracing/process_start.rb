# frozen_string_literal: true

module StaticTracing
  # When a process started, in clock ticks since boot: field 22 of
  # /proc/PID/stat. With the pid it names one process for good, as pids are
  # reused. The gem writes its own into `<pid>-<pidns>.state`; the static-tracing
  # command reads the target's to tell that file from a stale one. Both
  # must read the field the same way.
  module ProcessStart
    # +stat+ is the text of /proc/PID/stat. Field 2, the command name in
    # parentheses, may itself hold spaces and ") ": fields are counted from
    # the last ")".
    def self.parse(stat)
      stat.rpartition(")").last.split[19].to_i
    end

    # The start time of the process whose /proc directory is +dir+, or nil
    # when it cannot be read (the process exited, or is not this user's).
    def self.of(dir)
      parse(File.read(File.join(dir, "stat")))
    rescue SystemCallError
      nil
    end
  end
end
