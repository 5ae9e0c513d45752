# frozen_string_literal: true

require "fileutils"
require "socket"
require "static_tracing/cli"
require "tmpdir"

# Files in a stub directory, trusted only by the gem's rules for them: a
# state file read whole (#read), a recorder's ring opened to be read in
# part or written (#open_checked). The files here belong to this process's
# user, as the gem writes them: mode 0600 in a directory of mode 0700.
RSpec.describe StaticTracing::CLI::PrivateFile do
  let(:untrusted) { described_class::Untrusted }
  let(:root) { Dir.mktmpdir("private_file") }
  let(:dir) { File.join(root, "stubs").tap { |path| Dir.mkdir(path, 0o700) } }
  let(:uid) { Process.euid }
  let(:rules) { { owner: uid, described: "the uid process 42 runs as", limit: 64 } }

  after { FileUtils.rm_rf(root) }

  def private_file(name, contents, mode: 0o600)
    path = File.join(dir, name)
    File.write(path, contents, perm: mode)
    File.chmod(mode, path)
    path
  end

  describe ".read" do
    it "returns the bytes of the owner's private file, and nil when there is none" do
      private_file("42-1.state", "{}")
      expect(described_class.read(dir, "42-1.state", **rules)).to eq("{}")
      expect(described_class.read(dir, "43-1.state", **rules)).to be_nil
    end

    it "refuses a file larger than the limit, saying both sizes" do
      private_file("42-1.state", "x" * 65)
      expect { described_class.read(dir, "42-1.state", **rules) }
        .to raise_error(untrusted, "it has 65 bytes, more than the 64 such a file can have")
    end
  end

  describe ".open_checked" do
    it "yields the file open for reading only, and returns what the block returns" do
      private_file("42-1.ring", "ring bytes")
      result = described_class.open_checked(dir, "42-1.ring", **rules) do |file|
        expect { file.pwrite("x", 0) }.to raise_error(IOError)
        file.pread(4, 5)
      end
      expect(result).to eq("byte")
    end

    it "opens it for writing too with write: true, without truncating it" do
      path = private_file("42-1.ring", "0123456789")
      described_class.open_checked(dir, "42-1.ring", write: true, **rules) do |file|
        expect(file.pread(10, 0)).to eq("0123456789")
        file.pwrite("ab", 4)
      end
      expect(File.read(path)).to eq("0123ab6789")
    end

    it "returns nil, calling nothing, when there is no such file" do
      called = false
      expect(described_class.open_checked(dir, "42-1.ring", write: true, **rules) { called = true }).to be_nil
      expect(called).to be(false)
    end

    it "allows the file up to the limit the caller gives, a ring's size" do
      private_file("42-1.ring", "r" * 64)
      expect(described_class.open_checked(dir, "42-1.ring", **rules, &:size)).to eq(64)
      private_file("43-1.ring", "r" * 65)
      expect { described_class.open_checked(dir, "43-1.ring", **rules) { raise "opened" } }
        .to raise_error(untrusted, "it has 65 bytes, more than the 64 such a file can have")
    end

    it "applies #read's rules, for writing as for reading, and never yields a file that breaks one" do
      private_file("shared.ring", "x", mode: 0o640)
      File.symlink(private_file("target.ring", "x"), File.join(dir, "link.ring"))
      File.link(private_file("linked.ring", "x"), File.join(dir, "second.link"))
      File.mkfifo(File.join(dir, "fifo.ring"), 0o600)
      Dir.mkdir(File.join(dir, "dir.ring"), 0o700)
      UNIXServer.new(File.join(dir, "socket.ring")).close
      {
        "shared.ring" => "it has mode 0640, not private to its owner (the gem writes it with mode 0600)",
        "link.ring" => "it is a symbolic link",
        "linked.ring" => "it has 2 links: the gem's has one",
        "fifo.ring" => "it is a fifo, not a regular file",
        "dir.ring" => "it is a directory, not a regular file",
        "socket.ring" => "it is a socket, not a regular file"
      }.each do |name, message|
        [false, true].each do |write|
          expect { described_class.open_checked(dir, name, write:, **rules) { raise "yielded #{name}" } }
            .to raise_error(untrusted, message)
        end
      end
    end

    it "leaves the errors of the block to the caller: they are not the open's" do
      private_file("42-1.ring", "x")
      expect { described_class.open_checked(dir, "42-1.ring", **rules) { raise Errno::ENOENT, "inside" } }
        .to raise_error(Errno::ENOENT, /inside/)
      expect { described_class.open_checked(dir, "42-1.ring", **rules) { raise Errno::EACCES, "inside" } }
        .to raise_error(Errno::EACCES, /inside/)
    end

    it "refuses a file, or a directory, that is not the owner's, naming whose uid was expected" do
      private_file("42-1.ring", "x")
      other = rules.merge(owner: uid + 1)
      expect { described_class.open_checked(dir, "42-1.ring", write: true, **other) { raise "yielded" } }
        .to raise_error(untrusted, "its directory is owned by uid #{uid}, not by uid #{uid + 1} " \
                                   "(the uid process 42 runs as)")
    end

    it "refuses a directory others can read or write" do
      private_file("42-1.ring", "x")
      File.chmod(0o755, dir)
      expect { described_class.open_checked(dir, "42-1.ring", write: true, **rules) { raise "yielded" } }
        .to raise_error(untrusted, /\Aits directory has mode 0755: others can write to it or read it/)
    end
  end
end
