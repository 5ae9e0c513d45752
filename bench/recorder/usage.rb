# frozen_string_literal: true

module Bench
  class Recorder
    # One run of a Ruby script to its end: the CPU time (user and system)
    # and the peak resident set of its process, the wall time from its
    # spawn to its exit, and its output.
    Usage = Struct.new(:cpu_s, :wall_s, :peak_bytes, :output, keyword_init: true)

    class Usage
      # Loaded into the script (ruby -r), writes the peak when it exits.
      PEAK = File.join(__dir__, "peak.rb")
      TIMEOUT = 300

      # Runs `ruby SCRIPT ARGS` from the checkout, its output to +log+,
      # killed after +timeout+ s. Its CPU time is what the children's
      # counters gained while it ran: it is the only child reaped meanwhile.
      def self.of(*script, log:, timeout: TIMEOUT)
        peak_file = "#{log}.peak"
        FileUtils.rm_f(peak_file)
        before = Process.times
        start = Bench.now_ns
        pid = Process.spawn({ "BENCH_PEAK_FILE" => peak_file }, RbConfig.ruby, "-r", PEAK, *script,
                            in: File::NULL, out: [log, "w"], err: %i[child out], pgroup: true, chdir: ROOT)
        status = wait(pid, timeout, log)
        wall_ns = Bench.now_ns - start
        after = Process.times
        raise "#{script.join(" ")} failed (#{status.inspect}):\n#{tail(log)}" unless status.success?

        new(cpu_s: after.cutime + after.cstime - before.cutime - before.cstime, wall_s: wall_ns / 1e9,
            peak_bytes: peak(peak_file), output: File.read(log))
      end

      def self.wait(pid, timeout, log)
        watchdog = Thread.new { sleep(timeout).then { Process.kill("KILL", -pid) } }
        status = Process.wait2(pid).last
        raise "killed after #{timeout} s:\n#{tail(log)}" unless watchdog.alive?

        status
      ensure
        watchdog&.kill
      end

      def self.peak(path)
        Integer(File.read(path)) * 1024
      ensure
        FileUtils.rm_f(path)
      end

      def self.tail(log) = File.read(log).lines.last(20).join

      # Seconds by the clock the benchmark compares by (BENCH_CLOCK).
      def seconds = CLOCK == "wall" ? wall_s : cpu_s
    end
  end
end
