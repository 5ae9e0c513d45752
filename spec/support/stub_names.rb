# frozen_string_literal: true

# The names the gem gives a process's files in a stub directory, as specs
# expect them: a process is `<pid>-<pidns>`, its pid and the inode number of
# its pid namespace (see ProcessKey in ext/stapsdt/src/stub_dir.rs).
module StubNames
  module_function

  # The key of process +pid+ of this pid namespace, read from /proc: the
  # process must be alive.
  def process_key(pid = Process.pid)
    "#{pid}-#{pid_namespace(pid)}"
  end

  def pid_namespace(pid = Process.pid)
    File.stat("/proc/#{pid}/ns/pid").ino
  end

  def state_file(pid = Process.pid)
    "#{process_key(pid)}.state"
  end

  # The FIFO the process takes static-tracing's requests from.
  def control_file(pid = Process.pid)
    "#{process_key(pid)}.control"
  end

  # The ring the recorder writes into.
  def ring_file(pid = Process.pid)
    "#{process_key(pid)}.ring"
  end

  # Matches the base name of a stub file of +provider+ made by process +pid+.
  def stub_file_pattern(provider, pid = Process.pid)
    /\A#{provider}-#{process_key(pid)}-\d+\.so\z/
  end
end
