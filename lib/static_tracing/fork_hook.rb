# frozen_string_literal: true

module StaticTracing
  # Process._fork is the one hook every fork goes through (Kernel#fork,
  # Process.fork, IO.popen("-")); Process.daemon forks without it. Either way
  # the new process needs its own signal and attach watchers (the parent's
  # threads did not survive the fork), stubs of its own where a tracer was
  # attached to its parent's (Provider.renew_after_fork), nothing armed for
  # the parent's tracers (Watcher), its own control channel and
  # `<pid>-<pidns>.state`, in that order (the state names the signal the
  # process listens to, and the channel), then its own recording, if any.
  module ForkHook
    # A fork waits for a toggle in progress to finish (STATE_LOCK): a child
    # copies the whole process as it is, and must start with tracing fully
    # on or fully off, never half-way. Probes declared and not loaded yet
    # are loaded first, so that the children of a preloading server share
    # their parent's stubs rather than each writing its own.
    def _fork
      pid = StaticTracing::STATE_LOCK.synchronize do
        StaticTracing::Watcher.run_jobs_now
        super
      end
      ForkHook.start_new_process if pid.zero?
      pid
    end

    def daemon(...)
      result = StaticTracing::STATE_LOCK.synchronize do
        StaticTracing::Watcher.run_jobs_now
        super
      end
      ForkHook.start_new_process
      result
    end

    # Each step warns rather than raises when it fails: an error here would
    # come out of the application's fork, in the child.
    def self.start_new_process
      SignalToggle.restart_after_fork
      Provider.renew_after_fork
      Watcher.restart_after_fork
      Control.restart_after_fork
      State.publish
      # Last: a recording of its own goes next to the state just published.
      Recorder.restart_after_fork
    end
  end
  Process.singleton_class.prepend(ForkHook)
end
