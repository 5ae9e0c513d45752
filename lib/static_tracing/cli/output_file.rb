# frozen_string_literal: true

require "securerandom"

module StaticTracing
  module CLI
    # The one way the command creates a file (a trace file, a report).
    #
    # The command often runs as root in a directory someone else owns (the
    # traced process's user), under a name that user can guess: it must not
    # be made to write through a link they planted, into a FIFO or device,
    # or into a file of theirs, and what it writes (SQL, paths, user data)
    # must be readable by no one else, whatever the umask.
    #
    # So the data goes into a new file, created exclusively and without
    # following a link, private (0600), and only a finished file takes the
    # destination's name: by rename, which replaces a directory entry and
    # never writes through a link or into an existing inode. Until then the
    # destination is as it was, and it stays so when writing fails.
    module OutputFile
      CREATE = File::WRONLY | File::CREAT | File::EXCL | File::NOFOLLOW
      MODE = 0o600
      # Names tried, PATH then PATH-2 and on, when a name of its own is wanted.
      FREE_NAMES = 100
      KINDS = { "directory" => "a directory", "fifo" => "a FIFO", "characterSpecial" => "a character device",
                "blockSpecial" => "a block device", "socket" => "a socket" }.freeze

      module_function

      # Writes what the block writes to the IO it is given to +path+ and
      # returns the path written. +replace+: a regular file at +path+ is
      # replaced (what an explicit -o asks for; a hard link to it keeps the
      # old contents); without it nothing that exists is replaced, and a
      # name taken means the first free one of PATH-2, PATH-3... (before
      # the extension) is used instead: for a name nobody asked for, which
      # anyone who can write to the directory could have planted. Raises
      # CLI::Error naming the path and why (+contents+ says what was
      # written, for the message: "the report").
      #
      # +beside+, for what cannot be made again (a recording): where the
      # destination has become what is never replaced since it was checked
      # (a link planted meanwhile), the file is written under the first
      # free name beside it instead, and +beside+ is called with why and
      # that name, for the command to say.
      def write(path, replace: true, contents: nil, beside: nil, &block)
        check(path, replace:, contents:)
        replace ? replace_file(path, &block) : create_free(path, &block)
      rescue Refused => e
        raise unless beside

        create_free(path, &block).tap { |written| beside.call(e.reason, written) }
      rescue SystemCallError, IOError => e
        raise Error, message(path, contents, CLI.reason(e))
      end

      # What #check refuses: the destination, and why.
      class Refused < Error
        attr_reader :reason

        def initialize(message, reason)
          super(message)
          @reason = reason
        end
      end

      # Refuses, with the CLI::Error #write would raise, a destination that
      # cannot be written: its directory missing or not writable by this
      # user, or (when it is to be replaced) the destination itself a
      # symbolic link or anything but a regular file. For a command to call
      # before its work, not after it: checked again when it writes.
      def check(path, replace: true, contents: nil)
        directory = File.dirname(path)
        refuse(path, contents, "Not a directory") unless File.stat(directory).directory?
        unless File.writable?(directory) && File.executable?(directory)
          refuse(path, contents, "uid #{::Process.euid} may not create files in #{File.expand_path(directory)}")
        end
        check_destination(path, contents) if replace
        path
      rescue SystemCallError => e
        refuse(path, contents, CLI.reason(e))
      end

      def check_destination(path, contents)
        stat = File.lstat(path)
        reason = if stat.symlink?
                   "it is a symbolic link, and #{PROGRAM} never writes through one"
                 elsif !stat.file?
                   "it is #{KINDS.fetch(stat.ftype, stat.ftype)}, not a regular file"
                 end
        raise Refused.new(message(path, contents, reason), reason) if reason
      rescue Errno::ENOENT
        nil
      end

      def replace_file(path, &)
        # Hidden, and unguessable so that nobody can have planted it.
        temporary = File.join(File.dirname(path), ".#{PROGRAM}-#{SecureRandom.hex(16)}.tmp")
        raise Errno::EEXIST, temporary unless create(temporary, &)

        begin
          File.rename(temporary, path)
        rescue SystemCallError
          remove(temporary)
          raise
        end
        path
      end

      def create_free(path, &)
        extension = File.extname(path)
        stem = path.delete_suffix(extension)
        names = [path, *(2..FREE_NAMES).map { |number| "#{stem}-#{number}#{extension}" }]
        names.each do |name|
          return name if create(name, &)
        end
        raise Error, message(path, nil, "it and the #{FREE_NAMES - 1} names after it (up to #{names.last}) are taken")
      end

      # The new file +path+, written by the block and closed; false when the
      # name is taken (by anything: a link too). Removed if writing fails.
      def create(path)
        file = File.new(path, CREATE, MODE)
      rescue Errno::EEXIST
        false
      else
        written = false
        begin
          # The umask can only have taken bits from the mode asked for (all of them, under 0777).
          file.chmod(MODE)
          file.binmode
          yield file
          file.close
          written = true
        ensure
          unless written
            file.close unless file.closed?
            remove(path)
          end
        end
      end

      # A failure while removing what it made must not hide why it failed.
      def remove(path)
        File.unlink(path)
      rescue SystemCallError
        nil
      end

      def refuse(path, contents, reason)
        raise Error, message(path, contents, reason)
      end

      def message(path, contents, reason)
        "cannot write #{contents ? "#{contents} to " : ""}#{path}: #{reason}"
      end
    end
  end
end
