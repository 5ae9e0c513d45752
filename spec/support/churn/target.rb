# frozen_string_literal: true

# The process that spec/hardening/churn_spec.rb and `rake soak` drive
# (Churn::Target in spec/support/churn.rb starts it in attach mode, with a
# stub directory of its own). It calls traced methods from CHURN_WORKERS
# threads, checking every result, while tracers (or semaphores written from
# outside) come and go, and answers requests on stdin, one a line: "ID
# COMMAND ARGS...", several at once, with "ID ok JSON" or "ID error
# MESSAGE" on stdout. It prints "CHURN_READY PID" once every probe is
# loaded.
require "fiddle"
require "json"
require "static_tracing"
require "static_tracing/cli"

$stdout.sync = true
Thread.report_on_exception = false

# Traced methods with parameter lists of every kind, so that wrappers of
# every shape go on and off under the callers: add and scale for the
# semaphore cycles, pair, join, pick and echo for a bpftrace each, shared for
# two tracers at once (spec/support/churn/scenarios.rb).
class ChurnShop
  include StaticTracing::LatencyTracer

  def add(left, right) = left + right
  def scale(value, by: 2, plus: 0, minus: 0) = (value * by) + plus - minus
  def pair(value) = [yield(value), yield(value + 1)]
  def join(*parts, sep: "-") = parts.join(sep)
  def pick(hash, key:) = hash.fetch(key)
  def echo(value = 7) = value
  def shared(value) = -value
end

