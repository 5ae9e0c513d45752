# frozen_string_literal: true

module Bench
  # What `require "static_tracing/rails"` costs an ActiveSupport::Notifications
  # event: nothing while no tracer is attached to the event's probe (the
  # gem has not subscribed), and, attached, what its subscriber and the
  # probe add. Each loop instruments an event of its own that nothing else
  # listens to, so the three share ActiveSupport's code path and differ only
  # in the gem's part: cache_write is not installed (as without the gem),
  # cache_read is installed with no tracer, sql is installed with bpftrace
  # counting its probe.
  class Rails < Group
    ROUNDS = 9
    SAMPLE_MS = 25
    PLAIN = "cache_write.active_support"
    UNATTACHED = "cache_read.active_support"
    ATTACHED = "sql.active_record"
    PAYLOAD = { key: "users/42", name: "User Load", hit: true }.freeze

    def run
      problem = load_problem
      problem ? unavailable(problem) : run_installed
    end

    private

    def run_installed
      StaticTracing::Configuration.mode = StaticTracing::Configuration::Modes::ATTACH
      probes = StaticTracing::Rails.install([UNATTACHED, ATTACHED])
      attached = probes.fetch(ATTACHED)
      program = Bpftrace.count_program(StaticTracing::Rails::PROVIDER, [attached.event.probe])
      Bpftrace.attached(program, pid: Process.pid, log: work_file("rails-bpftrace.log")) do |tracer|
        subscribed = tracer && Bench.wait_until("the gem subscribes to #{ATTACHED}", timeout: 10) do
          attached.subscribed?
        end
        measure(probes, subscribed, tracer)
      end
    ensure
      StaticTracing::Rails.uninstall
      StaticTracing::Configuration.mode = StaticTracing::Configuration::Modes::OFF
      StaticTracing.providers[StaticTracing::Rails::PROVIDER]&.unregister
    end

    # Rails is loaded by the group's run, not with the group: a Ruby without
    # it runs the other groups.
    def load_problem
      require "static_tracing/rails"
      nil
    rescue LoadError => e
      "static_tracing/rails cannot be loaded by Ruby #{RUBY_VERSION}: #{e.message.lines.first.strip}"
    end

    def unavailable(reason)
      table(:rails, "ActiveSupport::Notifications.instrument with static_tracing/rails", measurement: "measurement")
        .row(id: "rails.all", measurement: "every row: skipped: #{reason}", skipped: reason)
    end

    def instrument_loop(label, event)
      Loop.new(label, "notifications.instrument(event, payload) { }",
               notifications: ActiveSupport::Notifications, event:, payload: PAYLOAD.dup)
    end

    def measure(probes, subscribed, tracer)
      loops = { plain: instrument_loop("instrument, event not installed (as without the gem)", PLAIN),
                unattached: instrument_loop("instrument, event installed, no tracer", UNATTACHED) }
      loops[:attached] = instrument_loop("instrument, bpftrace attached", ATTACHED) if subscribed
      samples = time(loops.values, sample_ms: SAMPLE_MS)
      table = table(:rails, "ActiveSupport::Notifications.instrument with static_tracing/rails " \
                            "(median of #{rounds} interleaved rounds)",
                    measurement: "measurement", ns_per_call: ["ns/call", :d1], over_plain: ["over plain, ns", :d1],
                    ratio: ["ratio to plain", :x])
      loops.each do |key, loop|
        table.row(id: "rails.#{key}", measurement: loop.label, **samples.timing(loop.label),
                  over_plain: samples.over(loop.label, loops[:plain].label),
                  ratio: samples.ratio(loop.label, loops[:plain].label))
      end
      skipped_row(table) unless subscribed
      notes(table, probes, loops, tracer)
    end

    def skipped_row(table)
      reason = Bpftrace.unavailable_reason || "the gem did not subscribe to #{ATTACHED} within 10 s of the attach"
      table.row(id: "rails.attached", measurement: "instrument, bpftrace attached: skipped: #{reason}", skipped: reason)
    end

    def notes(table, probes, loops, tracer)
      table.note("unattached, the gem has no subscriber: ActiveSupport sees no listener and runs the block alone")
      table.note(attachment_note([probes.fetch(UNATTACHED).tracepoint]))
      return table.note(Bpftrace.skipped_note) unless tracer

      table.note(Bpftrace.attached_note([probes.fetch(ATTACHED).tracepoint]))
      counts = tracer.finish
      attached = loops[:attached] or return
      table.note(Bpftrace.count_note(counts, sql_active_record: attached.calls))
    end
  end
end
