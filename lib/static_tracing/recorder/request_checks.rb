# frozen_string_literal: true

module StaticTracing
  module Recorder
    # What a command asks to record is checked against what the process
    # has before anything is made: a pattern that names no probe, or a
    # trigger that names no latency probe among those recorded, is a typo
    # far more often than a wish to wait for probes declared later, and
    # would otherwise record nothing, in silence. The refusal lists the
    # probes there are, as `static-tracing list` would. A command that does
    # mean to wait says so (`record --wait-for-probes`); a process's own
    # recordings (Recorder.start, STATIC_TRACING_RECORD) always may, since
    # they often start before the application declares its probes.
    module RequestChecks
      # A refusal is one line of the state file (Control::MAX_REASON): the
      # probes listed take at most this much of it.
      LISTED = 600
      WAIT = "to record probes declared later, give --wait-for-probes"

      module_function

      # Raises RecorderError unless every pattern of +settings+ names a
      # probe the process has now and its trigger, if any, a latency probe
      # among those.
      def check(settings)
        probes = StaticTracing::STATE_LOCK.synchronize { declared_probes }
        unmatched = settings.probes.reject { |pattern| probes.any? { |label, _| match?(pattern, label) } }
        unless unmatched.empty?
          raise RecorderError, "#{unmatched.size == 1 ? "no probe matches" : "no probes match"} " \
                               "#{unmatched.join(", ")} (#{listing(probes.map(&:first))}); #{WAIT}"
        end
        check_trigger(settings, probes)
      end

      def check_trigger(settings, probes)
        trigger = settings.dump_when or return
        recorded = probes.select do |label, latency|
          latency && RecordingOptions.match?(settings.probes, *label.split(":", 2))
        end.map(&:first)
        return if recorded.any? { |label| match?(trigger.pattern, label) }

        raise RecorderError, "the trigger #{trigger} matches no latency probe among those recorded " \
                             "(#{listing(recorded, "latency probe")}); #{WAIT}"
      end

      def match?(pattern, label)
        RecordingOptions.match?([pattern], *label.split(":", 2))
      end

      # [label, latency?] for every probe declared, in the order declared.
      def declared_probes
        StaticTracing.providers.flat_map do |provider|
          provider.tracepoints.each_value.map do |tracepoint|
            ["#{provider.name}:#{tracepoint.name}", !tracepoint.latency_argument.nil?]
          end
        end
      end

      # "its 3 probes: a:b, a:c, d:e", cut to what a refusal can hold.
      def listing(labels, noun = "probe")
        return "it has no #{noun} yet" if labels.empty?

        shown = []
        labels.each do |label|
          break if shown.sum { |each| each.size + 2 } + label.size > LISTED

          shown << label
        end
        more = labels.size - shown.size
        "its #{labels.size} #{noun}#{"s" unless labels.size == 1}: #{shown.join(", ")}" \
          "#{", and #{more} more" if more.positive?}"
      end
    end
  end
end
