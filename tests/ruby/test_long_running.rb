# frozen_string_literal: true
# Long-running servers: what one snapshot window used is released by
# snapshot(clear: true) (label sets, frames, so Ruby can collect the code
# and values they pinned), and distinct label sets are capped per window
# (folded into an overflow set, never an exception into the application).
require_relative "helper"

class TestLongRunning < Test::Unit::TestCase
  include RperfTestHelper

  def non_empty_sets(res)
    (res[:label_sets] || []).count { |h| !h.empty? }
  end

  def test_snapshot_clear_releases_label_sets_nobody_uses
    Rperf.start(frequency: 1000)
    weak = ObjectSpace::WeakMap.new
    # window 1: 2,000 distinct sets (distinct URLs), values only we hold
    2000.times do |i|
      v = "/users/#{i}".freeze
      weak[v] = true if i < 100
      Rperf.label(path: v) { }
    end
    # a result lists only the sets its samples use; the others read as {}
    assert_operator(Rperf.snapshot(clear: true)[:label_sets].size, :>=, 2001, "2,000 sets interned")
    # window 2: a few sets; the closed window's sets are quarantined (kept
    # for samples aggregated late), then released at the next clear
    Rperf.label(path: "steady") { rperf_work_a(0.005) }
    Rperf.snapshot(clear: true)
    Rperf.label(path: "steady") { rperf_work_a(0.005) }
    assert_operator(non_empty_sets(Rperf.snapshot(clear: true)), :<=, 10,
                    "released sets are gone from the table")
    # their ids are free: 2,000 new sets take them instead of growing the table
    2000.times { |i| Rperf.label(path: "/orders/#{i}") { } }
    assert_operator(Rperf.snapshot(clear: true)[:label_sets].size, :<=, 2010, "freed ids reused")
    GC.start(full_mark: true, immediate_sweep: true)
    GC.start
    alive = weak.keys.size
    Rperf.stop
    assert_operator(alive, :<, 100, "label values of released sets can be collected")
  end

  def test_the_current_set_survives_a_clear
    Rperf.start(frequency: 1000)
    Rperf.label(tenant: "a") do
      Rperf.snapshot(clear: true)
      Rperf.snapshot(clear: true)
      Rperf.label(req: "1") { assert_equal({ tenant: "a", req: "1" }, Rperf.labels) }
      assert_equal({ tenant: "a" }, Rperf.labels)
      rperf_work_a(0.02)
      res = Rperf.snapshot(clear: true)
      ids = rperf_samples_with(res, "Object#rperf_work_a").map { |s| s[3] }.uniq
      assert_equal([{ tenant: "a" }], ids.map { |i| res[:label_sets][i] })
    end
    Rperf.stop
  end

  def test_label_sets_are_capped_per_window_with_an_overflow_set
    Rperf.start(frequency: 1000, max_label_sets: 100)
    assert_nothing_raised do
      500.times { |i| Rperf.label(path: "/p/#{i}") { } }
    end
    Rperf.label(path: "/late/1") { rperf_work_a(0.02) }
    res = Rperf.snapshot(clear: true)
    assert_equal(401, res[:label_sets_overflowed])
    assert_include(res[:label_sets], { rperf_label_overflow: true })
    late = rperf_samples_with(res, "Object#rperf_work_a").map { |s| res[:label_sets][s[3]] }.uniq
    assert_equal([{ rperf_label_overflow: true }], late)
    # the next window has room again
    Rperf.label(path: "/fresh") { rperf_work_a(0.02) }
    res = Rperf.stop
    assert_equal(0, res[:label_sets_overflowed])
    fresh = rperf_samples_with(res, "Object#rperf_work_a").map { |s| res[:label_sets][s[3]] }.uniq
    assert_equal([{ path: "/fresh" }], fresh)
  end

  def test_max_label_sets_is_validated
    [0, -1, 1 << 24, 1.5, "10", nil].each do |bad|
      e = assert_raise(ArgumentError) { Rperf.start(max_label_sets: bad) }
      assert_match(/max_label_sets must be an Integer between 1 and \d+/, e.message)
      assert_false(Rperf.running?)
    end
  end

  # Frames of the closed window are unpinned: code that is gone (a class
  # made at run time, then dropped) can be collected after a clear.
  def test_snapshot_clear_unpins_frames
    run = run_child(<<~RUBY, timeout: 120)
      weak = ObjectSpace::WeakMap.new
      Rperf.start(frequency: 10_000, mode: :wall)
      make = lambda do
        k = Class.new { def hot = cpu_spin(0.05) }
        weak[k] = true
        k.new.hot
        nil
      end
      make.call
      first = Rperf.snapshot(clear: true)
      seen = first[:aggregated_samples].any? { |f, *| f.any? { |fr| fr[1].end_with?("#hot") } }
      Rperf.snapshot(clear: true)
      4.times { GC.start(full_mark: true, immediate_sweep: true) }
      child_report("seen" => seen, "alive" => weak.keys.size)
      Rperf.stop
    RUBY
    assert_child_ok(run)
    assert_equal({ "seen" => true, "alive" => 0 }, run.report)
  end
end
