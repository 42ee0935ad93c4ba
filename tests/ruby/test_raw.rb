# frozen_string_literal: true
# aggregate: false — raw_samples with timestamps, aggregated_samples built from them.
require_relative "helper"

class TestRaw < Test::Unit::TestCase
  include RperfTestHelper

  RAW_REFERENCE_KEYS = %i[mode frequency trigger_count sampling_count sampling_time_ns
                          detected_thread_count start_time_ns duration_ns raw_samples
                          aggregated_samples].freeze
  NEW_KEYS = %i[backend dropped_samples profiler_memory_bytes allocator threads
                label_sets_overflowed].freeze

  def raw_run(backend, mode, &blk)
    Rperf.start(frequency: 1000, mode: mode, backend: backend, aggregate: false, &blk)
  end

  def test_raw_result_keys
    each_combo do |backend, mode|
      result = raw_run(backend, mode) { rperf_work_a(0.05) }
      ctx = "#{backend}/#{mode}"
      extra = %i[timer_overruns] # optional engine counter, Integer
      assert_equal((RAW_REFERENCE_KEYS + NEW_KEYS).sort, (result.keys - extra).sort, "raw mode key set #{ctx}")
      assert_equal(RAW_REFERENCE_KEYS, result.keys & RAW_REFERENCE_KEYS, "reference order #{ctx}")
      assert_kind_of(Array, result[:raw_samples])
      assert_kind_of(Array, result[:aggregated_samples])
      assert_equal(backend, result[:backend])
      assert_operator(result[:profiler_memory_bytes], :>, 0)
    end
  end

  def test_raw_samples_shape_and_order
    each_combo do |backend, mode|
      result = raw_run(backend, mode) do
        rperf_work_a(0.05)
        rperf_alloc_work(0.05)
        rperf_work_b(0.05)
      end
      ctx = "#{backend}/#{mode}"
      raw = result[:raw_samples]
      assert_not_empty(raw, ctx)
      raw.each { |s| assert_sample_shape(s, raw: true, msg: ctx) }
      ts = raw.map { |s| s[4] }
      assert_equal(ts.sort, ts, "raw timestamps are non-decreasing (single thread) #{ctx}")
      # recording order: all rperf_work_a samples come before rperf_work_b's
      last_a = raw.rindex { |s| s[0].any? { |f| f[1] == "Object#rperf_work_a" } }
      first_b = raw.index { |s| s[0].any? { |f| f[1] == "Object#rperf_work_b" } }
      assert_not_nil(last_a, ctx)
      assert_not_nil(first_b, ctx)
      assert_operator(last_a, :<, first_b, "raw samples are in recording order #{ctx}")
    end
  end

  def test_raw_timestamps_within_run
    # Timestamps are nanoseconds on some clock; whichever it is, the span of
    # the samples fits in the run's duration (plus slack for clock reads).
    RPERF_BACKENDS.each do |backend|
      m0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
      result = raw_run(backend, :cpu) { rperf_work_a(0.1) }
      m1 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
      ts = result[:raw_samples].map { |s| s[4] }
      assert_operator(ts.size, :>=, 2)
      assert_operator(ts.max - ts.min, :<=, m1 - m0, "timestamp span within the run (#{backend})")
      assert_operator(ts.max - ts.min, :>, 0, backend.to_s)
    end
  end

  def test_aggregated_built_from_raw
    each_combo do |backend, mode|
      result = raw_run(backend, mode) do
        rperf_work_a(0.05)
        rperf_alloc_work(0.05)
      end
      ctx = "#{backend}/#{mode}"
      expected = Hash.new(0)
      result[:raw_samples].each { |f, w, ts, ls, _| expected[[f, ts, ls]] += w }
      agg = result[:aggregated_samples]
      agg.each { |s| assert_sample_shape(s, msg: ctx) }
      got = agg.to_h { |f, w, ts, ls| [[f, ts, ls], w] }
      assert_equal(agg.size, got.size, "aggregated entries unique per key #{ctx}")
      assert_equal(expected, got, "aggregated_samples sums raw weights per key #{ctx}")
      # first-seen order
      first_seen = result[:raw_samples].map { |f, _, ts, ls, _| [f, ts, ls] }.uniq
      assert_equal(first_seen, agg.map { |f, _, ts, ls| [f, ts, ls] }, "first-seen order #{ctx}")
    end
  end

  def test_raw_with_threads
    each_combo do |backend, mode|
      gate = Queue.new
      result = raw_run(backend, mode) do
        ths = 3.times.map { Thread.new { gate.pop; rperf_work_a(0.04) } }
        3.times { gate << :go }
        rperf_work_b(0.04)
        ths.each(&:join)
      end
      ctx = "#{backend}/#{mode}"
      raw = result[:raw_samples]
      raw.each { |s| assert_sample_shape(s, raw: true, msg: ctx) }
      by_thread = raw.group_by { |s| s[2] }
      assert_operator(by_thread.size, :>=, 2, "samples from several threads #{ctx}")
      by_thread.each do |seq, samples|
        ts = samples.map { |s| s[4] }
        assert_equal(ts.sort, ts, "per-thread timestamps non-decreasing (thread #{seq}) #{ctx}")
      end
      all = raw.map { |s| s[4] }
      assert_equal(all.sort, all, "raw_samples in recording (timestamp) order across threads #{ctx}")
      assert_equal(rperf_total_weight(result, key: :raw_samples), rperf_total_weight(result), ctx)
    end
  end

  def test_raw_includes_synthetic_frames
    result = raw_run(:signal, :wall) do
      sleep 0.03
      rperf_alloc_work(0.1)
    end
    leafs = result[:raw_samples].map { |s| s[0][0] }
    assert_include(leafs, GVL_BLOCKED, "wall mode raw samples include [GVL blocked]")
    assert(leafs.include?(GC_MARKING) || leafs.include?(GC_SWEEPING), "raw samples include GC frames")
  end
end
