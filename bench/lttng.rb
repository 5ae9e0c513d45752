# frozen_string_literal: true

module Bench
  # The recorder next to LTTng-UST, the user-space tracer of Linux, in the
  # same rounds: an LTTng-UST event of one 64-bit field fired from C, a
  # record of one Integer written into our ring from Rust (its clock read
  # included, as LTTng-UST reads its own), and a recorded fire(Integer)
  # from Ruby (a Ruby call included). Each on its first lap of fresh
  # buffers and once they have wrapped, with the process's resident memory
  # after each: a recording that never wraps (most do not) costs its first
  # lap's price. All three write into 64 MiB of flight buffers in memory
  # (LTTng-UST: a snapshot session, overwrite mode, 16 sub-buffers of
  # 4 MiB per CPU) and are timed by their thread's CPU time on one CPU.
  # For comparison, the recorded fire(Integer) again with its ring in a
  # directory on a disk (STATIC_TRACING_RING_DIR), where the first lap
  # faults on every page.
  #
  # LTTng-UST needs liblttng-ust-dev and lttng-tools (bin/setup installs
  # them) and a C compiler; the group starts its own session daemon and
  # stops it, and says why when it cannot (one that runs already is not
  # its own to stop).
  class Lttng < Group
    ROUNDS = 5
    MIB = 1 << 20
    # Bytes of slots of our rings, and of LTTng-UST's buffers per CPU.
    BUFFER = 64 * MIB
    SUB_BUFFER = 4 * MIB
    # One-Integer records a lap of our ring holds; a sample times three
    # quarters of one, all on the first lap of fresh buffers.
    SLOTS = BUFFER / 32
    TIMED = SLOTS / 4 * 3
    # Records between the two samples: enough to wrap either ring twice
    # (an LTTng-UST event of one field takes 16 bytes, a record 32).
    FILL = 2 * SLOTS * 2
    SOURCE_DIR = File.join(__dir__, "lttng")
    PROVIDER = :bench_lttng

    def run
      table = table(:lttng, "Side by side with LTTng-UST, one 64-bit value an event (median of #{rounds} rounds)",
                    params: { rounds:, buffer_mib: BUFFER / MIB, timed: TIMED, fill: FILL },
                    measurement: "measurement", lap: "lap", ns_per_event: ["ns/event", :d1],
                    spread_ns: ["min..max", :r1], ratio_lttng: ["/ LTTng-UST", :x],
                    ratio_spread: ["min..max", :r2], resident_mib: ["RSS MiB", :d1])
      lttng = LttngSession.new(work_file("lttng"))
      results = measure(lttng)
      rows(results, lttng.skipped).each { |row| table.row(row) }
      notes(table, lttng, results)
    ensure
      lttng&.stop
    end

    private

    # name => one result a round (the first, a warm-up, left out); the
    # LTTng-UST case is left out, with why, when it cannot run.
    def measure(lttng)
      rust = RustRing.new(work_file("lttng-rust.log"))
      ruby = RubyFire.new(PROVIDER)
      on_disk = disk_dir
      cases = { rust: -> { rust.run }, ruby: -> { ruby.run }, ruby_disk: -> { ruby.run(ring_dir: on_disk) } }
      cases = { lttng: -> { lttng.run } }.merge(cases) if lttng.start
      Bench.interleave(cases, rounds:)
    ensure
      ruby&.close
      FileUtils.rm_rf(on_disk) if on_disk
    end

    # A private directory on a disk, for the ring of the comparison rows.
    def disk_dir
      File.join(WORK_DIR, "rings-on-disk").tap do |dir|
        FileUtils.rm_rf(dir)
        Dir.mkdir(dir, 0o700)
      end
    end

    MEASURED = {
      lttng: "LTTng-UST event from C (lttng_ust_tracepoint, clock read inside)",
      rust: "our ring from Rust (record_integer + clock_gettime)",
      ruby: "recorded fire(Integer) from Ruby (net of an empty loop)",
      ruby_disk: "for comparison: the same, its ring on a disk (STATIC_TRACING_RING_DIR in tmp/bench)"
    }.freeze

    # A row a case and lap; LTTng-UST's say why they are missing, if they are.
    def rows(results, skipped)
      reference = results[:lttng]
      MEASURED.flat_map do |name, measurement|
        %i[first_lap wrapped].map do |lap|
          row = { id: "lttng.#{name}.#{lap}", measurement:, lap: lap == :first_lap ? "first" : "wrapped" }
          next row.merge(measurement: "#{measurement}: skipped: #{skipped}", skipped:) unless results[name]

          row.merge(timing(results[name], lap, reference))
        end
      end
    end

    # The columns of one case's lap: ns (median, spread), the per-round
    # ratios to LTTng-UST's same lap and to its own wrapped lap, and the
    # resident memory after it.
    def timing(results, lap, reference)
      ns = field(results, :"#{lap}_ns")
      to_wrapped = per_round(ns, field(results, :wrapped_ns))
      { ns_per_event: Bench.median(ns), spread_ns: ns.minmax, samples_ns: ns.map { _1.round(2) },
        ratio_to_wrapped: Bench.median(to_wrapped), ratio_to_wrapped_spread: to_wrapped.minmax,
        resident_mib: Bench.median(field(results, :"resident_#{lap}_kib")) / 1024.0 }
        .merge(to_lttng(ns, reference && field(reference, :"#{lap}_ns")))
    end

    def to_lttng(ours, lttng)
      return {} unless lttng

      ratios = per_round(ours, lttng)
      { ratio_lttng: Bench.median(ratios), ratio_spread: ratios.minmax }
    end

    def field(results, key) = results.map { |result| result.fetch(key) }
    def per_round(values, references) = values.zip(references).map { |value, reference| value / reference }

    def notes(table, lttng, results)
      table.note("ratios are medians of per-round ratios to LTTng-UST's event on the same lap; min..max: their " \
                 "spread over the rounds")
      table.note(first_lap_note(results))
      rings = results.values_at(:rust, :ruby).compact.map { |each| File.dirname(each.first.fetch(:ring)) }.uniq
      table.note("each writes into 64 MiB of flight buffers in memory: ours, one ring (a recording's, made as " \
                 "Recorder.start makes it, in #{rings.join(" and ")}, but for the comparison rows); LTTng-UST's, " \
                 "per CPU (#{BUFFER / SUB_BUFFER} sub-buffers of #{SUB_BUFFER / MIB} MiB, per-UID, snapshot session)")
      table.note("a sample: #{TIMED} events on fresh buffers (first lap), then #{FILL} more, then #{TIMED} again " \
                 "(wrapped); thread CPU time; RSS: the process's VmRSS after the lap (the Ruby's includes Ruby)")
      table.note(lttng.note)
    end

    def first_lap_note(results)
      laps = { ruby: "in memory", ruby_disk: "on a disk" }.filter_map do |name, where|
        ratios = per_round(field(results.fetch(name, []), :first_lap_ns), field(results.fetch(name, []), :wrapped_ns))
        next if ratios.empty?

        format("its ring %<where>s %<median>.2fx (rounds %<min>.2f..%<max>.2f)",
               where:, median: Bench.median(ratios), min: ratios.min, max: ratios.max)
      end
      "recorded fire(Integer), first lap / wrapped: #{laps.join("; ")}"
    end

    # LTTng-UST: a session daemon of the group's own, a snapshot session
    # (fresh buffers) a round, and the C program built against it.
    class LttngSession
      SESSION = "static_tracing_bench"
      CHANNEL = "bench"
      EVENT = "static_tracing_bench:value"

      attr_reader :skipped

      def initialize(dir)
        @dir = dir
        @home = File.join(dir, "home")
        @env = { "LTTNG_HOME" => @home, "LTTNG_UST_REGISTER_TIMEOUT" => "10000" }
      end

      # Builds the program and starts the session daemon; false, with
      # #skipped saying why, when either cannot be done.
      def start
        @skipped = unavailable_reason and return false
        FileUtils.mkdir_p(@home)
        @binary = build
        @daemon = start_daemon
        true
      rescue StandardError => e
        @skipped = "LTTng-UST could not be set up: #{e.message.lines.first.strip}"
        stop
        false
      end

      # One round: a fresh session, the program run in it once.
      def run
        lttng("create", SESSION, "--snapshot")
        lttng("enable-channel", "--userspace", "--session", SESSION, "--subbuf-size", SUB_BUFFER.to_s,
              "--num-subbuf", (BUFFER / SUB_BUFFER).to_s, CHANNEL)
        lttng("enable-event", "--userspace", "--session", SESSION, "--channel", CHANNEL, EVENT)
        lttng("start", SESSION)
        output = Bench.run_command(@binary, TIMED.to_s, FILL.to_s, log: File.join(@dir, "run.log"), env: @env,
                                                                   timeout: 120)
        JSON.parse(output.lines.last, symbolize_names: true).tap { @lost = discarded }
      ensure
        lttng("destroy", SESSION, check: false)
      end

      # Stops the daemon the group started, and waits for it to exit.
      def stop
        pid = @daemon or return

        @daemon = nil
        Process.kill("TERM", pid)
        Bench.wait_until("lttng-sessiond (pid #{pid}) exits", timeout: 30) { !File.exist?("/proc/#{pid}") }
      rescue Errno::ESRCH
        nil
      end

      def note
        return "LTTng-UST rows skipped: #{@skipped}" if @skipped

        "LTTng-UST #{version}: lttng-sessiond --no-kernel started and stopped by this group; " \
          "events discarded in the last round: #{@lost.inspect}"
      end

      private

      def unavailable_reason
        missing = %w[lttng lttng-sessiond gcc].reject { |command| Bench.which(command) }
        return "#{missing.join(", ")} not installed (bin/setup installs liblttng-ust-dev and lttng-tools)" if
          missing.any?
        return "liblttng-ust-dev is not installed (bin/setup installs it)" unless header

        running = running_daemon and return "a session daemon runs already (pid #{running}); the group starts " \
                                            "and stops its own: stop that one first"
        nil
      end

      def header = Dir["/usr/include{,/*}/lttng/tracepoint.h"].first

      # The daemon a user of this uid talks to: root's is the system's.
      def pid_file
        Process.euid.zero? ? "/var/run/lttng/lttng-sessiond.pid" : File.join(@home, ".lttng", "lttng-sessiond.pid")
      end

      def running_daemon
        pid = Integer(File.read(pid_file).strip, 10)
        pid if File.exist?("/proc/#{pid}") && File.read("/proc/#{pid}/comm").strip == "lttng-sessiond"
      rescue SystemCallError, ArgumentError
        nil
      end

      def build
        binary = File.join(@dir, "tracepoint_cost")
        Bench.run_command("gcc", "-O2", "-Wall", "-I", SOURCE_DIR, "-o", binary,
                          File.join(SOURCE_DIR, "tracepoint_cost.c"), "-llttng-ust", "-ldl",
                          log: File.join(@dir, "gcc.log"), timeout: 120)
        binary
      end

      def start_daemon
        Bench.run_command("lttng-sessiond", "--daemonize", "--no-kernel",
                          log: File.join(@dir, "sessiond.log"), env: @env, timeout: 60)
        Bench.wait_until("lttng-sessiond writes its pid", timeout: 30) { running_daemon }
      end

      def lttng(*args, check: true)
        out, status = Open3.capture2e(@env, "lttng", *args)
        raise "lttng #{args.join(" ")} failed: #{out.strip}" if check && !status.success?

        out
      end

      # Events the last session discarded (none: overwrite mode replaces the
      # oldest instead), as `lttng list` counts them.
      def discarded
        lttng("list", SESSION, "--channel", CHANNEL)[/Discarded events:\s*(\d+)/, 1]&.to_i || 0
      end

      def version = lttng("--version")[/\d+\.\d+\.\d+/]
    end

    # Our ring from Rust: ext/stapsdt/examples/ring_cost.rs, one run a round.
    class RustRing
      def initialize(log)
        @log = log
        Bench.run_command("cargo", "build", "--release", "--quiet", "-p", "stapsdt", "--example", "ring_cost",
                          log:, env: { "CARGO_TARGET_DIR" => File.join(ROOT, "target") }, timeout: 900)
        @binary = File.join(ROOT, "target", "release", "examples", "ring_cost")
      end

      def run
        output = Bench.run_command(@binary, BUFFER.to_s, log: @log, timeout: 120,
                                                         env: { "STATIC_TRACING_DIR" => File.join(WORK_DIR, "stubs") })
        JSON.parse(output.lines.last, symbolize_names: true)
      end
    end

    # A recorded fire(Integer) in this process: a fresh flight recording a
    # round, timed as RustRing times its ring.
    class RubyFire
      RING_DIR = "STATIC_TRACING_RING_DIR"

      def initialize(provider)
        @provider = StaticTracing::Provider.register(provider)
        @fire = Loop.call("fire(Integer)", @provider.add_tracepoint(:value, Integer), :fire, 42)
        @empty = Loop.new("empty loop")
        @provider.load
      end

      # +ring_dir+: where the ring goes (STATIC_TRACING_RING_DIR), if not
      # where a recording puts it by default.
      def run(ring_dir: nil)
        status = with_ring_dir(ring_dir) do
          StaticTracing::Recorder.start(probes: ["#{@provider.name}:*"], flight: true, size: "#{BUFFER / MIB}M")
        end
        first_lap = sample
        resident_first_lap = resident_kib
        @fire.time_ns(FILL / 2)
        wrapped = sample
        { first_lap_ns: first_lap, wrapped_ns: wrapped, resident_first_lap_kib: resident_first_lap,
          resident_wrapped_kib: resident_kib, ring: status["ring"] }
      ensure
        StaticTracing::Recorder.stop
      end

      def close = @provider.unregister

      def with_ring_dir(dir)
        saved = ENV.fetch(RING_DIR, nil)
        ENV[RING_DIR] = dir if dir
        yield
      ensure
        ENV[RING_DIR] = saved
      end

      private

      # ns a recorded fire(Integer) over TIMED calls, net of the empty loop.
      def sample = (@fire.time_ns(TIMED) - @empty.time_ns(TIMED)).fdiv(TIMED)

      def resident_kib = Integer(File.read("/proc/self/status")[/^VmRSS:\s*(\d+)/, 1])
    end
  end
end