module ChurnTarget
  METHODS = ChurnShop.instance_methods(false).sort.freeze
  PROVIDER = :churn_shop
  REQUEST_THREAD = "churn request"
  # How long the workers may take to stop between two calls for a measure.
  PAUSE_TIMEOUT = 30
  # Requests answered at once: more than a driver sends at a time.
  HANDLERS = 8

  # The threads that call every traced method and check what it returns.
  class Workers
    # At most this many wrong results are kept to be shown.
    SAMPLES = 10

    def initialize(count)
      @lock = Mutex.new
      @iterations = Array.new(count, 0)
      @wrong = 0
      @samples = []
      @gate = Mutex.new
      @parked = ConditionVariable.new
      @resumed = ConditionVariable.new
      @pausing = false
      @parked_count = 0
      @threads = Array.new(count) { |index| Thread.new { work(index) } }
      @threads.each_with_index { |thread, index| thread.name = "churn worker #{index}" }
    end

    # Calls per iteration of a worker.
    CALLS = 9

    def stats
      @lock.synchronize do
        { "calls" => @iterations.sum * CALLS, "iterations" => @iterations.dup, "wrong" => @wrong,
          "samples" => @samples.dup, "alive" => @threads.count(&:alive?) }
      end
    end

    # Returns once every worker has finished an iteration begun after the call.
    def sync(timeout)
      start = @lock.synchronize { @iterations.dup }
      Wait.until(timeout) { @lock.synchronize { @iterations.zip(start).all? { |now, was| now >= was + 2 } } }
    end

    # Runs the block while every worker waits between two iterations: no
    # call of theirs is in flight and they allocate nothing, so that what
    # the block measures of the process is what it holds, not what the
    # workers made since the last collection. Raises when they do not all
    # stop within +timeout+.
    def paused(timeout)
      @gate.synchronize do
        @pausing = true
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
        until @parked_count == @threads.count(&:alive?)
          left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
          raise "the workers did not stop within #{timeout}s" unless left.positive?

          @parked.wait(@gate, left)
        end
      end
      yield
    ensure
      @gate.synchronize do
        @pausing = false
        @resumed.broadcast
      end
    end

    private

    def work(index)
      shop = ChurnShop.new
      value = 0
      loop do
        park if @pausing
        value += 1
        check(shop, value, index)
        @iterations[index] += 1
        # A server's threads wait for I/O between requests: the watcher's
        # thread gets the GVL then, as it does here.
        Thread.pass
      end
    end

    def park
      @gate.synchronize do
        @parked_count += 1
        @parked.signal
        @resumed.wait(@gate) while @pausing
        @parked_count -= 1
      end
    end

    def check(shop, value, index)
      problems = ChurnTarget.check(shop, value, index)
      return if problems.empty?

      @lock.synchronize do
        @wrong += problems.size
        @samples.concat(problems.first(SAMPLES - @samples.size))
      end
    end
  end

  # What the allocator has handed out and not had back, in bytes:
  # glibc's malloc_info, summed over its arenas (the system memory each
  # holds, less its free chunks, plus the chunks it mapped on their own).
  # Unlike the resident size, it does not count what the arenas keep free.
  module Heap
    LIBC = Fiddle::Handle::DEFAULT
    POINTER = Fiddle::TYPE_VOIDP
    OPEN_MEMSTREAM = Fiddle::Function.new(LIBC["open_memstream"], [POINTER, POINTER], POINTER)
    MALLOC_INFO = Fiddle::Function.new(LIBC["malloc_info"], [Fiddle::TYPE_INT, POINTER], Fiddle::TYPE_INT)
    FCLOSE = Fiddle::Function.new(LIBC["fclose"], [POINTER], Fiddle::TYPE_INT)
    FREE = Fiddle::Function.new(LIBC["free"], [POINTER], Fiddle::TYPE_VOID)

    def self.in_use
      totals = info[%r{.*</heap>(.*)}m, 1]
      free = %w[fast rest].sum { |type| totals[/<total type="#{type}" count="\d+" size="(\d+)"/, 1].to_i }
      mapped = totals[/<total type="mmap" count="\d+" size="(\d+)"/, 1].to_i
      totals[/<system type="current" size="(\d+)"/, 1].to_i - free + mapped
    end

    def self.info
      buffer = Fiddle::Pointer.malloc(Fiddle::SIZEOF_VOIDP, Fiddle::RUBY_FREE)
      size = Fiddle::Pointer.malloc(Fiddle::SIZEOF_SIZE_T, Fiddle::RUBY_FREE)
      stream = OPEN_MEMSTREAM.call(buffer, size)
      MALLOC_INFO.call(0, stream)
      FCLOSE.call(stream)
      address = buffer[0, Fiddle::SIZEOF_VOIDP].unpack1("J")
      Fiddle::Pointer.new(address).to_s(size[0, Fiddle::SIZEOF_SIZE_T].unpack1("J"))
    ensure
      FREE.call(address) if address
    end
  end

  # Bounded polling: the condition is read every 0.2 ms until it holds or
  # +timeout+ seconds have passed. True if it held.
  module Wait
    def self.until(timeout)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      loop do
        return true if yield
        return false if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

        sleep 0.0002
      end
    end
  end

  # Forks a child every +interval+ seconds while it runs, whether the
  # children before have exited or not. Each child checks that it starts
  # with nothing wrapped, no probe enabled and fire false (what a tracer
  # attached to the parent left in its memory is not its own), calls every
  # traced method, says what it saw on a pipe and exits, by exit and exit!
  # in turn. A second thread reads what each said and reaps it.
  class Forker
    SAMPLES = 10

    def initialize(interval)
      @interval = interval
      @lock = Mutex.new
      @forks = 0
      @bad = 0
      @samples = []
      @exits = Hash.new(0)
      @running = true
      @children = Queue.new
      @reaper = Thread.new { reap }
      @thread = Thread.new { run }
      @thread.name = "churn forker"
      @reaper.name = "churn reaper"
    end

    def stop(timeout)
      @running = false
      raise "the forker did not stop within #{timeout}s" unless @thread.join(timeout) && @reaper.join(timeout)

      @lock.synchronize do
        { "forks" => @forks, "bad" => @bad, "samples" => @samples.dup, "exits" => @exits.dup }
      end
    end

    private

    # Forks on a steady beat: a child every +interval+, or at once when the
    # last fork took longer than that.
    def run
      number = 0
      beat = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      while @running
        number += 1
        @children << fork_child(number)
        beat = [beat + @interval, Process.clock_gettime(Process::CLOCK_MONOTONIC)].max
        rest = beat - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        sleep rest if rest.positive?
      end
    ensure
      @children << nil
    end

    def fork_child(number)
      reader, writer = IO.pipe
      pid = fork do
        reader.close
        writer.puts(ChurnTarget.child_view.to_json)
        writer.close
        number.even? ? exit!(0) : exit(0)
      end
      [pid, reader]
    ensure
      writer&.close
    end

    def reap
      while (child = @children.pop)
        pid, reader = child
        line = reader.gets
        reader.close
        _, status = Process.wait2(pid)
        note(pid, line, status)
      end
    end

    def note(pid, line, status)
      problems = problems_of(line && JSON.parse(line), status)
      @lock.synchronize do
        @forks += 1
        @exits[status.success? ? "ok" : "failed"] += 1
        next if problems.empty?

        @bad += 1
        @samples << "child #{pid}: #{problems.join("; ")}" if @samples.size < SAMPLES
      end
    end

    def problems_of(view, status)
      problems = []
      problems << "no answer" unless view
      problems << "exited #{status.inspect}" unless status.success?
      problems << "saw #{view.inspect}" if view && view != ChurnTarget.clean_child_view
      problems
    end
  end

  class << self
    attr_reader :workers

    def start
      StaticTracing.providers[PROVIDER].load
      @workers = Workers.new(Integer(ENV.fetch("CHURN_WORKERS", "4")))
      @out = Mutex.new
      puts "CHURN_READY #{Process.pid}"
      serve
    end

    def wrapped
      METHODS.reject { |name| ChurnShop.instance_method(name).owner == ChurnShop }
    end

    # What a forked child sees of its own tracing, before and after calling
    # every traced method (as a worker does).
    def child_view
      tracepoints = StaticTracing.providers[PROVIDER].tracepoints.values
      before = { "wrapped" => wrapped, "enabled" => tracepoints.select(&:enabled?).map { |t| t.name.to_s } }
      problems = check(ChurnShop.new, 5, 1)
      before.merge("fired" => tracepoints.select { |t| t.fire(0) }.map { |t| t.name.to_s }, "after" => wrapped,
                   "wrong" => problems)
    rescue StandardError => e
      { "error" => "#{e.class}: #{e.message}" }
    end

    def clean_child_view
      { "wrapped" => [], "enabled" => [], "fired" => [], "after" => [], "wrong" => [] }
    end

    # Calls every traced method once (twice with defaults) and checks what
    # it returns: what is wrong, as words.
    def check(shop, value, index)
      [[:add, shop.add(value, index), value + index],
       [:scale, shop.scale(value, minus: 1, by: 3), (value * 3) - 1],
       [:scale, shop.scale(value), value * 2],
       [:pair, shop.pair(value) { |given| given * 2 }, [value * 2, (value * 2) + 2]],
       [:join, shop.join("a", value, sep: ":"), "a:#{value}"],
       [:pick, shop.pick({ k: value }, key: :k), value],
       [:echo, shop.echo, 7],
       [:echo, shop.echo(value), value],
       [:shared, shop.shared(value), -value]]
        .reject { |_, got, want| got == want }
        .map { |name, got, want| "#{name}: #{got.inspect} instead of #{want.inspect}" }
    rescue StandardError, ScriptError => e
      ["#{e.class}: #{e.message} (#{e.backtrace&.first})"]
    end

    # The name the dynamic loader gives the object holding +address+
    # (dladdr's dli_fname), as debuggers and profilers read it.
    def loader_name(address)
      @dladdr ||= Fiddle::Function.new(Fiddle::Handle::DEFAULT["dladdr"], [Fiddle::TYPE_VOIDP] * 2,
                                       Fiddle::TYPE_INT)
      info = Fiddle::Pointer.malloc(Fiddle::SIZEOF_VOIDP * 4, Fiddle::RUBY_FREE)
      return nil if @dladdr.call(address, info).zero?

      Fiddle::Pointer.new(info[0, Fiddle::SIZEOF_VOIDP].unpack1("J")).to_s
    end

    private

    # Requests are answered by a pool of threads made at the start: no
    # thread (and no stack mapping) is made while the churn runs.
    def serve
      requests = Queue.new
      HANDLERS.times do
        Thread.new do
          Thread.current.name = REQUEST_THREAD
          while (request = requests.pop)
            answer(*request)
          end
        end
      end
      while (line = $stdin.gets)
        received = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        id, command, *args = line.split
        requests << [id, command, args, received]
      end
    end

    def answer(id, command, args, received)
      reply = "#{id} ok #{JSON.generate(run(command, args, received))}"
    rescue StandardError, ScriptError => e
      reply = "#{id} error #{e.class}: #{e.message}".tr("\n", " ")
    ensure
      @out.synchronize { $stdout.puts(reply) }
    end

    COMMANDS = {
      "await" => lambda do |received, want, timeout, names|
        await(want == "wrapped", Float(timeout), names.split(",").map(&:to_sym), received)
      end,
      "sync" => ->(timeout) { workers.sync(Float(timeout)) or raise "the workers made no progress in #{timeout}s" },
      "stats" => -> { workers.stats },
      "wrapped" => -> { wrapped },
      "scans" => -> { StaticTracing::Native.attach_poller.last },
      "footprint" => -> { footprint },
      "fork_start" => ->(interval) { (@forker = Forker.new(Float(interval))) && true },
      "fork_stop" => ->(timeout) { @forker.stop(Float(timeout)) },
      "grow" => ->(count, every, first) { grow(Integer(count), Integer(every), Integer(first)) },
      "reload_provider" => -> { reload_provider.name },
      "declare_and_load" => ->(count) { declare_and_load(Integer(count)) }
    }.freeze

    # Runs +command+; "await" is also given when its request was read.
    def run(command, args, received)
      action = COMMANDS.fetch(command) { raise ArgumentError, "unknown command #{command.inspect}" }
      command == "await" ? instance_exec(received, *args, &action) : instance_exec(*args, &action)
    end

    # Waits until every method of +names+ is wrapped (or, +want+ false,
    # none is); answers how long that took since the request was read
    # (+received+), or raises after +timeout+.
    def await(want, timeout, names, received)
      done = Wait.until(timeout) do
        now = wrapped
        names.all? { |name| now.include?(name) == want }
      end
      raise "#{names.join(",")} not #{want ? "wrapped" : "unwrapped"} after #{timeout}s (wrapped: #{wrapped})" unless
        done

      Process.clock_gettime(Process::CLOCK_MONOTONIC) - received
    end

    # What the process holds, after a full GC, read while the workers wait
    # between two calls (Workers#paused) and with the gem's lock held (so
    # that no state file is being written, with its descriptor open):
    # resident memory and the allocator's bytes in use (kB), descriptors
    # (less the one reading them), mappings (all, of files in the stub
    # directory, of other files), threads (less the ones answering
    # requests) and Ruby's live objects. With the workers running, a thread
    # switch after the collection let them allocate, and even start the
    # next collection, whose garbage counts as live until it is swept
    # (lazily): one measure of 28,808 live objects read 32,911 that way.
    def footprint
      workers.paused(PAUSE_TIMEOUT) do
        GC.start
        live_slots = GC.stat(:heap_live_slots)
        heap_kb = Heap.in_use / 1024
        StaticTracing::STATE_LOCK.synchronize do
          maps = File.readlines("/proc/self/maps")
          stub_dir = "#{ENV.fetch("STATIC_TRACING_DIR")}/"
          { "rss_kb" => File.read("/proc/self/status")[/^VmRSS:\s+(\d+)/, 1].to_i, "heap_kb" => heap_kb,
            "fds" => Dir.children("/proc/self/fd").size - 1,
            "maps" => maps.size, "stub_maps" => maps.count { |line| line.include?(" #{stub_dir}") },
            "file_maps" => maps.count { |line| line.match?(%r{ /}) && !line.include?(" #{stub_dir}") },
            "threads" => Dir.children("/proc/self/task").count { |tid| !request_thread?(tid) },
            "live_slots" => live_slots }
        end
      end
    end

    def request_thread?(tid)
      File.read("/proc/self/task/#{tid}/comm").chomp == REQUEST_THREAD
    rescue SystemCallError
      true # gone since it was listed: it was answering a request
    end

    # Grows provider +name+ (made on first use) by +count+ probes, each
    # declared and loaded, one reload each; every +every+ reloads, and after
    # the last, the loader names the stub of the newest probe by its file
    # (dladdr). Answers the path and the reloads whose name was wrong.
    def grow(count, every, first)
      provider = reload_provider
      provider.add_tracepoint(:base, Integer) if provider.tracepoints.empty?
      provider.load
      path = provider.path
      wrong = []
      checked = 0
      count.times do |index|
        point = provider.add_tracepoint(:"grown_#{first + index}", Integer)
        provider.load
        next unless ((index + 1) % every).zero? || index == count - 1

        checked += 1
        seen = loader_name(stub_address(point))
        wrong << "reload #{first + index}: #{seen.inspect}, #{provider.path}" unless
          seen == path && provider.path == path
      end
      { "path" => path, "checked" => checked, "wrong" => wrong.first(10), "wrong_count" => wrong.size }
    end

    # The provider #grow grows: named after this process, so that a probe
    # event perf makes for it (the whole system's) is this process's own.
    def reload_provider
      StaticTracing::Provider.register(:"churn_reload_#{Process.pid}")
    end

    # The provider #grow makes, with +count+ probes declared and then
    # loaded at once: what growing it costs, without the reloads.
    def declare_and_load(count)
      provider = reload_provider
      provider.add_tracepoint(:base, Integer)
      count.times { |index| provider.add_tracepoint(:"grown_#{index}", Integer) }
      provider.load.path
    end

    # Where +point+'s stub is in this process, read as `static-tracing list`
    # reads another process: its mapping and its ELF note.
    def stub_address(point)
      target = StaticTracing::CLI::Target.new(Process.pid)
      stub = target.stubs.find { |candidate| candidate.provider == point.provider.name.to_s }
      probe = stub.probes.find { |candidate| candidate.name == point.name.to_s }
      stub.bias + probe.pc
    end
  end
end

ChurnTarget.start
