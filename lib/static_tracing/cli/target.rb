# frozen_string_literal: true

require_relative "stub_file"
require_relative "process_dir"

module StaticTracing
  module CLI
    # A live process seen through /proc: the static_tracing stubs it has
    # mapped, their probes, and whether a tracer is attached to each.
    #
    # Stubs are recognized by name (`<provider>-<pid>-<pidns>-<generation>.so`,
    # or the memfd `static_tracing:<provider>`) and confirmed by their notes.
    # The pid in a file name is the creator's, which is the parent for a
    # forked worker, so it is not compared with the target's.
    class Target
      STUB_FILE = /\A(?<provider>[A-Za-z_][A-Za-z0-9_]*)-\d+-\d+-\d+\.so\z/
      MEMFD = %r{\A/memfd:static_tracing:(?<provider>[A-Za-z_][A-Za-z0-9_]*)\z}
      DELETED = " (deleted)"
      EXTENSION = "static_tracing.so"

      Mapping = Struct.new(:start, :finish, :offset, :device, :inode, :name)

      # A loaded stub. +path+ is where a tracer finds it: the file's path as
      # the process sees it (bpftrace -p PID opens it through the process's
      # root), or a /proc path to its bytes (memfd, deleted file); +mapping+
      # is the name /proc/PID/maps gives it. Probe addresses are relative to +bias+.
      Stub = Struct.new(:provider, :path, :mapping, :memfd, :deleted, :bias, :file, keyword_init: true) do
        def probes
          file.probes
        end
      end

      # A probe and what its memory says now. +attached+ is nil when the
      # stub went away while it was being read.
      ProbeState = Struct.new(:stub, :probe, :attached, :semaphore, :breakpoint, keyword_init: true)

      # A file named like a stub that is not one, and why.
      Ignored = Struct.new(:mapping, :reason)

      attr_reader :pid, :ignored

      def initialize(pid, proc_dir: "/proc")
        @pid = pid
        @process = ProcessDir.new(pid, proc_dir:)
        @ignored = []
        raise Error, "process #{pid} has exited (a zombie not yet reaped by its parent)" if @process.zombie?
      end

      # The stubs mapped in the process, by provider name.
      def stubs
        @stubs ||= stub_mappings.filter_map { |key, mappings| load_stub(key, mappings) }
                                .sort_by { |stub| [stub.provider, stub.path] }
      end

      # Whether the gem's native extension is mapped, i.e. the process
      # required static_tracing at all; from a file since deleted too (a
      # deploy removed the release or gem version the process loaded).
      def extension_loaded?
        mappings.any? { |mapping| File.basename(mapping.name.delete_suffix(DELETED)) == EXTENSION }
      end

      # Every probe of every stub, with its semaphore and probe site read
      # from the process's memory.
      def probe_states
        with_memory do |memory|
          stubs.flat_map do |stub|
            stub.probes.map { |probe| probe_state(memory, stub, probe) }
          end
        end
      end

      private

      def mappings
        @mappings ||= @process.read("maps").each_line.filter_map { |line| parse_mapping(line.chomp) }
      end

      def parse_mapping(line)
        range, _perms, offset, device, inode, name = line.split(" ", 6)
        return unless name

        start, finish = range.split("-").map { |address| address.to_i(16) }
        Mapping.new(start, finish, offset.to_i(16), device, inode.to_i, name)
      end

      def stub_mappings
        mappings.select { |mapping| stub_provider(mapping.name) }
                .group_by { |mapping| [mapping.device, mapping.inode, mapping.name] }
      end

      # The provider a mapping's name says it holds, or nil.
      def stub_provider(name)
        bare = name.delete_suffix(DELETED)
        match = MEMFD.match(bare) || (bare.start_with?("/") && STUB_FILE.match(File.basename(bare)))
        match && match[:provider]
      end

      def load_stub(key, mappings)
        name = key.last
        memfd = name.start_with?("/memfd:")
        path, file = read_stub(name, memfd, mappings)
        provider = stub_provider(name)
        return ignore(name, "its notes name #{file.providers.join(", ")}, not #{provider}") unless
          file.providers == [provider]

        Stub.new(provider:, path:, mapping: name, memfd:, deleted: !memfd && name.end_with?(DELETED),
                 bias: load_bias(mappings), file:)
      rescue StubFile::FormatError => e
        ignore(name, e.message)
      end

      def ignore(name, reason)
        @ignored << Ignored.new(name, reason)
        nil
      end

      # The stub is mapped at an address equal to its file offset plus the bias.
      def load_bias(mappings)
        first = mappings.find { |mapping| mapping.offset.zero? } || mappings.first
        first.start - first.offset
      end

      # Where the stub's bytes can be read, trying the file by name (through
      # the process's root, which may be a container's), an open descriptor
      # (memfd), then the mapping itself. A source must be the mapped file:
      # same inode. Overlay file systems (containers) may show another inode
      # number through the path than maps does, so the path is tried last
      # without that check.
      def read_stub(name, memfd, mappings)
        sources = stub_sources(name, memfd, mappings)
        sources.each do |shown, source|
          bytes = read_source(source) or next
          return [shown || display_name(name, source), StubFile.parse(bytes)]
        end
        raise StubFile::FormatError, "cannot read it: no path, descriptor or map_files entry in #{@process.path} " \
                                     "leads to it"
      end

      def read_source(source)
        @process.guard(source) { File.binread(source) }
      rescue Errno::ENOENT, Errno::ESRCH
        # Gone since it was found: the stub was unloaded meanwhile.
        nil
      end

      # [name to show, path to read] pairs, best first. A file is shown by
      # its path as the process sees it, which is also what a tracer given
      # the process (bpftrace -p PID) resolves through its root.
      def stub_sources(name, memfd, mappings)
        first = mappings.first
        unless memfd || name.end_with?(DELETED)
          inside = @process.path_inside(name)
          by_name = [inside, @process.reach(inside)]
        end
        sources = [by_name, *(descriptors_of(first.inode) if memfd),
                   [nil, @process.join("map_files/#{first.start.to_s(16)}-#{first.finish.to_s(16)}")]]
        (sources.compact.select { |_, source| same_inode?(source, first.inode) } + [by_name].compact).uniq
      end

      def display_name(name, source)
        name.end_with?(DELETED) || name.start_with?("/memfd:") ? source : name
      end

      def descriptors_of(inode)
        fd_dir = @process.join("fd")
        @process.guard(fd_dir) { Dir.children(fd_dir) }.sort_by(&:to_i).filter_map do |fd|
          path = File.join(fd_dir, fd)
          [path, path] if same_inode?(path, inode)
        end
      end

      def same_inode?(path, inode)
        File.stat(path).ino == inode
      rescue SystemCallError
        false
      end

      def probe_state(memory, stub, probe)
        semaphore = probe.semaphore.zero? ? 0 : memory.pread(2, stub.bias + probe.semaphore).unpack1("S<")
        nop = stub.file.nop
        breakpoint = nop ? memory.pread(nop.bytesize, stub.bias + probe.pc) != nop : false
        ProbeState.new(stub:, probe:, attached: semaphore.positive? || breakpoint, semaphore:, breakpoint:)
      rescue Errno::EIO, EOFError
        ProbeState.new(stub:, probe:, attached: nil, semaphore: nil, breakpoint: nil)
      end

      def with_memory(&)
        path = @process.join("mem")
        @process.guard(path) { File.open(path, "rb", &) }
      end
    end
  end
end
