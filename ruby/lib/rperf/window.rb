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
# (inherit:) come as files: a window holds the files they wrote while it
# was open, handed to it by the fold that reads them (Rperf::Children:
# every file once, to every window open then; those written before its
# open are left out).
#
# Children's samples carry their `pid` label and thread numbers after
# this process's, as in a merged snapshot.
#
# Context: the main Ractor (Rperf.snapshot is main-Ractor only); open and
# close may be called from any of its threads, and concurrently.

require "rperf"
require "rperf/children"

module Rperf
  class Window
    # The open windows, changed and read under Children::LOCK (a fold
    # hands them the children's files).
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
        Children.synchronize do
          w = new(mark, Rperf.__children_dir, allocations, Rperf._c_window_age(mark))
          @open << w
          Rperf._c_window_readers(true)
          w
        end
      end

      # From Rperf.__finish_stop, before the children's files in `dir` go:
      # every open window takes the parts new to it (a fold).
      def __children_going(dir)
        Children.fold(dir) unless @open.empty?
      end

      def __forget(window)
        Children.synchronize { __forget_locked(window) }
      end

      # Children::LOCK held.
      def __forget_locked(window)
        @open.delete(window)
        Rperf._c_window_readers(false) if @open.empty?
      end

      # The open windows (Children::LOCK held).
      def __open_locked = @open
    end

    # age: seconds since the mark opened; the children's parts written
    # since then are the window's too.
    # Under Children::LOCK (Window.__adopt).
    def initialize(mark, dir, allocations, age = 0)
      @mark = mark
      @allocations = allocations
      @dir = dir
      # {file name => true} of the children's files left out or taken;
      # [Children::Piece] taken
      @seen, @children = dir ? Children.seen_before(dir, age) : [{}, []]
    end

    # The result Hash of the span from open to now (or to the run's stop,
    # if it stopped meanwhile). The window is closed afterwards.
    def close
      finish(Rperf._c_window_close(@mark))
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
      unless parts
        Window.__forget(self)
        return nil
      end
      finish(parts)
    end

    # A child's part a fold hands out (Children::LOCK held): the window's
    # unless its first file was written before the open, and once.
    def __offer(piece)
      return if @seen[piece.names[0]]

      piece.names.each { |n| @seen[n] = true }
      @children << piece
    end

    private

    # The window's end: the children's files written up to now are taken
    # (a fold) and the window leaves the list, then its result is built.
    def finish(parts)
      # the run's first fork may have made the directory since the open
      Children.close_window(self, @dir || Rperf.__children_dir)
      build(parts, child_parts)
    ensure
      Window.__forget(self)
    end

    # [[pid, Part]] of the children's parts taken.
    def child_parts
      @children.map { |piece| [piece.pid, Part.new(piece.data)] }
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
