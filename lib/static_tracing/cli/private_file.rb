# frozen_string_literal: true

module StaticTracing
  module CLI
    # Reads a file from a stub directory only if it could only have
    # been written by the user it belongs to, by the rules the gem applies to
    # its stub directories: the directory is a real directory, owned by that
    # user and private to them; the file is a regular file, owned by them,
    # private, with one link and no more bytes than the caller allows.
    # Nothing is followed, nothing blocks (a FIFO, a device) and no more
    # than the cap is read.
    #
    # The file is opened relative to the directory that was checked, through
    # its descriptor, so that neither can be swapped between check and read.
    module PrivateFile
      # The file, or its directory, breaks a rule: the message says which.
      class Untrusted < StandardError; end

      PROC_FD = "/proc/self/fd"
      OPEN_FLAGS = File::RDONLY | File::NOFOLLOW | File::NONBLOCK
      WRITE_FLAGS = File::RDWR | File::NOFOLLOW | File::NONBLOCK
      # The gem publishes a file by renaming a new one over it, so the one
      # opened can lose its last link before it is checked: it is opened
      # again by name, this many times at most.
      OPENS = 8
      REPLACED = Object.new.freeze
      # Whose the file must be (+owner+, a uid, and +described+, whose uid
      # that is, for messages), its largest size, and whether it is opened
      # for writing too.
      Rules = Struct.new(:owner, :described, :limit, :write, keyword_init: true)

      module_function

      # The bytes of +name+ in +dir+ (a path from here), or nil when there is
      # no such file. +owner+ is the uid both must belong to, +described+
      # says whose uid that is, for messages.
      def read(dir, name, owner:, described:, limit:)
        open_checked(dir, name, owner:, described:, limit:) do |file|
          bytes = file.read(limit + 1) || +""
          raise Untrusted, "it grew past #{limit} bytes while it was read" if bytes.bytesize > limit

          bytes
        end
      end

      # Yields +name+ in +dir+ opened, once it has passed the checks #read
      # makes (+rules+: owner:, described: and limit: as for #read), and
      # returns what the block returns; nil when there is no such file. For
      # a file too large to read whole, a recorder's ring: the block reads
      # what it needs, no more than the size it finds. +write+ opens it for
      # writing too: a ring's reader stores in it how far it has read.
      def open_checked(dir, name, write: false, **rules, &block)
        rules = Rules.new(write:, **rules)
        open_directory(dir, rules) do |directory|
          OPENS.times do
            result = open_once(directory, name, rules, &block)
            return result unless REPLACED.equal?(result)
          end
          raise Untrusted, "it was replaced #{OPENS} times in a row while it was read"
        end
      end

      def open_once(directory, name, rules)
        open_file(directory, name, rules) do |file|
          stat = file.stat
          next REPLACED if stat.file? && stat.nlink.zero?

          check_file(stat, rules)
          yield file
        end
      end

      # As #open_file, for the directory: its errors, not the block's.
      def open_directory(dir, rules)
        opened = false
        check_directory(File.lstat(dir), rules)
        File.open(dir, OPEN_FLAGS) do |directory|
          opened = true
          # Checked again on what was opened: the path may have changed since.
          check_directory(directory.stat, rules)
          yield directory
        end
      rescue Errno::ENOENT, Errno::ENOTDIR, Errno::ELOOP => e
        raise if opened
        raise Untrusted, "its directory #{dir} is a symbolic link" if e.is_a?(Errno::ELOOP)

        nil
      end

      # Yields +name+ opened; nil when there is no such file. The errors
      # rescued are those of the open, not those the block raises.
      def open_file(directory, name, rules)
        path = File.join(PROC_FD, directory.fileno.to_s, name)
        opened = false
        File.open(path, rules.write ? WRITE_FLAGS : OPEN_FLAGS) do |file|
          opened = true
          yield file
        end
      rescue Errno::ENOENT, Errno::ELOOP, Errno::EACCES, Errno::EISDIR, Errno::ENXIO => e
        raise if opened

        refuse_open(e, path, rules)
      end

      def refuse_open(error, path, rules)
        case error
        when Errno::ENOENT then nil
        when Errno::ELOOP then raise Untrusted, "it is a symbolic link"
        else
          # Not open to this user, or not a file that opens as one (a
          # directory for writing, a socket): the reason, by the rules.
          check_file(File.lstat(path), rules)
          raise Untrusted, "it cannot be #{rules.write ? "written" : "read"} by uid #{::Process.euid}"
        end
      end

      def check_directory(stat, rules)
        raise Untrusted, "its directory is a symbolic link" if stat.symlink?
        raise Untrusted, "its directory is a #{stat.ftype}, not a directory" unless stat.directory?

        check_owner(stat, rules, "its directory is")
        return if (stat.mode & 0o077).zero?

        raise Untrusted, "its directory has mode #{format("%04o", stat.mode & 0o7777)}: others can write to it " \
                         "or read it, and the gem never uses such a directory (it needs mode 0700)"
      end

      def check_file(stat, rules)
        raise Untrusted, "it is a #{stat.ftype}, not a regular file" unless stat.file?

        check_owner(stat, rules, "it is")
        unless (stat.mode & 0o077).zero?
          raise Untrusted, "it has mode #{format("%04o", stat.mode & 0o7777)}, not private to its owner " \
                           "(the gem writes it with mode 0600)"
        end
        raise Untrusted, "it has #{stat.nlink} links: the gem's has one" unless stat.nlink == 1

        limit = rules.limit
        raise Untrusted, "it has #{stat.size} bytes, more than the #{limit} such a file can have" if stat.size > limit
      end

      def check_owner(stat, rules, subject)
        return if stat.uid == rules.owner

        raise Untrusted, "#{subject} owned by uid #{stat.uid}, not by uid #{rules.owner} (#{rules.described})"
      end
    end
  end
end
