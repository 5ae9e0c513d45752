# frozen_string_literal: true

module Bench
  # The tables of the methods group: method wrappers by shape, block forms,
  # and the objects each allocates per call.
  class MethodSections
    # What each path may allocate per call, as the id of the row whose
    # count it must not exceed (a wrapper passing keywords through super
    # allocates one object on Ruby 3.1, hand-written or not), or 0.
    ALLOCATION_TARGETS = {
      "disarmed" => "plain", "armed" => "floor", "attached" => "floor",
      "latency_disarmed" => 0, "latency_armed" => 0, "tracepoint_unattached" => 0
    }.freeze

    def initialize(subjects, samples, allocations, rounds)
      @subjects = subjects
      @by_id = subjects.to_h { |subject| [subject.id, subject] }
      @samples = samples
      @allocations = allocations
      @rounds = rounds
      @notes = []
    end

    def notes(*notes)
      @notes.concat(notes.compact)
    end

    def to_a
      [methods_section, blocks_section, allocations_section]
    end

    private

    def label(id)
      @by_id.fetch(id).loop.label
    end

    def methods_section
      section = Section.new(:methods, "Method tracing per call, by parameter shape " \
                                      "(median of #{@rounds} interleaved rounds)", params:)
      method_columns(section)
      @subjects.select { |subject| subject.group == :methods }.sort_by { |subject| @subjects.index(subject) }
               .group_by(&:shape).each_value { |rows| shape_rows(rows).each { |row| section.row(row) } }
      section.note(format("ns/call are net of an empty loop (%<ns>.1f ns/iteration); over plain and ratios are " \
                          "medians of per-round values; overhead / floor's = (path - plain) / (floor - plain)",
                          ns: @samples.empty_median))
      section.note("floor: a prepended method with the same parameters calling super with them; TracePoint: " \
                   "enabled with target: on the method only, reading the clock at :call and :return")
      @notes.each { |note| section.note(note) }
      section
    end

    def method_columns(section)
      section.column(:shape, "shape").column(:path, "path")
             .column(:ns_per_call, "ns/call", Format.decimal(1))
             .column(:spread_ns, "min..max", Format.range(1))
             .column(:over_plain_ns, "over plain ns", Format.decimal(1))
             .column(:ratio_to_plain, "ratio to plain", Format.ratio)
             .column(:overhead_vs_floor, "overhead / floor's", Format.ratio)
    end

    # Rows in the order of PATHS, whatever order they were timed in.
    def shape_rows(subjects)
      order = Methods::PATHS.keys.map(&:to_s)
      subjects.sort_by { |subject| order.index(subject.id.split(".").last) }.map { |subject| method_row(subject) }
    end

    def method_row(subject)
      return skipped_row(subject) if subject.skipped

      shape, path = subject.id.split(".")
      plain = label("#{shape}.plain")
      row = { id: subject.id, shape: subject.shape, path: subject.path, **@samples.timing(subject.loop.label),
              over_plain_ns: @samples.over(subject.loop.label, plain),
              ratio_to_plain: @samples.ratio(subject.loop.label, plain) }
      unless %w[plain floor].include?(path)
        row[:overhead_vs_floor] = @samples.overhead_ratio(subject.loop.label, label("#{shape}.floor"), plain)
      end
      row
    end

    def skipped_row(subject)
      { id: subject.id, shape: subject.shape, path: "#{subject.path}: skipped: #{subject.skipped}",
        skipped: subject.skipped }
    end

    def blocks_section
      section = Section.new(:blocks, "Block probes per call (median of #{@rounds} interleaved rounds)", params:)
                       .column(:path, "measurement")
                       .column(:ns_per_call, "ns/call", Format.decimal(1))
                       .column(:spread_ns, "min..max", Format.range(1))
                       .column(:over_yield_ns, "over yield ns", Format.decimal(1))
                       .column(:ratio_to_yield, "ratio to yield", Format.ratio)
      yield_label = label("block.yield")
      @subjects.select { |subject| subject.group == :blocks }.each do |subject|
        loop = subject.loop.label
        section.row({ id: subject.id, path: subject.path, **@samples.timing(loop),
                      over_yield_ns: @samples.over(loop, yield_label),
                      ratio_to_yield: @samples.ratio(loop, yield_label) })
      end
      section.note("bare yield: a method that yields, called with an empty block; latency: name: and provider: " \
                   "given; tracepoint: an Integer probe whose block is not run while unattached")
    end

    def allocations_section
      section = Section.new(:method_allocations, "Allocations per call of the methods and blocks above " \
                                                 "(GC.stat(:total_allocated_objects), median of " \
                                                 "#{Methods::ALLOCATION_ROUNDS} rounds)", params:)
                       .column(:shape, "shape").column(:path, "path")
                       .column(:objects_per_call, "objects/call", Format.decimal(4))
                       .column(:target_objects, "target objects/call", Format.decimal(0))
                       .column(:target_from, "target from")
      rows = @subjects.select(&:loop).map { |subject| allocation_row(subject) }
      rows.each { |row| section.row(row) }
      rows.select { |row| row[:target_objects] }.each { |row| section.note(verdict(row)) }
      section
    end

    def allocation_row(subject)
      counts = @allocations.fetch(subject.loop.label)
      row = { id: subject.id, shape: subject.shape, path: subject.path,
              objects_per_call: Bench.median(counts), samples: counts }
      shape, path = subject.id.split(".")
      target = ALLOCATION_TARGETS[path]
      return row if target.nil?

      return row.merge(target_objects: 0, target_from: "none") unless target.is_a?(String)

      row.merge(target_objects: Bench.median(@allocations.fetch(label("#{shape}.#{target}"))),
                target_from: "#{target} (#{shape})")
    end

    # Said in words, since a rounded count in the table could hide one
    # object every few thousand calls.
    def verdict(row)
      met = row[:samples].all? { |count| count <= row[:target_objects] }
      format("%<what>s allocates at most %<target>d/call: %<verdict>s (rounds: %<samples>s)",
             what: "#{row[:shape]} #{row[:path]}", target: row[:target_objects], verdict: met ? "YES" : "NO",
             samples: row[:samples].map { |count| count.round(4) }.join(", "))
    end

    def params
      { rounds: @rounds, sample_ms: Methods::SAMPLE_MS, empty_loop_ns_per_iteration: @samples.empty_median.round(3),
        allocation_rounds: Methods::ALLOCATION_ROUNDS, ruby: RUBY_VERSION }
    end
  end
end
