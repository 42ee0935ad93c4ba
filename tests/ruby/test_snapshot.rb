# frozen_string_literal: true
# Rperf.snapshot(clear:) while sampling continues.
require_relative "helper"

class TestSnapshot < Test::Unit::TestCase
  include RperfTestHelper

  def test_snapshot_when_not_running
    assert_nil(Rperf.snapshot)
    assert_nil(Rperf.snapshot(clear: true))
    Rperf.start(frequency: 100) { cpu_spin(0.005) }
    assert_nil(Rperf.snapshot, "after stop")
  end

  def test_snapshot_requires_aggregate_mode
    RPERF_BACKENDS.each do |backend|
      Rperf.start(frequency: 1000, aggregate: false, backend: backend)
      assert_raise_with_message(RuntimeError, "snapshot requires aggregate mode (aggregate: true)") do
        Rperf.snapshot
      end
      assert_raise(RuntimeError) { Rperf.snapshot(clear: true) }
      assert_true(Rperf.running?, "still running after the failed snapshot")
      rperf_work_a(0.03)
      result = Rperf.stop
      assert_kind_of(Hash, result)
      assert_not_empty(rperf_samples_with(result, "Object#rperf_work_a", key: :raw_samples),
                       "raw mode kept sampling (#{backend})")
    end
  end

  def test_snapshot_shape_and_profiling_continues
    each_combo do |backend, mode|
      Rperf.start(frequency: 1000, mode: mode, backend: backend)
      rperf_work_a(0.08)
      snap = Rperf.snapshot
      ctx = "#{backend}/#{mode}\n#{rperf_describe(snap)}"
      assert_true(Rperf.running?, "profiling continues after snapshot")
      assert_kind_of(Hash, snap)
      rperf_work_b(0.08)
      result = Rperf.stop
      assert_equal(result.keys.sort, snap.keys.sort, "snapshot has the keys of an aggregate stop result #{ctx}")
      assert_equal(snap[:aggregated_samples].size, snap[:unique_stacks], ctx)
      snap[:aggregated_samples].each { |s| assert_sample_shape(s, msg: ctx) }
      assert_equal(mode, snap[:mode])
      assert_equal(backend, snap[:backend])
      assert_has_label(snap, "Object#rperf_work_a", ctx)
      refute_has_label(snap, "Object#rperf_work_b", ctx)
      assert_has_label(result, "Object#rperf_work_a", "snapshot without clear keeps data #{ctx}")
      assert_has_label(result, "Object#rperf_work_b", "profiling went on #{ctx}")
      assert_operator(result[:trigger_count], :>=, snap[:trigger_count])
      assert_operator(result[:sampling_count], :>=, snap[:sampling_count])
      assert_equal(snap[:start_time_ns], result[:start_time_ns])
      assert_operator(result[:duration_ns], :>, snap[:duration_ns])
    end
  end

  def test_snapshot_clear_resets
    each_combo do |backend, mode|
      Rperf.start(frequency: 1000, mode: mode, backend: backend)
      rperf_work_a(0.08)
      before_clear = Process.clock_gettime(Process::CLOCK_REALTIME, :nanosecond)
      s1 = Rperf.snapshot(clear: true)
      rperf_work_b(0.08)
      s2 = Rperf.snapshot
      rperf_work_b(0.02)
      result = Rperf.stop
      ctx = "#{backend}/#{mode}\ns1=#{rperf_describe(s1)}\ns2=#{rperf_describe(s2)}"
      assert_has_label(s1, "Object#rperf_work_a", ctx)
      refute_has_label(s2, "Object#rperf_work_a", "cleared data is gone #{ctx}")
      assert_has_label(s2, "Object#rperf_work_b", ctx)
      refute_has_label(result, "Object#rperf_work_a", "stop after a clear covers only the new interval #{ctx}")
      assert_has_label(result, "Object#rperf_work_b", ctx)
      assert_operator(s2[:start_time_ns], :>=, before_clear, "start_time_ns restarts at the clear #{ctx}")
      assert_operator(s2[:start_time_ns], :>, s1[:start_time_ns], ctx)
      assert_operator(s2[:sampling_count], :<=, s2[:trigger_count], ctx)
      # a clear starts a new frame table (nothing of the closed window stays
      # pinned): s2 counts only frames met since the clear
      s2_frames = s2[:aggregated_samples].flat_map(&:first).uniq.size
      assert_operator(s2[:unique_frames], :<=, s2_frames + 8, "frame table restarts at a clear #{ctx}")
      assert_operator(s2[:detected_thread_count], :>=, s1[:detected_thread_count], ctx)
      s2_weight = rperf_total_weight(s2)
      assert_operator(s2_weight, :<=, 3 * s2[:duration_ns] + 1, "weight after clear bounded by its interval #{ctx}")
    end
  end

  def test_clear_counters_restart
    Rperf.start(frequency: 1000)
    rperf_work_a(0.1)
    s1 = Rperf.snapshot(clear: true)
    s2 = Rperf.snapshot
    assert_operator(s1[:sampling_count], :>, 0)
    assert_operator(s2[:sampling_count], :<, s1[:sampling_count], "sampling_count reset by clear")
    assert_operator(s2[:trigger_count], :<, s1[:trigger_count], "trigger_count reset by clear")
    assert_operator(s2[:sampling_time_ns], :<, s1[:sampling_time_ns], "sampling_time_ns reset by clear")
    assert_operator(rperf_total_weight(s2), :<, rperf_total_weight(s1))
    assert_operator(s2[:duration_ns], :<, s1[:duration_ns], "duration restarts at the clear")
  end

  def test_snapshots_are_cumulative_without_clear
    # Without clear, each snapshot contains everything before it: per-key
    # weights never decrease, counters never decrease.
    each_combo do |backend, mode|
      Rperf.start(frequency: 2000, mode: mode, backend: backend)
      prev = nil
      8.times do |i|
        i.even? ? rperf_work_a(0.015) : rperf_work_b(0.015)
        snap = Rperf.snapshot
        if prev
          ctx = "#{backend}/#{mode} snapshot #{i}"
          cur = snap[:aggregated_samples].to_h { |f, w, ts, ls| [[f, ts, ls], w] }
          prev[:aggregated_samples].each do |f, w, ts, ls|
            assert_operator(cur.fetch([f, ts, ls], 0), :>=, w, "weight of #{f.first(2).inspect} decreased #{ctx}")
          end
          %i[trigger_count sampling_count sampling_time_ns duration_ns unique_frames].each do |k|
            assert_operator(snap[k], :>=, prev[k], "#{k} #{ctx}")
          end
        end
        prev = snap
      end
      Rperf.stop
    end
  end

  def test_snapshot_while_threads_sample
    each_combo do |backend, mode|
      stop = false
      progress = Queue.new
      Rperf.start(frequency: 2000, mode: mode, backend: backend)
      threads = 4.times.map do |i|
        Thread.new do
          n = 0
          until stop
            i.even? ? rperf_work_a(0.002) : rperf_alloc_work(0.002)
            progress << i
            n += 1
          end
          n
        end
      end
      snaps = 20.times.map do |i|
        rperf_work_b(0.003)
        progress.pop # workers have run since the previous snapshot
        Rperf.snapshot(clear: i % 5 == 4 && i < 15)  # the last 5 snapshots + stop accumulate
      end
      stop = true
      threads.each(&:join)
      result = Rperf.stop
      ctx = "#{backend}/#{mode}"
      (snaps + [result]).each do |s|
        assert_kind_of(Hash, s, ctx)
        assert_equal(s[:aggregated_samples].size, s[:unique_stacks], ctx)
        s[:aggregated_samples].each { |x| assert_sample_shape(x, msg: ctx) }
      end
      assert(snaps.any? { |s| !rperf_samples_with(s, "Object#rperf_work_a").empty? },
             "threads' samples reach snapshots #{ctx}\n#{rperf_describe(snaps.last)}")
      # workers ran in the last window too (which one the GVL favours, and
      # whether a tick lands in a worker's 2 ms chunk or its time is settled
      # at its exit on its block's frame, is up to the scheduler, especially
      # under M:N threads on a loaded machine)
      assert(result[:aggregated_samples].any? { |x| x[2] > 1 && x[1] > 0 },
             "worker threads' samples reach the final result #{ctx}\n#{rperf_describe(result)}")
    end
  end

  # A thread blocked across windows (a pool thread waiting for work) puts
  # into a window only the part of its block inside that window: the
  # window it wakes in used to get the whole block since it began.
  def test_a_block_across_windows_counts_only_in_its_window
    RPERF_BACKENDS.each do |backend|
      q = Queue.new
      t = Thread.new { q.pop; rperf_work_a(0.02) }
      Rperf.start(frequency: 1000, mode: :wall, backend: backend)
      sleep 0.3
      Rperf.snapshot(clear: true)
      sleep 0.1
      q << 1
      t.join
      data = Rperf.snapshot(clear: true)
      Rperf.stop
      # the window runs from the first snapshot's close to the second's
      # (inside each call, before its result is built): its duration_ns
      window = data[:duration_ns]
      seq = data[:threads].map { |th| th[:thread_seq] }.max
      blocked = data[:aggregated_samples].select { |s| s[2] == seq && s[0][0][1] == "[GVL blocked]" }.sum { |s| s[1] }
      assert_operator(blocked, :>=, 50_000_000, "#{backend}: the block's part in the window\n#{rperf_describe(data)}")
      assert_operator(blocked, :<=, window, "#{backend}: no more than the window lasted\n#{rperf_describe(data)}")
      assert_operator(rperf_weight_with(data, "Object#rperf_work_a"), :>, 0, backend.to_s)
    end
  end

  def test_snapshot_does_not_write_output
    Dir.mktmpdir do |dir|
      path = File.join(dir, "snap.collapsed")
      begin
        Rperf.start(frequency: 1000, output: path)
      rescue ArgumentError => e
        omit("output: not accepted yet: #{e.message}")
      end
      rperf_work_a(0.02)
      Rperf.snapshot
      Rperf.snapshot(clear: true)
      assert_false(File.exist?(path), "snapshot never writes the output file")
      Rperf.stop
    end
  end
end
