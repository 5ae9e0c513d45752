# frozen_string_literal: true

require "io/wait"

module StaticTracing
  # The one thread that does tracing's work in the background, started on
  # first use: it tells listeners when a tracer attaches to or leaves a
  # watched tracepoint (attach mode arms methods so), runs work put off for
  # a moment (loading a burst of declared probes once), takes the requests
  # of `static-tracing` (Control) and writes the recorder's snapshots when a
  # trigger fires (Recorder).
  #
  # For a listener, a tracepoint the recorder records counts as attached:
  # what a tracer would see, the recorder must see too.
  #
  # Noticing an attach is native (see ext/static_tracing/src/semaphore_poller.rs
  # for why it polls): a thread of its own reads the semaphores every
  # half Configuration.attach_delay, without the GVL, and writes to a pipe
  # only when one changed. This thread waits on the pipe, so Ruby code runs
  # only then. Calls made between the attach and the change being applied
  # are not seen.
  module Watcher
    # What the thread was doing when something failed, as a warning says it.
    WORK = { waiting: "to wait for work", requests: "to serve a static-tracing request",
             attach_changes: "to apply a tracer attaching or leaving", jobs: "to run background work",
             trigger: "to write a triggered snapshot" }.freeze
    # After a pass that failed the thread waits this long before the next.
    PAUSE_AFTER_FAILURE = 0.1

    @lock = StaticTracing::STATE_LOCK
    # Watch id => listeners of that tracepoint (weakly, as keys).
    @listeners = {}
    # Tracepoint => watch id.
    @ids = {}.compare_by_identity
    # Watch id => whether a tracer is attached, as last told.
    @attached = {}
    # Watch ids of the tracepoints the recorder records.
    @recorded = {}
    # The control channel (Control), read on this thread.
    @control = nil
    # Key => [deadline, job], run once each.
    @jobs = {}
    @thread = nil

    class << self
      # Tells +listener+ (#attach_changed(attached)) whenever a tracer
      # attaches to +tracepoint+ or the last one leaves, and at once if one
      # is attached already. The listener is held weakly.
      def watch(tracepoint, listener)
        @lock.synchronize do
          start
          id = (@ids[tracepoint] ||= Native.watch_attach(tracepoint))
          (@listeners[id] ||= ObjectSpace::WeakMap.new)[listener] = true
          @recorded[id] = true if Recorder.armed?(tracepoint)
          listener.attach_changed(true) if wanted?(id)
        end
      end

      # Stops telling +listener+ about +tracepoint+; unwatches the
      # tracepoint when nobody is listening to it any more.
      def unwatch(tracepoint, listener)
        @lock.synchronize do
          id = @ids[tracepoint] or return
          listeners = @listeners[id]
          # (WeakMap#delete is Ruby 3.3's: false marks a listener gone.)
          listeners[listener] = false if listeners&.key?(listener)
          forget(tracepoint) unless listeners&.values&.any?
        end
      end

      # Stops watching +tracepoint+ for every listener.
      def forget(tracepoint)
        @lock.synchronize do
          id = @ids.delete(tracepoint) or return
          Native.unwatch_attach(id)
          @listeners.delete(id)
          @attached.delete(id)
          @recorded.delete(id)
        end
      end

      # The recorder started or stopped recording +tracepoint+: its
      # listeners are told as if a tracer attached or left.
      def recording_changed(tracepoint, recorded)
        @lock.synchronize do
          id = @ids[tracepoint] or return
          was = wanted?(id)
          recorded ? @recorded[id] = true : @recorded.delete(id)
          tell(id) unless wanted?(id) == was
        end
      end

      # The write end of the pipe this thread waits on: a byte written to
      # it wakes the thread (the recorder's trigger does, natively).
      def wake_fd
        @lock.synchronize do
          start
          @pipe[1].fileno
        end
      end

      # Reads +io+ (the control channel) on this thread from now on, and
      # calls Control.receive when it is readable; nil stops.
      def control=(io)
        @lock.synchronize do
          @control = io
          start
          @pipe[1].write_nonblock(".", exception: false)
        end
      end

      def watching?(tracepoint)
        @lock.synchronize { @ids.key?(tracepoint) }
      end

      # Runs the block on this thread within +delay+ seconds, with
      # STATE_LOCK held. A job already waiting under +key+ is kept (with the
      # earlier deadline) and the block dropped: a burst asks once.
      def soon(key, delay, &job)
        @lock.synchronize do
          start
          deadline = now + delay
          waiting = @jobs[key]
          @jobs[key] = waiting ? [[waiting.first, deadline].min, waiting.last] : [deadline, job]
          @pipe[1].write_nonblock(".", exception: false)
        end
      end

      # Runs every waiting job now, whatever its deadline.
      def run_jobs_now
        @lock.synchronize do
          jobs = @jobs.values
          @jobs.clear
          jobs.each { |(_, job)| run_job(job) }
        end
      end

      # How long the native poller sleeps between scans, and a job waits
      # before it runs: half the bound.
      def period
        Configuration.attach_delay / 2.0
      end

      # Called when Configuration.attach_delay changes.
      def reconfigure
        @lock.synchronize { Native.configure_semaphore_poller(@pipe[1].fileno, period) if @thread }
      end

      # In a forked child the thread did not survive: one is started if
      # anything is watched or waiting.
      def restart_after_fork
        @pipe&.each { |io| io.close unless io.closed? }
        @thread = @pipe = @control = nil
        forget_parents_tracers
        return if @ids.empty? && @jobs.empty?

        @lock.synchronize { start }
      rescue StandardError => e
        warn("static_tracing: process #{Process.pid} does not watch for tracers: #{e.class}: #{e.message}")
      end

      private

      # The tracers attached to the parent are the parent's: a listener that
      # acted on one (a method armed) is told it is gone.
      def forget_parents_tracers
        @lock.synchronize do
          ids = @attached.select { |_, attached| attached }.keys
          @attached.clear
          ids.each { |id| tell(id) unless wanted?(id) }
        end
      end

      def start
        return if @thread

        reader, writer = IO.pipe
        Native.configure_semaphore_poller(writer.fileno, period)
        @pipe = [reader, writer]
        # Made with asynchronous exceptions (Thread#raise, Interrupt) held
        # back, a mask it inherits: one sent before #run has its rescue in
        # place would end it with nothing said.
        @thread = Thread.handle_interrupt(Object => :never) { Thread.new { run(reader) } }
        # Named here, not in the thread: a server that lists threads right
        # after boot (puma warns about them) must see whose it is.
        @thread.name = "static_tracing watcher"
      end

      # Ends only when its pipe is closed. Anything else that goes wrong in
      # one pass is said once (per kind and class of error) and the next
      # pass goes on: this thread alone serves static-tracing's requests,
      # applies attaches and writes triggered snapshots, and a process
      # whose thread ended would silently do none of them any more.
      def run(reader)
        Thread.current.report_on_exception = false
        Thread.handle_interrupt(Object => :immediate) do
          loop do
            serve(reader)
          rescue StandardError, ScriptError => e
            break if e.is_a?(IOError) && reader.closed?

            failed(:waiting, e)
            sleep(PAUSE_AFTER_FAILURE)
          end
        end
      rescue Exception => e # rubocop:disable Lint/RescueException
        warn("static_tracing: process #{Process.pid} stopped serving static-tracing requests, following tracers " \
             "and writing triggered snapshots: its thread ended with #{e.class}: #{e.message}", uplevel: nil)
        raise
      end

      # One pass: each kind of work is done apart from the others, so that
      # one failing does not keep the others from being done.
      def serve(reader)
        control = @control
        ready, = IO.select([reader, control].compact, nil, nil, next_wait)
        reader.read_nonblock(4096, exception: false)
        failures = [
          failed_doing?(:requests) { Control.receive if control && ready&.include?(control) },
          failed_doing?(:attach_changes) { apply_attach_changes },
          failed_doing?(:jobs) { @lock.synchronize { run_due_jobs } },
          failed_doing?(:trigger) { Recorder.take_trigger }
        ]
        # An error that comes back on every pass (whatever woke it) then
        # costs a few passes a second, not a core.
        sleep(PAUSE_AFTER_FAILURE) if failures.any?
      end

      def failed_doing?(work)
        yield
        false
      rescue StandardError, ScriptError => e
        failed(work, e)
        true
      end

      def failed(work, error)
        StaticTracing.warn_once([:watcher, work, error.class.name],
                                "static_tracing: process #{Process.pid} failed #{WORK.fetch(work)} and goes on " \
                                "(said once): #{error.class}: #{error.message.lines.first.to_s.chomp} " \
                                "(#{error.backtrace&.first})")
      end

      def apply_attach_changes
        @lock.synchronize do
          changes = Native.attach_changes
          changes.each { |id, attached| attached_changed(id, attached) }
          State.publish unless changes.empty?
        end
      end

      def next_wait
        @lock.synchronize do
          deadline = @jobs.each_value.map(&:first).min
          deadline && [deadline - now, 0].max
        end
      end

      def attached_changed(id, attached)
        was = wanted?(id)
        @attached[id] = attached
        tell(id) unless wanted?(id) == was
      end

      # Whether the listeners of watch +id+ are to act as if a tracer is attached.
      def wanted?(id)
        @attached[id] || @recorded.key?(id) ? true : false
      end

      # A listener that fails is said once and does not stop the others.
      def tell(id)
        attached = wanted?(id)
        @listeners[id]&.each do |listener, listening|
          listener.attach_changed(attached) if listening
        rescue StandardError, ScriptError => e
          StaticTracing.send(:warn_once, [:listener, listener.object_id],
                             "static_tracing: #{listener.inspect} could not follow a tracer " \
                             "#{attached ? "attaching" : "leaving"}: #{e.class}: #{e.message}")
        end
      end

      def run_due_jobs
        due = @jobs.select { |_, (deadline, _)| deadline <= now }
        due.each_key { |key| @jobs.delete(key) }
        due.each_value { |(_, job)| run_job(job) }
      end

      def run_job(job)
        job.call
      rescue StandardError, ScriptError => e
        warn("static_tracing: background work failed: #{e.class}: #{e.message}")
      end

      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end
    end
  end
end
