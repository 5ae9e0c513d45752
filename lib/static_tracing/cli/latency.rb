# frozen_string_literal: true

require "json"
require "open3"
require_relative "histogram"

module StaticTracing
  module CLI
    # `static-tracing latency PID`: runs bpftrace on a process's latency
    # probes for a while and prints a histogram per probe.
    class Latency < Command
      include Histogram

      command "latency",
              arguments: "PID [--provider P] [--seconds N]",
              summary: "Trace a process's latency probes with bpftrace and print a histogram per probe",
              description: <<~TEXT.chomp
                Runs bpftrace on process PID for N seconds and prints one latency histogram per
                latency probe, then exits; Ctrl-C stops early and prints what was collected.
                Latency probes are those whose first argument is an Integer: nanoseconds, as
                LatencyTracer and StaticTracing.latency fire them. Needs bpftrace (from PATH, or
                $BPFTRACE) and root.
              TEXT

      DEFAULT_SECONDS = 10
      # bpftrace's interval probe counts whole milliseconds, from 1.
      MIN_SECONDS = 0.001
      MAX_SECONDS = 24 * 60 * 60
      DECIMAL = /\A[+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?\z/i
      # bpftrace compiles its program and attaches every probe before it starts
      # counting; with many probes that alone can take a while.
      STARTUP_TIMEOUT = 60
      READY = "static_tracing: attached"

      private

      def define_options(parser)
        @seconds = DEFAULT_SECONDS
        @providers = []
        parser.on("--provider P", "Only the probes of provider P (repeat for more)") { |name| @providers << name }
        parser.on("--seconds N", "How long to trace, from #{MIN_SECONDS} to #{MAX_SECONDS} " \
                                 "(default #{DEFAULT_SECONDS})") { |value| @seconds = seconds(value) }
      end

      def seconds(text)
        value = Float(text) if DECIMAL.match?(text)
        return value if value&.between?(MIN_SECONDS, MAX_SECONDS)

        raise UsageError, "--seconds must be a number of seconds from #{MIN_SECONDS} to #{MAX_SECONDS} " \
                          "(24 hours), got #{text.inspect}"
      end

      def execute(args)
        pid = pid_argument(args)
        bpftrace = find_bpftrace
        probes = latency_probes(loaded_target(pid))
        run = BpftraceRun.new(bpftrace, pid, program(probes), timeout: STARTUP_TIMEOUT + @seconds)
        run.on_ready do
          err.puts("Tracing #{count(probes.size, "latency probe")} in process #{pid} for " \
                   "#{format_number(@seconds)}s (Ctrl-C to stop early)...")
        end
        print_report(pid, probes, run.call)
        0
      end

      def find_bpftrace
        from_env = env["BPFTRACE"]
        if from_env && !from_env.empty?
          return from_env if executable_file?(from_env)

          raise Error, "BPFTRACE=#{from_env} is not an executable file: point it at bpftrace, " \
                       "or unset it to search PATH"
        end
        in_path = env.fetch("PATH", "").split(File::PATH_SEPARATOR).map { |dir| File.join(dir, "bpftrace") }
        in_path.find { |file| executable_file?(file) } or
          raise Error, "bpftrace is not installed (not found in PATH): install it (e.g. apt-get install bpftrace), " \
                       "or set BPFTRACE=/path/to/bpftrace"
      end

      def executable_file?(path)
        File.file?(path) && File.executable?(path)
      end

      # [provider, probe] pairs, once each even if a provider is mapped twice.
      def latency_probes(target)
        probes = selected_probes(target)
        latency = probes.select { |probe| Arguments.integer_first?(probe.arg_spec) }
        return latency.map { |probe| [probe.provider, probe.name] }.uniq unless latency.empty?

        raise Error, "process #{target.pid} has no latency probes (probes whose first argument is an Integer): " \
                     "it has #{probes.map { |probe| signature(probe) }.join(", ")}"
      end

      def selected_probes(target)
        probes = target.stubs.flat_map(&:probes)
        return probes if @providers.empty?

        known = probes.map(&:provider).uniq
        missing = @providers - known
        unless missing.empty?
          raise Error, "process #{target.pid} has no provider #{missing.join(", ")} loaded " \
                       "(it has: #{known.join(", ")})"
        end

        probes.select { |probe| @providers.include?(probe.provider) }
      end

      def signature(probe)
        "#{probe.provider}:#{probe.name}(#{probe.args.join(", ")})"
      end

      # Microsecond buckets read better than nanosecond ones; the average and
      # maximum keep nanoseconds.
      def program(probes)
        actions = probes.map do |provider, name|
          key = %("#{provider}:#{name}")
          "usdt:*:#{provider}:#{name} { @us[#{key}] = hist(arg0 / 1000); @avg[#{key}] = avg(arg0); " \
            "@max[#{key}] = max(arg0); }"
        end
        [%(BEGIN { printf("#{READY}\\n"); }), *actions,
         "interval:ms:#{(@seconds * 1000).round} { exit(); }"].join("\n")
      end

      def print_report(pid, probes, maps)
        out.puts("Latency in process #{pid}, per probe (arg0 in ns, buckets in us/ms/s):")
        probes.each do |provider, name|
          key = "#{provider}:#{name}"
          buckets = maps.dig("@us", key) || []
          total = buckets.sum { |bucket| bucket["count"] }
          out.puts
          if total.zero?
            out.puts("#{key}  no calls")
            next
          end
          out.puts("#{key}  #{count(total, "call")}, avg #{duration(maps.dig("@avg", key))}, " \
                   "max #{duration(maps.dig("@max", key))}")
          print_histogram(buckets)
        end
      end
    end

    # bpftrace running a program against a process, with its JSON output
    # collected. Stopped by the program itself, by a signal forwarded from
    # this process, or by a timeout.
    class BpftraceRun
      def initialize(bpftrace, pid, program, timeout:)
        @command = [bpftrace, "-f", "json", "-p", pid.to_s, "-e", program]
        @timeout = timeout
        @ready = nil
        @maps = {}
      end

      def on_ready(&block)
        @ready = block
      end

      # The maps bpftrace printed, by name: `{"@us" => {key => value}}`.
      def call
        Open3.popen3(*@command, pgroup: true) do |stdin, stdout, stderr, thread|
          stdin.close
          errors = Thread.new { stderr.read }
          status = forwarding_signals(thread.pid) { read_events(stdout, thread) }
          check(status, errors.value)
        end
        @maps
      rescue Errno::ENOENT, Errno::EACCES => e
        raise Error, "cannot run #{@command.first}: #{e.message}"
      end

      private

      # bpftrace runs in its own process group, so that a Ctrl-C reaches it
      # once, from here; it then prints its maps and exits.
      def forwarding_signals(pid)
        previous = %w[INT TERM].to_h do |signal|
          [signal, trap(signal) { kill(signal, pid) }]
        end
        yield
      ensure
        previous&.each { |signal, handler| trap(signal, handler || "DEFAULT") }
      end

      def read_events(stdout, thread)
        watchdog = Thread.new do
          next if thread.join(@timeout)

          kill("INT", thread.pid)
          thread.join(5) or kill("KILL", thread.pid)
        end
        stdout.each_line { |line| event(line) }
        thread.value.tap { watchdog.kill }
      end

      def event(line)
        event = JSON.parse(line)
        case event["type"]
        when "printf" then @ready&.call if event["data"].to_s.include?(Latency::READY)
        when "map", "hist", "stats" then @maps.merge!(event["data"])
        end
      rescue JSON::ParserError
        nil
      end

      def check(status, errors)
        return if status.success?

        hint = ::Process.euid.zero? ? "" : "; bpftrace needs root: run static-tracing with sudo"
        exit = status.exitstatus ? "exit #{status.exitstatus}" : status.inspect
        raise Error, "bpftrace failed (#{exit}): #{failure_reason(errors) || "no error message"}#{hint}"
      end

      # bpftrace 0.17 complains about RLIMIT_MEMLOCK even when all goes well.
      def failure_reason(errors)
        lines = errors.lines.map(&:strip).reject { |line| line.empty? || line.include?("RLIMIT_MEMLOCK") }
        lines.find { |line| line.start_with?("ERROR") } || lines.last
      end

      def kill(signal, pid)
        ::Process.kill(signal, pid)
      rescue SystemCallError
        nil
      end
    end
  end
end
