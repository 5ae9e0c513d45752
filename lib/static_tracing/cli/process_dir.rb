# frozen_string_literal: true

module StaticTracing
  module CLI
    # /proc/PID of another process: what it says about that process (its
    # uid, its own pid and pid namespace when it runs in a container), and
    # the errors of reading it, or of signalling the process, turned into
    # what to do about them. Target and ProcessState see a process through it.
    class ProcessDir
      # PF_KTHREAD, in the flags field of /proc/PID/stat.
      KERNEL_THREAD = 0x00200000
      KTHREADD = 2

      attr_reader :pid, :path

      def initialize(pid, proc_dir: "/proc")
        @pid = pid
        @path = File.join(proc_dir, pid.to_s)
        raise Error, "no process with PID #{pid}: check the PID (ps -p #{pid})" unless File.directory?(@path)
        return unless kernel_thread?

        raise Error, "process #{pid} is a kernel thread (#{command_name}), not a program: it runs no Ruby and no " \
                     "static_tracing; give the PID of a Ruby process (pgrep -a ruby)"
      end

      def join(name)
        File.join(@path, name)
      end

      # The contents of /proc/PID/+name+.
      def read(name)
        file = join(name)
        guard(file) { File.read(file) }
      end

      # The fields of /proc/PID/stat after the command name, which may hold
      # spaces and parentheses: the state first.
      def stat_fields
        read("stat").rpartition(")").last.split
      end

      def zombie?
        stat_fields.first == "Z"
      rescue Error, SystemCallError
        false
      end

      def status_field(name)
        read("status")[/^#{name}:[ \t]*(.*)$/, 1]
      end

      # The effective uid the process runs as, as this process's user
      # namespace sees it (files it owns show the same uid here).
      def uid
        @uid ||= Integer(status_field("Uid").split[1], 10)
      end

      # [uid, gids] the kernel checks the process's file accesses with:
      # its file-system uid, and its file-system gid with its groups.
      def credentials
        uid = Integer(status_field("Uid").split[3], 10)
        gids = [status_field("Gid").split[3], *status_field("Groups").to_s.split].map { |gid| Integer(gid, 10) }
        [uid, gids]
      end

      # The pid the process sees itself as: in a container, its pid in its
      # own pid namespace (the last field of NSpid).
      def own_pid
        @own_pid ||= (status_field("NSpid")&.split&.last || pid).to_i
      end

      # The inode number of the process's pid namespace.
      def pid_namespace
        @pid_namespace ||= guard(join("ns/pid")) { File.stat(join("ns/pid")).ino }
      end

      # +host_uid+ as the process sees it, through its user namespace's
      # uid_map (the same number unless it runs in a user namespace).
      def uid_as_seen_inside(host_uid)
        read("uid_map").each_line do |line|
          inside, outside, count = line.split.map { |field| Integer(field, 10) }
          return inside + host_uid - outside if host_uid >= outside && host_uid - outside < count
        end
        host_uid
      rescue Error, SystemCallError, ArgumentError, TypeError
        host_uid
      end

      # Where the path +inside+, as the process sees it, can be reached from
      # here: through its root, which is a container's own.
      def reach(inside)
        File.join(join("root"), inside)
      end

      # A path that /proc/PID/maps gives this process, as the process itself
      # sees it. The kernel names a file from the reader's root: for a
      # process whose root is a directory below ours (a chroot, or a mount
      # namespace made inside one) the name starts with that directory,
      # which the process does not see. Other names are returned as given.
      def path_inside(path)
        root = root_directory
        return path if root.nil? || root == "/" || !path.start_with?("#{root}/")

        path.delete_prefix(root)
      end

      # Runs the block, which reads +file+ of the process; turns the errors
      # of doing so into what to do about them.
      def guard(file)
        yield
      rescue Errno::ENOENT, Errno::ESRCH
        raise Error, "process #{pid} exited (#{file} is gone)" unless File.directory?(@path)

        raise
      rescue Errno::EACCES, Errno::EPERM
        raise Error, permission_message("reading #{file}")
      end

      # Why the kernel refused +action+ ("reading /proc/1/maps") on the
      # process, and what can be done about it. Root is not told to become
      # root, nor a user running as the process's uid to become that uid.
      def permission_message(action)
        me = ::Process.euid
        return "permission denied #{action} although static-tracing runs as root: #{root_refused}" if me.zero?

        owner = File.stat(@path).uid
        if owner == me
          "permission denied #{action}: process #{pid} runs as your uid #{me}, but ptrace access to it is " \
            "restricted (kernel.yama.ptrace_scope, or the process made itself undumpable); run static-tracing as root"
        else
          "permission denied #{action}: process #{pid} runs as uid #{owner}, you as uid #{me}; " \
            "run static-tracing as root or as uid #{owner}"
        end
      rescue SystemCallError
        "permission denied #{action}: run static-tracing as root"
      end

      private

      # The process's root directory as this process sees it ("/" unless it
      # is chrooted below ours), or nil when it cannot be told.
      def root_directory
        return @root_directory if defined?(@root_directory)

        @root_directory = begin
          File.readlink(join("root"))
        rescue SystemCallError
          nil
        end
      end

      def root_refused
        "not file permissions but a restriction on root blocks access to process #{pid}: ptrace restrictions " \
          "(kernel.yama.ptrace_scope 3), a security module (AppArmor, SELinux) or a container that " \
          "static-tracing runs in without CAP_SYS_PTRACE over that process (run it from the host)"
      end

      # Kernel threads have no program: the kernel flags them, and kthreadd
      # (and, on kernels without the flag, its children) have no command line.
      def kernel_thread?
        fields = stat_fields
        return true if (Integer(fields[6], 10) & KERNEL_THREAD).nonzero?

        (pid == KTHREADD || fields[1] == KTHREADD.to_s) && read("cmdline").empty?
      rescue Error, SystemCallError, ArgumentError, TypeError
        false
      end

      def command_name
        read("comm").chomp
      rescue Error, SystemCallError
        "?"
      end
    end
  end
end
