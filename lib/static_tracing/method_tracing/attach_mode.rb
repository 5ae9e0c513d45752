# frozen_string_literal: true

module StaticTracing
  # What attach mode (Configuration::Modes::ATTACH) does with method probes:
  # each is watched (see Watcher), and its method wrapped only while a
  # tracer is attached to it (MethodProbe#attach_changed).
  module MethodTracing
    class << self
      def watch_all
        @lock.synchronize { probes.each { |probe| Watcher.watch(probe.tracepoint, probe) } }
      end

      def unwatch_all
        @lock.synchronize do
          probes.each do |probe|
            Watcher.unwatch(probe.tracepoint, probe)
            unwant(probe, :attach)
          end
        end
      end

      # The probes whose wrapper attach mode put in place, as
      # "provider:probe", for the state file.
      def armed_by_attach
        @lock.synchronize do
          probes.select { |probe| probe.installed? && probe.wanted_by.include?(:attach) }
                .map { |probe| "#{probe.tracepoint.provider.name}:#{probe.tracepoint.name}" }.uniq
        end
      end

      private

      # A probe declared while tracing is on is wrapped at once; in attach
      # mode, it is watched; while the recorder records its tracepoint, wrapped.
      def arm_new(probe)
        want(probe, :switch) if Switch.enabled?
        Watcher.watch(probe.tracepoint, probe) if Switch.attach_mode?
        Recorder.method_probe_declared(probe)
      end
    end
  end
end
