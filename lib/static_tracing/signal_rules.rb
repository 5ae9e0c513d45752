# frozen_string_literal: true

module StaticTracing
  # Which signals may toggle tracing, and why every other one may not. The
  # gem (Configuration) and the `static-tracing` command (vetting a state
  # file) both ask this one list, so it is plain Ruby, which the command
  # loads without the gem's extension (see ARCHITECTURE.md).
  #
  # A toggle signal must be one nothing sends on its own: each arrival
  # flips tracing, so a signal the kernel or a terminal sends by itself would
  # flip it at random, and one that stops the process would no longer stop it.
  module SignalRules
    # Those no part of the system sends by itself, in number order.
    ALLOWED = %w[TRAP USR1 USR2].freeze

    # Uncatchable, or used by Ruby itself.
    RESERVED = %w[KILL STOP SEGV BUS ILL FPE VTALRM].freeze

    # What sends each of the other signals by itself, by canonical name.
    SENT_BY_SYSTEM = {
      "HUP" => "a terminal sends it when it hangs up, service managers to reload",
      "INT" => "a terminal sends it on Ctrl-C to stop the process",
      "QUIT" => "a terminal sends it on Ctrl-\\ to stop the process",
      "ABRT" => "abort() raises it when the process fails",
      "PIPE" => "the kernel sends it on each write to a closed pipe or socket",
      "ALRM" => "timers set with alarm or setitimer send it",
      "TERM" => "kill, systemd and docker stop send it to stop the process",
      "URG" => "the kernel sends it when a socket receives urgent data",
      "TSTP" => "a terminal sends it on Ctrl-Z",
      "CONT" => "the kernel sends it whenever a stopped process resumes",
      "CHLD" => "the kernel sends it whenever a child process exits or stops",
      "TTIN" => "a terminal sends it to a background process that reads from it",
      "TTOU" => "a terminal sends it to a background process that writes to it",
      "IO" => "the kernel sends it when a descriptor in async mode is ready",
      "XCPU" => "the kernel sends it when the process reaches its CPU time limit",
      "XFSZ" => "the kernel sends it when the process reaches its file size limit",
      "PROF" => "profiling timers send it",
      "WINCH" => "a terminal sends it whenever its window is resized",
      "SYS" => "the kernel sends it on a system call a seccomp filter forbids",
      "PWR" => "the system sends it on a power failure"
    }.freeze

    class << self
      # The canonical names of the signals that may toggle tracing.
      def names
        ALLOWED
      end

      def allowed?(name)
        ALLOWED.include?(name)
      end

      # Why the signal named +name+ (canonical, without SIG) may not toggle
      # tracing, or nil when it may.
      def refusal(name)
        return if allowed?(name)
        if RESERVED.include?(name)
          return "#{RESERVED.map { |reserved| "SIG#{reserved}" }.join(", ")} are uncatchable or used by Ruby"
        end

        reason = SENT_BY_SYSTEM.fetch(name, "the system may send it by itself")
        "#{reason}: each arrival would flip tracing"
      end

      # "SIGTRAP, SIGUSR1, SIGUSR2", for messages.
      def listed
        ALLOWED.map { |name| "SIG#{name}" }.join(", ")
      end
    end
  end
end
