# frozen_string_literal: true

require "open3"
require "tmpdir"

module Churn
  # A scenario starts its own target (spec/support/churn/target.rb) under
  # +root+, with a stub directory of its own, and tells +report+ what it
  # measured; it raises Failure when it cannot go on. The processes it
  # starts go to +processes+, which the caller kills.
  class Scenario
    # The probes of the target's ChurnShop (one per method).
    PROVIDER = :churn_shop

    def initialize(report, processes:, root:, attach_delay:, workers: 4)
      @report = report
      @processes = processes
      @root = root
      @attach_delay = attach_delay
      @workers = workers
      @latencies = Hash.new { |hash, key| hash[key] = [] }
      @lock = Mutex.new
    end

    private

    attr_reader :target

    def name
      self.class::NAME
    end

    def start_target(label)
      @stub_path = nil
      @target = @processes.track(Target.new(stub_dir: File.join(@root, label, "stubs"),
                                            attach_delay: @attach_delay, workers: @workers))
    end

    # A probe of the target's provider named by its stub's path, not
    # `usdt:*`: to resolve a wildcard, bpftrace 0.27 reads every object the
    # process maps (0.85 s of CPU an attach, against 0.33 s by path), and
    # hundreds of attaches made that most of the churn's time. How bpftrace
    # finds a probe is the tracing specs' subject (spec/e2e); the churn's is
    # the attaching and leaving, which is the same either way.
    def usdt(probe)
      "usdt:#{stub_path}:#{PROVIDER}:#{probe}"
    end

    # The target loads its provider as it boots and never moves it.
    def stub_path
      @stub_path ||= begin
        stubs = Dir.children(target.stub_dir).grep(StubNames.stub_file_pattern(PROVIDER, target.pid))
        raise Failure, "#{name}: not one stub of #{PROVIDER} in #{target.stub_dir}: #{stubs.inspect}" unless
          stubs.size == 1

        File.join(target.stub_dir, stubs.first)
      end
    end

    # bpftrace attached to the target with +program+, once it runs.
    def attach(program)
      @processes.track(E2E::Bpftrace.new(target.pid, program))
    end

    # Stops +tracer+ and returns its output.
    def detach(tracer)
      tracer.finish
    ensure
      @processes.forget(tracer)
    end

    # Waits until every method of +probes+ is wrapped (or none is), within
    # LATE_LIMIT; records under +kind+ how long it took since +since+, or
    # (+since+ nil) since the target read the request.
    def await(wanted, probes, since, kind)
      took = target.request("await", wanted ? "wrapped" : "unwrapped", Bounds::LATE_LIMIT, probes.join(","),
                            timeout: Bounds::LATE_LIMIT + REQUEST_TIMEOUT)
      @lock.synchronize { @latencies[kind] << (since ? Churn.monotonic - since : took) }
    rescue Failure => e
      raise Failure, "#{name}: #{e.message}"
    end

    # Returns once every worker went through its methods again: a tracer
    # attached now has seen each worker's calls.
    def sync
      target.request("sync", REQUEST_TIMEOUT)
    end

    # A tracer's counts, by pid: `@c[PID]: N` lines.
    def counts(output)
      output.scan(/^@c\[(\d+)\]: (\d+)$/).to_h { |pid, count| [Integer(pid), Integer(count)] }
    end

    # The tracer counted the target's calls only, at least one a worker.
    def check_counts(output, what)
      seen = counts(output)
      return if seen.keys == [target.pid] && seen[target.pid] >= @workers

      @report.failed(name, "#{what}: counted #{seen.inspect}, not #{@workers}+ calls of process #{target.pid}")
    end

    # The wrapped state's transitions of +kind+: how many, their median,
    # 99th percentile and slowest, the slowest against Bounds::LATE_LIMIT,
    # and how many came after attach_delay.
    def report_latencies(kind, label)
      values = @latencies[kind].sort
      return if values.empty?

      late = values.count { |value| value > @attach_delay }
      @report.fact(name, "#{label}: transitions", values.size)
      @report.fact(name, "#{label}: median", ms(quantile(values, 0.5)))
      @report.fact(name, "#{label}: 99th percentile", ms(quantile(values, 0.99)))
      @report.fact(name, "#{label}: slowest", ms(values.last), bound: "#{Bounds::LATE_LIMIT} s",
                                                               within: values.last <= Bounds::LATE_LIMIT)
      @report.fact(name, "#{label}: after #{ms(@attach_delay)}", "#{late} (#{percent(late, values.size)})")
    end

    def quantile(sorted, share)
      sorted[((sorted.size - 1) * share).round]
    end

    def ms(seconds)
      format("%.1f ms", seconds * 1000)
    end

    def percent(part, whole)
      format("%.1f%%", part * 100.0 / whole)
    end

    # The workers' calls: all made, none wrong, every worker alive.
    def report_calls
      stats = target.request("stats")
      @report.fact(name, "calls checked", stats["calls"])
      @report.fact(name, "wrong results", stats["wrong"], bound: 0, within: stats["wrong"].zero?)
      stats["samples"].each { |sample| @report.failed(name, "wrong result: #{sample}") }
      @report.fact(name, "workers alive", stats["alive"], bound: @workers, within: stats["alive"] == @workers)
    end

    def rate(cycles, seconds)
      format("%.1f", cycles / seconds)
    end
  end

  # Tracers attach to one probe and leave, thousands of times, against four
  # threads calling every traced method: the semaphores of `add` and `scale`
  # written through /proc/PID/mem as the kernel writes them (fast: the
  # soak's 10,000 cycles), and, at the same time, real bpftrace on `pair`,
  # `join`, `pick` and `echo`, one tracer of its own on each (the kernel's
  # path: uprobes registered and dropped). After each attach the method is
  # wrapped within attach_delay, after each detach unwrapped; the tracer
  # counted the calls made in between.
  class AttachChurn < Scenario
    NAME = "attach/detach"
    SEMAPHORE_PROBES = %i[add scale].freeze
    BPFTRACE_PROBES = %i[pair join pick echo].freeze

    def run(semaphore_cycles:, bpftrace_cycles:)
      start_target("attach")
      semaphores = Semaphores.new(target.pid, PROVIDER, SEMAPHORE_PROBES)
      # Warm-up: each wrapper compiled once, Ruby's heap and the process's
      # arenas grown to what the churn needs.
      [semaphore_cycles / 20, 20].max.times { semaphore_cycle(semaphores, :warm_up) }
      BPFTRACE_PROBES.each { |probe| bpftrace_cycle(probe, :warm_up) }
      start = target.footprint
      middle, *seconds = churn(semaphores, semaphore_cycles, bpftrace_cycles)
      finish = target.footprint
      report(start, middle, finish, [semaphore_cycles, bpftrace_cycles], seconds)
    ensure
      semaphores&.close
    end

    private

    # Both churns at once; the middle footprint is taken half way through
    # the semaphore cycles. Returns it and the seconds each churn took.
    def churn(semaphores, semaphore_cycles, bpftrace_cycles)
      started = Churn.monotonic
      threads = bpftrace_churners(bpftrace_cycles)
      middle = nil
      semaphore_cycles.times do |index|
        middle = target.footprint if index == semaphore_cycles / 2
        semaphore_cycle(semaphores, :semaphore)
      end
      semaphore_seconds = Churn.monotonic - started
      threads.each(&:join)
      [middle, semaphore_seconds, Churn.monotonic - started]
    ensure
      threads&.each { |thread| thread.kill.join(5) if thread.alive? }
    end

    # A thread per probe of BPFTRACE_PROBES, sharing +cycles+ between them.
    def bpftrace_churners(cycles)
      BPFTRACE_PROBES.each_with_index.map do |probe, index|
        share = (cycles + index) / BPFTRACE_PROBES.size
        thread = Thread.new { share.times { bpftrace_cycle(probe, :bpftrace) } }
        thread.report_on_exception = false
        thread
      end
    end

    # The semaphores raised, then lowered: the request is sent right after
    # each write, and the target times the transition from when it read it.
    def semaphore_cycle(semaphores, kind)
      semaphores.set(1)
      await(true, SEMAPHORE_PROBES, nil, kind)
      semaphores.set(0)
      await(false, SEMAPHORE_PROBES, nil, kind)
    end

    def bpftrace_cycle(probe, kind)
      tracer = attach("#{usdt(probe)} { @c[pid] = count(); }")
      await(true, [probe], Churn.monotonic, kind)
      sync
      output = detach(tracer)
      await(false, [probe], Churn.monotonic, kind)
      check_counts(output, "bpftrace on #{probe}") unless kind == :warm_up
    end

    def report(start, middle, finish, (semaphore_cycles, bpftrace_cycles), (semaphore_seconds, bpftrace_seconds))
      @report.fact(name, "semaphore cycles (add, scale)", semaphore_cycles)
      @report.fact(name, "semaphore cycles / s", rate(semaphore_cycles, semaphore_seconds))
      @report.fact(name, "bpftrace cycles (4 tracers at once, beside)", bpftrace_cycles)
      @report.fact(name, "bpftrace cycles / s", rate(bpftrace_cycles, bpftrace_seconds))
      @report.fact(name, "seconds", format("%.1f", bpftrace_seconds))
      report_latencies(:semaphore, "semaphore: wrapped, unwrapped")
      report_latencies(:bpftrace, "bpftrace: wrapped, unwrapped")
      report_calls
      @report.footprints(name, start, middle, finish)
    end
  end

  # Two tracers on one probe: the method stays wrapped until both have
  # left, whichever leaves first, and the one still attached counts the
  # calls made after the other left. The semaphore is 1 from the first
  # attach until the last detach (the kernel counts a probe's uprobe once,
  # whatever the number of tracers sharing it), then 0.
  class TwoTracers < Scenario
    NAME = "two tracers"
    PROBE = :shared

    def run(cycles:)
      start_target("two")
      semaphore = Semaphores.new(target.pid, PROVIDER, [PROBE])
      started = Churn.monotonic
      cycles.times { |index| cycle(semaphore, index.even?) }
      @report.fact(name, "cycles (first leaves, then second; and the other way)", cycles)
      @report.fact(name, "seconds", format("%.1f", Churn.monotonic - started))
      report_latencies(:two, "wrapped, unwrapped")
      report_calls
    ensure
      semaphore&.close
    end

    private

    def cycle(semaphore, first_leaves_first)
      first = attach(program)
      await(true, [PROBE], Churn.monotonic, :two)
      expect_semaphore(semaphore, 1)
      second = attach(program)
      expect_semaphore(semaphore, 1)
      leaving, staying = first_leaves_first ? [first, second] : [second, first]
      detach(leaving)
      expect_semaphore(semaphore, 1)
      still_wrapped
      sync
      check_counts(detach(staying), "the tracer that stayed")
      await(false, [PROBE], Churn.monotonic, :two)
      expect_semaphore(semaphore, 0)
    end

    def program
      "#{usdt(PROBE)} { @c[pid] = count(); }"
    end

    def expect_semaphore(semaphore, value)
      return if semaphore.values == [value]

      @report.failed(name, "the semaphore of #{PROBE} is #{semaphore.values.first}, not #{value}")
    end

    # Two scans of the poller after the first tracer left, the method is
    # still wrapped.
    def still_wrapped
      scans = target.request("scans")
      Churn.wait_until("two more scans", timeout: 10) { target.request("scans") >= scans + 2 }
      wrapped = target.request("wrapped")
      @report.failed(name, "#{PROBE} unwrapped while a tracer stayed: #{wrapped}") unless wrapped.include?(PROBE.to_s)
    end
  end

  # A loaded provider grown a thousand times (a probe declared, then
  # load: the stub rewritten in place and loaded again): after each reload
  # (every +every+), dladdr on the new probe's stub names the stub's file;
  # in the middle and at the end, gdb lists it by that path; at the end
  # perf records it by that path with its build-id. The process then holds
  # no descriptor, thread, file or mapping more than at the start, but for
  # the stub's own mappings, which are as many as those of a provider of
  # the same probes loaded once (in a second process: the reference), and
  # no more memory than that process, within the bounds.
  class ReloadChurn < Scenario
    NAME = "reload"
    GDB_TIMEOUT = 60
    # Probes the provider has before the reloads measured.
    WARM_UP = 10

    def run(reloads:, every:)
      start_target("reload")
      warm_up = grow(WARM_UP, 1, 0)
      path = warm_up["path"]
      start = target.footprint
      started = Churn.monotonic
      first = grow(reloads / 2, every, WARM_UP)
      gdb_names(path, "middle")
      middle = target.footprint
      second = grow(reloads - (reloads / 2), every, WARM_UP + (reloads / 2))
      seconds = Churn.monotonic - started
      gdb_names(path, "end")
      perf_names(path, "grown_#{WARM_UP + reloads - 1}")
      report(path, [warm_up, first, second], reloads, every, seconds)
      footprints(start, middle, target.footprint, reference(WARM_UP + reloads))
    end

    private

    # What a process holds with the same provider, loaded once.
    def reference(probes)
      grown = @target
      start_target("reference")
      target.request("declare_and_load", probes)
      target.footprint
    ensure
      @processes.forget(target)
      target.kill
      @target = grown
    end

    def footprints(start, middle, finish, reference)
      same = ->(footprint) { footprint.slice("fds", "threads", "files", "file_maps", "anonymous_maps") }
      @report.footprints(name, same[start], same[middle], same[finish])
      against_reference(->(key) { [start, middle, finish].map { |footprint| footprint[key] } }, reference)
    end

    # What the process holds against the reference: as many stub
    # mappings, no more heap or live objects than the bounds allow.
    def against_reference(figures, reference)
      once = ->(key) { "#{key.tr("_", " ")} (loaded once: #{reference[key]})" }
      stub_maps, heap, rss, slots = %w[stub_maps heap_kb rss_kb live_slots].map { |key| figures[key] }
      @report.measure(name, once["stub_maps"], stub_maps, bound: "as loaded once",
                                                          within: stub_maps.last == reference["stub_maps"])
      @report.measure(name, once["heap_kb"], heap, bound: "once +#{Bounds::RELOAD_HEAP_KB} kB",
                                                   within: heap.last - reference["heap_kb"] <= Bounds::RELOAD_HEAP_KB)
      # Not bounded: the resident size counts what the allocator holds free
      # after building and dropping a thousand images of growing size
      # (220 kB the last): 1 to 3 MB more than loaded once.
      @report.measure(name, once["rss_kb"], rss, bound: "", within: true)
      most = reference["live_slots"] * (1 + Bounds::LIVE_SLOTS_SHARE)
      @report.measure(name, once["live_slots"], slots, bound: "once +#{(Bounds::LIVE_SLOTS_SHARE * 100).round}%",
                                                       within: slots.last <= most)
    end

    def grow(count, every, first)
      target.request("grow", count, every, first, timeout: 600)
    end

    def report(path, grown, reloads, every, seconds)
      moved = grown.map { |part| part["path"] }.uniq - [path]
      wrong = grown.sum { |part| part["wrong_count"] }
      grown.flat_map { |part| part["wrong"] }.each { |sample| @report.failed(name, "dladdr: #{sample}") }
      @report.fact(name, "reloads (in place)", reloads, bound: "same file", within: moved.empty?)
      @report.fact(name, "reloads / s", rate(reloads, seconds))
      @report.fact(name, "dladdr checks (every #{every}, and the last)", grown.sum { |part| part["checked"] })
      @report.fact(name, "dladdr naming another file", wrong, bound: 0, within: wrong.zero?)
      report_calls
    end

    # gdb attaches, lists the stub by its path, and leaves the process running.
    def gdb_names(path, moment)
      output, status = Open3.capture2e("timeout", "--signal=KILL", GDB_TIMEOUT.to_s, "gdb", "--nx", "--batch",
                                       "-p", target.pid.to_s, "-ex", "info sharedlibrary")
      named = status.success? && output.lines.any? { |line| line.rstrip.end_with?(" #{path}") }
      @report.fact(name, "gdb lists the stub by its path (#{moment})", named ? "yes" : "no",
                   bound: "yes", within: named)
      @report.failed(name, "gdb said:\n#{output}") unless named
      sync
    end

    # perf names the stub by its path: among the process's mappings it
    # records, and as the file whose note for the newest probe `perf probe`
    # reads (with a build-id cache of its own: perf's shared one remembers
    # stubs of processes long gone). The provider's name has the process's
    # pid: probe events are the whole system's.
    def perf_names(path, newest)
      Dir.mktmpdir("churn-perf") do |dir|
        perf = ->(*args) { Open3.capture2e("perf", "--buildid-dir", File.join(dir, "cache"), *args) }
        data = File.join(dir, "perf.data")
        recorded, status = perf.call("record", "-q", "-N", "-o", data, "-p", target.pid.to_s, "--", "sleep", "0.2")
        raise Failure, "#{name}: perf record failed: #{recorded}" unless status.success?

        mmaps, = perf.call("script", "-i", data, "--show-mmap-events")
        mapped = mmaps.lines.any? { |line| line.include?("PERF_RECORD_MMAP") && line.rstrip.end_with?(" r-xp #{path}") }
        perf_fact("perf records the stub's mapping by its path", mmaps, mapped)
        event = "sdt_#{target.request("reload_provider")}:#{newest}"
        perf.call("buildid-cache", "--add", path)
        added, = perf.call("probe", "-x", path, "-a", event)
        listed, = perf.call("probe", "-l", event)
        perf_fact("perf probe finds the newest probe in the stub by its path", "#{added}#{listed}",
                  listed.include?("in #{path}"))
      ensure
        perf&.call("probe", "-d", event) if event
      end
    end

    def perf_fact(what, output, named)
      @report.fact(name, what, named ? "yes" : "no", bound: "yes", within: named)
      @report.failed(name, "perf said:\n#{output.lines.last(20).join}") unless named
    end
  end

  # Attach mode in a process that forks a child every 10 ms (each child
  # checks that it starts with nothing wrapped, no probe enabled and fire
  # false, calls every traced method, and exits, by exit and exit! in turn),
  # while bpftrace attaches to the parent and leaves again and again: the
  # parent is wrapped and unwrapped as for any tracer; the tracer counts
  # the parent's calls only; no child is left, zombie or not; the parent
  # holds nothing more, and the stub directory has its files only.
  class ForkChurn < Scenario
    NAME = "fork every 10 ms"
    PROBES = %i[add shared].freeze
    INTERVAL = 0.01
    # A child that ends with exit! leaves its state file and control
    # channel, and its stub if it was forked while a tracer was attached
    # (it loads one of its own then), until the next process to use the
    # directory sweeps them, as the next child does: one child's at most.
    CHILD_FILES = 3

    def run(tracer_cycles:)
      start_target("fork")
      @forks = Hash.new(0)
      @forking_seconds = 0.0
      forking { tracer_cycle(:warm_up) }
      start = target.footprint
      started = Churn.monotonic
      forking { (tracer_cycles / 2).times { tracer_cycle(:fork) } }
      middle = target.footprint
      forking { (tracer_cycles - (tracer_cycles / 2)).times { tracer_cycle(:fork) } }
      seconds = Churn.monotonic - started
      report(tracer_cycles, seconds)
      @report.footprints(name, start, middle, target.footprint)
    end

    private

    # Forks children while the block runs; then no child of the target is left.
    def forking
      target.request("fork_start", INTERVAL)
      started = Churn.monotonic
      yield
    ensure
      @forking_seconds += Churn.monotonic - started if started
      stats = target.request("fork_stop", REQUEST_TIMEOUT)
      %w[forks bad].each { |key| @forks[key] += stats[key] }
      stats["exits"].each { |how, count| @forks["exit #{how}"] += count }
      stats["samples"].each { |sample| @report.failed(name, sample) }
      left = children
      @report.failed(name, "children left: #{left.inspect}") unless left.empty?
    end

    def tracer_cycle(kind)
      probes = PROBES.map { |probe| usdt(probe) }.join(",")
      tracer = attach("#{probes} { @c[pid] = count(); }")
      await(true, PROBES, Churn.monotonic, kind)
      sync
      output = detach(tracer)
      await(false, PROBES, Churn.monotonic, kind)
      check_counts(output, "bpftrace on the parent") unless kind == :warm_up
    end

    # The target's children: processes whose parent it is, zombies included.
    def children
      Dir.children("/proc").grep(/\A\d+\z/).select do |pid|
        File.read("/proc/#{pid}/stat")[/\) \S+ (\d+)/, 1].to_i == target.pid
      rescue SystemCallError
        false
      end
    end

    def report(cycles, seconds)
      @report.fact(name, "tracer cycles", cycles)
      @report.fact(name, "seconds", format("%.1f", seconds))
      report_children
      report_latencies(:fork, "wrapped, unwrapped")
      report_calls
    end

    def report_children
      forks, bad, failed = @forks.values_at("forks", "bad", "exit failed")
      @report.fact(name, "children forked", forks)
      @report.fact(name, "ms between forks", format("%.1f", @forking_seconds * 1000 / forks))
      @report.fact(name, "children that saw something attached or armed", bad, bound: 0, within: bad.zero?)
      @report.fact(name, "children that exited with an error", failed, bound: 0, within: failed.zero?)
      others = Dir.children(target.stub_dir) - target.own_files
      @report.fact(name, "children's files left in the stub directory", others.size,
                   bound: CHILD_FILES, within: others.size <= CHILD_FILES)
      @report.failed(name, "stub directory: #{others.sort.first(8)}") unless others.size <= CHILD_FILES
    end
  end
end
