# frozen_string_literal: true

module StaticTracing
  module CLI
    # Reads a small file from a stub directory only if it could only have
    # been written by the user it belongs to, by the rules the gem applies to
    # its stub directories: the directory is a real directory, owned by that
    # user and private to them; the file is a regular file, owned by them,
    # private, with one link and a few bytes at most. Nothing is followed,
    # nothing blocks (a FIFO, a device) and no more than the cap is read.
    #
    # The file is opened relative to the directory that was checked, through
    # its descriptor, so that neither can be swapped between check and read.
    module PrivateFile
      # The file, or its directory, breaks a rule: the message says which.
      class Untrusted < StandardError; end

      PROC_FD = "/proc/self/fd"
      OPEN_FLAGS = File::RDONLY | File::NOFOLLOW | File::NONBLOCK
      # The gem publishes a file by renaming a new one over it, so the one
      # opened can lose its last link before it is checked: it is opened
      # again by name, this many times at most.
      OPENS = 8
      REPLACED = Object.new.freeze

      module_function

      # The bytes of +name+ in +dir+ (a path from here), or nil when there is
      # no such file. +owner+ is the uid both must belong to, +described+
      # says whose uid that is, for messages.
      def read(dir, name, owner:, described:, limit:)
        open_directory(dir, owner, described) do |directory|
          OPENS.times do
            bytes = read_once(directory, name, owner, described, limit)
            return bytes unless REPLACED.equal?(bytes)
          end
          raise Untrusted, "it was replaced #{OPENS} times in a row while it was read"
        end
      end

      def read_once(directory, name, owner, described, limit)
        open_file(directory, name, owner, described, limit) do |file|
          stat = file.stat
          next REPLACED if stat.file? && stat.nlink.zero?

          check_file(stat, owner, described, limit)
          bytes = file.read(limit + 1) || +""
          raise Untrusted, "it grew past #{limit} bytes while it was read" if bytes.bytesize > limit

          bytes
        end
      end

      def open_directory(dir, owner, described, &)
        check_directory(File.lstat(dir), owner, described)
        File.open(dir, OPEN_FLAGS) do |directory|
          # Checked again on what was opened: the path may have changed since.
          check_directory(directory.stat, owner, described)
          yield directory
        end
      rescue Errno::ENOENT, Errno::ENOTDIR
        nil
      rescue Errno::ELOOP
        raise Untrusted, "its directory #{dir} is a symbolic link"
      end

      def open_file(directory, name, owner, described, limit, &)
        path = File.join(PROC_FD, directory.fileno.to_s, name)
        File.open(path, OPEN_FLAGS, &)
      rescue Errno::ENOENT
        nil
      rescue Errno::ELOOP
        raise Untrusted, "it is a symbolic link"
      rescue Errno::EACCES
        # Not readable by this user: the reason it is not the owner's file.
        check_file(File.lstat(path), owner, described, limit)
        raise Untrusted, "it cannot be read by uid #{::Process.euid}"
      end

      def check_directory(stat, owner, described)
        raise Untrusted, "its directory is a symbolic link" if stat.symlink?
        raise Untrusted, "its directory is a #{stat.ftype}, not a directory" unless stat.directory?

        check_owner(stat, owner, described, "its directory is")
        return if (stat.mode & 0o077).zero?

        raise Untrusted, "its directory has mode #{format("%04o", stat.mode & 0o7777)}: others can write to it " \
                         "or read it, and the gem never uses such a directory (it needs mode 0700)"
      end

      def check_file(stat, owner, described, limit)
        raise Untrusted, "it is a #{stat.ftype}, not a regular file" unless stat.file?

        check_owner(stat, owner, described, "it is")
        unless (stat.mode & 0o077).zero?
          raise Untrusted, "it has mode #{format("%04o", stat.mode & 0o7777)}, not private to its owner " \
                           "(the gem writes it with mode 0600)"
        end
        raise Untrusted, "it has #{stat.nlink} links: the gem's has one" unless stat.nlink == 1
        raise Untrusted, "it has #{stat.size} bytes, more than the #{limit} such a file can have" if stat.size > limit
      end

      def check_owner(stat, owner, described, subject)
        return if stat.uid == owner

        raise Untrusted, "#{subject} owned by uid #{stat.uid}, not by uid #{owner} (#{described})"
      end
    end
  end
end
