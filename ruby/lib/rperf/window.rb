# frozen_string_literal: true

# Rperf::Window — the profile of one span of a running profiler, taken
# without disturbing anybody else's: any number of windows may be open at
# once (concurrent pprof scrapes), and none of them clears what
# Rperf.snapshot(clear: true) users see, nor misses what such a clear
# takes away in the middle of the window.
#
#   w = Rperf::Window.open            # raises unless a run (aggregate) goes
#   sleep 5
#   data = w.close                    # the result Hash of those 5 seconds
#
# How: open takes a baseline in C (the weight of every aggregated stack
# so far and the run's counters, ruby/window_delta.c); close builds a
# result of only the stacks that gained weight since, so a window costs
# what it saw, however large the run's profile. A clearing snapshot (or a
# stop) taken meanwhile hands each open baseline the part it ends, in C,
# and the window adds the parts at its close. Running children's profiles
# (inherit:) come as files: a window holds the parts they wrote while it
# was open (those present at its open are left out; those a clear or the
# stop consumes are read by each open window first, __children_going).
#
# Children's samples carry their `pid` label and thread numbers after
# this process's, as in a merged snapshot.
#
# Context: the main Ractor (Rperf.snapshot is main-Ractor only); open and
# close may be called from any of its threads, and concurrently.

require "rperf"

