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
# How: open takes a snapshot that clears nothing (the baseline); close takes
# another and keeps the difference, per stack, thread and label set. A
# clearing snapshot taken meanwhile hands each open window the window it
# ends (ruby/api.c calls Rperf.__finish_snapshot, which calls __cleared):
# the window adds that, less its baseline, and starts again from nothing.
# A stop ends every open window at the stop (its data comes in the same
# way). Running children's windows (inherit:) are in the snapshots as
# they arrive, so a window holds what the children wrote during it.
#
# Samples of a root's own threads keep their thread; a child's samples
# (those with a `pid` label) lose theirs (thread 0), as its threads'
# numbers in a merged result depend on the processes merged before it.
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
      # keeps raw samples (aggregate: false).
      def open
        data = Rperf.snapshot
        raise RuntimeError, "rperf is not running" unless data

        w = new(data)
        LOCK.synchronize do
          @open << w
          Rperf._c_window_readers(true)
        end
        w
      end

      # From Rperf.__finish_snapshot (a clearing snapshot) and
      # Rperf.__finish_stop (ended: the run stopped): every open window
      # keeps `data`, the window that just ended, less its baseline.
      def __cleared(data, ended: false)
        windows = LOCK.synchronize { @open.dup }
        windows.each { |w| w.__fold(data, ended) }
      end

      def __forget(window)
        LOCK.synchronize do
          @open.delete(window)
          Rperf._c_window_readers(false) if @open.empty?
        end
      end
    end

    def initialize(base)
      @lock = Mutex.new
      @opened_ns = Process.clock_gettime(Process::CLOCK_REALTIME, :nanosecond)
      @opened_mono = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
      @base = weights(base)
      @base_counts = counts(base)
      @acc = Hash.new(0)
      @acc_counts = Hash.new(0)
      @last = base
      @ended = false
    end

    # The result Hash of the span from open to now (or to the run's stop,
    # if it stopped meanwhile). The window is closed afterwards.
    def close
      data = @ended ? nil : Rperf.snapshot
      @lock.synchronize do
        add(data, @base, @base_counts) if data
        @last = data if data
        build
      end
    ensure
      Window.__forget(self)
    end

    def __fold(data, ended)
      @lock.synchronize do
        return if @ended

        add(data, @base, @base_counts)
        @base = {}
        @base_counts = {}
        @last = data
        @ended = ended
        @ended_mono = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) if ended
      end
    end

    private

    # {[frames, thread_seq, labels Hash] => weight}
    def weights(data)
      sets = data[:label_sets] || [{}]
      out = Hash.new(0)
      (data[:aggregated_samples] || []).each do |frames, w, seq, set|
        labels = sets[set || 0] || {}
        seq = 0 if labels.key?(:pid)
        out[[frames, seq || 0, labels]] += w
      end
      out
    end

    def counts(data)
      { trigger_count: data[:trigger_count].to_i, sampling_count: data[:sampling_count].to_i,
        sampling_time_ns: data[:sampling_time_ns].to_i, dropped_samples: data[:dropped_samples].to_i }
    end

    def add(data, base, base_counts)
      weights(data).each do |key, w|
        d = w - base.fetch(key, 0)
        @acc[key] += d if d.positive?
      end
      counts(data).each { |k, v| @acc_counts[k] += [v - base_counts.fetch(k, 0), 0].max }
    end

    def build
      last = @last || {}
      sets = [{}]
      index = { {} => 0 }
      samples = @acc.map do |(frames, seq, labels), w|
        [frames, w, seq, index[labels] ||= (sets << labels).size - 1]
      end
      now_mono = @ended_mono || Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
      last.slice(:mode, :frequency, :backend, :threads, :process_count, :allocator)
          .merge(@acc_counts)
          .merge(start_time_ns: @opened_ns, duration_ns: now_mono - @opened_mono,
                 aggregated_samples: samples, label_sets: sets,
                 unique_stacks: samples.size,
                 unique_frames: samples.flat_map(&:first).uniq.size,
                 detected_thread_count: (last[:threads] || []).size)
    end
  end
end
