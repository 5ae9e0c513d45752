# frozen_string_literal: true

require "json"

module StaticTracing
  module CLI
    # `static-tracing list PID`: what /proc and the stubs' notes say about a
    # process's probes. Needs no tracer, so it also tells whether one is on.
    class List < Command
      command "list",
              arguments: "PID [--json]",
              summary: "List a process's providers and probes, and which are attached",
              description: <<~TEXT.chomp
                Lists the providers and probes that the static_tracing gem has loaded in process PID:
                argument types, the stub file a tracer attaches to, and whether a tracer is attached
                to each probe now. Reads /proc/PID/maps, the stubs' ELF notes and /proc/PID/mem;
                needs no tracer, and root only for another user's process.
              TEXT

      NO_ARGUMENTS = "-"
      HEADER = %w[PROBE ARGUMENTS ATTACHED].freeze
      # In mode attach: whether the probe's method is wrapped now.
      ARMED = "ARMED"

      private

      def define_options(parser)
        @json = false
        parser.on("--json", "Print JSON instead of a table") { @json = true }
      end

      def execute(args)
        pid = pid_argument(args)
        # A process with the gem and no provider loaded yet (SIGNAL mode,
        # tracing off) is listed as it is, with why.
        target = loaded_target(pid, empty: true)
        states = target.probe_states
        @tracing = published_state(pid)
        @json ? out.puts(JSON.pretty_generate(document(pid, states))) : print_table(pid, target, states)
        0
      end

      # What the process says about its tracing, or nil when it publishes
      # nothing readable: the probes are worth listing without it.
      def published_state(pid)
        ProcessState.new(pid).read
      rescue Error
        nil
      end

      def document(pid, states)
        providers = states.group_by(&:stub).map do |stub, probes|
          {
            name: stub.provider, path: stub.path, mapping: stub.mapping, memfd: stub.memfd, deleted: stub.deleted,
            arch: stub.file.arch, load_address: format("0x%x", stub.bias),
            probes: probes.map { |state| probe_document(stub, state) }
          }
        end
        { pid:, tracing: @tracing&.to_h, providers: }
      end

      def probe_document(stub, state)
        probe = state.probe
        {
          name: probe.name, args: probe.args, arg_spec: probe.arg_spec,
          attached: state.attached, semaphore: state.semaphore, breakpoint: state.breakpoint,
          armed: (armed?(stub, probe) if attach_mode?)
        }.compact
      end

      def attach_mode?
        @tracing&.mode == "attach"
      end

      def armed?(stub, probe)
        @tracing.armed.include?("#{stub.provider}:#{probe.name}")
      end

      def print_table(pid, target, states)
        out.puts(summary(pid, target, states))
        target.stubs.empty? ? print_no_providers(pid) : print_probes(states)
      end

      def print_probes(states)
        header = columns
        rows = states.map { |state| row(state) }
        widths = [header, *rows].transpose.map { |column| column.map(&:size).max }
        states.zip(rows).group_by { |state, _| state.stub }.each do |stub, pairs|
          print_stub(stub, [header, *pairs.map(&:last)], widths)
        end
        print_legend(states)
      end

      # What it records, if it does, the summary said.
      def print_no_providers(pid)
        out.puts("No providers loaded: #{no_providers_reason(pid, recording: false)}.")
      end

      def summary(pid, target, states)
        "PID #{pid}: #{count(target.stubs.size, "provider")}, #{count(states.size, "probe")}, " \
          "#{states.count(&:attached)} attached#{tracing_summary}"
      end

      def tracing_summary
        return "" unless @tracing

        signal = " (#{@tracing.signal_name})" if @tracing.mode == "signal"
        armed = ", #{count(@tracing.armed.size, "method")} armed" if attach_mode?
        errors = ", #{count(@tracing.block_errors, "tracepoint block error")} (see the process's warnings)" if
          @tracing.block_errors&.positive?
        "; mode #{@tracing.mode}#{signal}, tracing #{@tracing.enabled ? "enabled" : "disabled"}#{armed}#{errors}" \
          "#{recording_summary}"
      end

      # What the process records (static-tracing record), if anything.
      def recording_summary
        recording = @tracing.recorder or return ""
        armed = recording["armed"]
        ", recording #{armed.is_a?(Integer) ? count(armed, "probe") : "probes"}#{" (flight)" if recording["flight"]}"
      end

      def columns
        attach_mode? ? [*HEADER, ARMED] : HEADER
      end

      def row(state)
        row = [state.probe.name, arguments(state.probe), attached_text(state.attached)]
        return row unless attach_mode?

        [*row, armed?(state.stub, state.probe) ? "yes" : "no"]
      end

      def print_stub(stub, rows, widths)
        out.puts
        out.puts("#{stub.provider}  #{stub.path}#{stub_notes(stub)}")
        rows.each do |row|
          out.puts("  #{row.zip(widths).map { |cell, width| cell.ljust(width) }.join("  ")}".rstrip)
        end
      end

      def stub_notes(stub)
        notes = []
        notes << "memfd #{stub.mapping.delete_suffix(Target::DELETED).delete_prefix("/memfd:")}" if stub.memfd
        notes << "file deleted: #{stub.mapping.delete_suffix(Target::DELETED)}" if stub.deleted
        notes.empty? ? "" : "  (#{notes.join("; ")})"
      end

      def print_legend(states)
        if attach_mode?
          out.puts
          out.puts("#{ARMED}: the traced method's wrapper is in place; a method is armed while a tracer is " \
                   "attached to its probe. Other tracepoints check on each call and are never armed.")
        end
        return unless states.any? { |state| state.probe.args.include?(Arguments::POINTER_OR_BITS) }

        out.puts
        out.puts("#{Arguments::POINTER_OR_BITS}: a String pointer (str(argN) in bpftrace) or a Float's bits; " \
                 "the stub does not record which.")
      end

      def arguments(probe)
        args = probe.args
        args.empty? ? NO_ARGUMENTS : args.join(", ")
      end

      def attached_text(attached)
        case attached
        when true then "yes"
        when false then "no"
        else "unknown (unloaded while read)"
        end
      end
    end
  end
end