module Rperf
  class Window
    LOCK = Mutex.new
    @open = []

    class << self
      # A window starting now. RuntimeError when nothing runs or the run
      # keeps raw samples (aggregate: false). allocations: true: its result
      # has :allocations too — the allocations sampled in the window and
      # the change of the objects in use by stack (negative where more
      # were freed than made), as Go's delta heap profiles; ArgumentError
      # when the run samples no allocations.
      def open(allocations: false)
        mark = Rperf._c_window_mark(allocations ? true : false)
        raise RuntimeError, "rperf is not running" if mark.nil?
        if mark == false
          raise ArgumentError, "the run samples no allocations (Rperf.start(mode: :alloc) or allocations: true)"
        end

        __adopt(mark, allocations ? true : false)
      end

      # A window of a mark opened already (Rperf._c_window_mark, or the
      # listener's accepting thread when a request arrived).
      def __adopt(mark, allocations = false)
        w = new(mark, Rperf.__children_dir, allocations, Rperf._c_window_age(mark))
        LOCK.synchronize do
          @open << w
          Rperf._c_window_readers(true)
        end
        w
      end

      # From Rperf.__finish_snapshot (a clearing snapshot) and
      # Rperf.__finish_stop, before the children's files in `dir` go: every
      # open window reads the parts new to it.
      def __children_going(dir)
        windows = LOCK.synchronize { @open.dup }
        windows.each { |w| w.__read_children(dir) }
      end

      def __forget(window)
        LOCK.synchronize do
          @open.delete(window)
          Rperf._c_window_readers(false) if @open.empty?
        end
      end
    end

    # age: seconds since the mark opened; the children's parts written
    # since then are the window's too.
    def initialize(mark, dir, allocations, age = 0)
      @lock = Mutex.new
      @mark = mark
      @allocations = allocations
      @dir = dir
      @seen = dir ? seen_before(dir, age) : {}
      @children = [] # [[pid, Rperf::Report::Profile]]
    end

    # The result Hash of the span from open to now (or to the run's stop,
    # if it stopped meanwhile). The window is closed afterwards.
    def close
      parts = Rperf._c_window_close(@mark)
      # the run's first fork may have made the directory since the open
      dir = @dir || Rperf.__children_dir
      __read_children(dir) if dir
      @lock.synchronize { build(parts, @children) }
    ensure
      Window.__forget(self)
    end

    # Of `seconds` from the window's start, what is left now.
    def __remaining(seconds)
      [seconds - Rperf._c_window_age(@mark), 0].max
    end

    # For Rperf::Server's send (ruby/window_send.c), which closes the mark
    # itself: the mark, unless the run had children when the window opened
    # (their parts are read here; the send's job hands a window of a run
    # that made its children's directory since back as parts).
    def __mark_alone
      @dir ? nil : @mark
    end

    # The window's end when the send's job closed its mark: the result of
    # the parts it handed back (nil: none wanted). The window is closed.
    def __close_sent(parts)
      return nil unless parts

      dir = Rperf.__children_dir
      __read_children(dir) if dir
      @lock.synchronize { build(parts, @children) }
    ensure
      Window.__forget(self)
    end

    def __read_children(dir)
      @lock.synchronize do
        names = child_names(dir).reject { |n| @seen[n] }
        next if names.empty?

        names.each { |n| @seen[n] = true }
        @children.concat(Rperf.send(:__child_profiles, dir, [], names))
      end
    end

    private

    def child_names(dir)
      Rperf.__child_part_names(dir)
    end

    # The children's parts in `dir` written before the window opened (age
    # seconds ago), as a set.
    def seen_before(dir, age)
      names = child_names(dir)
      return names.to_h { |n| [n, true] } if age <= 0

      opened = Time.now - age
      names.each_with_object({}) do |n, seen|
        seen[n] = true if File.mtime(File.join(dir, n)) < opened
      rescue SystemCallError
        seen[n] = true # gone: a clear took it
      end
    end

    COUNTS = %i[trigger_count sampling_count sampling_time_ns dropped_samples timer_overruns].freeze
    Part = Struct.new(:data)

    def without_inuse(data)
      return data unless data[:allocations]

      samples = data[:allocations][:samples].map { |s| s.dup.tap { |t| t[4] = t[5] = 0 } }
      data.merge(allocations: data[:allocations].merge(samples: samples))
    end

    # One result of this process's parts (one per table generation the
    # window spanned) and the children's.
    def build(parts, children)
      data = parts.size == 1 ? parts.first : combine(parts)
      data = data.merge(label_sets: [{}]) unless data[:label_sets]
      return data if children.empty?

      children = children.sort_by { |pid, prof| [prof.data[:start_time_ns] || 0, pid] }
      # a child's part holds its objects in use at its end, not their change
      children = children.map { |pid, prof| [pid, Part.new(without_inuse(prof.data))] } if data[:allocations]
      merged = Rperf.__merge_parts(data, children)
      merged.merge(unique_stacks: merged[:aggregated_samples].size,
                   unique_frames: merged[:aggregated_samples].flat_map(&:first).uniq.size)
    end

    # Parts of several generations (a clear, a stop in the window): their
    # samples added by stack, thread and labels; counters summed; the span
    # from the first part's start to the last one's end.
    def combine(parts)
      return { aggregated_samples: [], label_sets: [{}], start_time_ns: 0, duration_ns: 0 } if parts.empty?

      acc = Hash.new(0)
      parts.each do |d|
        sets = d[:label_sets] || [{}]
        d[:aggregated_samples].each do |frames, w, seq, set|
          acc[[frames, seq || 0, sets[set || 0] || {}]] += w
        end
      end
      sets = [{}]
      index = { {} => 0 }
      samples = acc.map do |(frames, seq, labels), w|
        [frames, w, seq, index[labels] ||= (sets << labels).size - 1]
      end
      first = parts.first
      last = parts.last
      ends = last[:start_time_ns] + last[:duration_ns]
      out = last.merge(COUNTS.to_h { |k| [k, parts.sum { |d| d[k].to_i }] })
                .merge(start_time_ns: first[:start_time_ns], duration_ns: ends - first[:start_time_ns],
                       aggregated_samples: samples, label_sets: sets, unique_stacks: samples.size,
                       unique_frames: samples.flat_map(&:first).uniq.size)
      out[:allocations] = combine_allocations(parts, sets, index) if last[:allocations]
      out
    end

    # The parts' allocation entries added by stack, class, thread and
    # labels (label set ids into `sets`, grown through `index`).
    def combine_allocations(parts, sets, index)
      acc = {}
      parts.each do |d|
        next unless d[:allocations]

        dsets = d[:label_sets] || [{}]
        d[:allocations][:samples].each do |frames, cls, *values, seq, set|
          key = [frames, cls, seq || 0, dsets[set || 0] || {}]
          sum = (acc[key] ||= [0, 0, 0, 0])
          values.each_with_index { |v, i| sum[i] += v }
        end
      end
      samples = acc.map do |(frames, cls, seq, labels), values|
        [frames, cls, *values, seq, index[labels] ||= (sets << labels).size - 1]
      end
      with = parts.select { |d| d[:allocations] }
      with.last[:allocations].merge(sampled: with.sum { |d| d[:allocations][:sampled] },
                                    dropped: with.sum { |d| d[:allocations][:dropped] }, samples: samples)
    end
  end
end
