# frozen_string_literal: true
# Rperf::Window: the profile of one span of a running profiler, for
# concurrent readers (pprof scrapes): it holds exactly what ran during it,
# whatever clearing snapshots others take meanwhile, leaves their windows
# alone, ends at a stop, and includes running children's windows.
require_relative "helper"
require "rperf/window"

def rperf_before_window(s) = cpu_spin(s)
def rperf_in_window(s) = cpu_spin(s)
def rperf_after_clear(s) = cpu_spin(s)

class TestWindow < Test::Unit::TestCase
  include RperfTestHelper

  def teardown
    Rperf.stop if Rperf.running?
  end

  def weight(data, name) = rperf_weight_with(data, "Object##{name}")

  def test_a_window_holds_what_ran_during_it_across_a_users_clear
    Rperf.start(frequency: 1000)
    rperf_before_window(0.05)
    w = Rperf::Window.open
    rperf_in_window(0.05)
    user = Rperf.snapshot(clear: true)
    rperf_after_clear(0.05)
    data = w.close
    after = Rperf.snapshot(clear: true)
    assert_equal(0, weight(data, "rperf_before_window"), rperf_describe(data))
    assert_operator(weight(data, "rperf_in_window"), :>, 0, rperf_describe(data))
    assert_operator(weight(data, "rperf_after_clear"), :>, 0, rperf_describe(data))
    # the user's windows are untouched by the reader
    assert_operator(weight(user, "rperf_before_window"), :>, 0)
    assert_operator(weight(user, "rperf_in_window"), :>, 0)
    assert_equal(0, weight(user, "rperf_after_clear"))
    assert_operator(weight(after, "rperf_after_clear"), :>, 0)
    # the window's weights are the same work the user saw, not more
    assert_equal(weight(user, "rperf_in_window"), weight(data, "rperf_in_window"))
    assert_equal(weight(after, "rperf_after_clear"), weight(data, "rperf_after_clear"))
  end

  def test_concurrent_windows_are_independent
    Rperf.start(frequency: 1000)
    a = Rperf::Window.open
    rperf_before_window(0.04)
    b = Rperf::Window.open
    rperf_in_window(0.04)
    da = a.close
    db = b.close
    assert_operator(weight(da, "rperf_before_window"), :>, 0)
    assert_operator(weight(da, "rperf_in_window"), :>, 0)
    assert_equal(0, weight(db, "rperf_before_window"))
    assert_operator(weight(db, "rperf_in_window"), :>, 0)
    assert_equal(:cpu, db[:mode])
    assert_kind_of(Array, db[:label_sets])
  end

  def test_a_window_ends_at_the_stop
    Rperf.start(frequency: 1000)
    w = Rperf::Window.open
    rperf_in_window(0.03)
    stopped = Rperf.stop
    data = w.close
    assert_equal(weight(stopped, "rperf_in_window"), weight(data, "rperf_in_window"))
  end

  def test_labels_survive_the_difference
    Rperf.start(frequency: 1000)
    w = Rperf::Window.open
    Rperf.label(req: "a") { rperf_in_window(0.03) }
    data = w.close
    id = data[:label_sets].index({ req: "a" })
    assert_not_nil(id, data[:label_sets].inspect)
    assert(rperf_samples_with(data, "Object#rperf_in_window").all? { |s| s[3] == id })
  end

  def test_open_without_a_run_raises
    error = assert_raise(RuntimeError) { Rperf::Window.open }
    assert_match(/not running/, error.message)
  end

  # A window opened before the run's first fork (no children's directory
  # yet) still holds what the children wrote while it was open.
  def test_a_window_opened_before_the_first_fork_holds_the_children
    run = run_child(<<~'RUBY', env: { "RPERF_WINDOW_SECONDS" => "0.1" })
      require "rperf/window"
      def rperf_child_in_window(s) = cpu_spin(s)
      Rperf.start(frequency: 1000)
      w = Rperf::Window.open
      parent = Process.pid
      pid = fork { rperf_child_in_window(0.05) while Process.ppid == parent }
      got = 0
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
      while got.zero? && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
        probe = Rperf::Window.open
        IO.select(nil, nil, nil, 0.3)
        got = rperf_weight_with(probe.close, "Object#rperf_child_in_window")
      end
      data = w.close
      Process.kill(:KILL, pid)
      Process.wait(pid)
      Rperf.stop
      child_report("probe" => got, "window" => rperf_weight_with(data, "Object#rperf_child_in_window"))
    RUBY
    assert_child_ok(run)
    assert_operator(run.report["probe"], :>, 0, run.describe)
    assert_operator(run.report["window"], :>=, run.report["probe"], run.describe)
  end

  def test_a_window_holds_a_running_childs_windows
    run = run_child(<<~'RUBY', env: { "RPERF_WINDOW_SECONDS" => "0.1" })
      require "rperf/window"
      def rperf_child_in_window(s) = cpu_spin(s)
      Rperf.start(frequency: 1000)
      parent = Process.pid
      pid = fork { rperf_child_in_window(0.05) while Process.ppid == parent }
      w = Rperf::Window.open
      got = 0
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
      while got.zero? && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
        IO.select(nil, nil, nil, 0.1)
        Rperf.snapshot(clear: true) # another reader clears meanwhile
        probe = Rperf::Window.open
        IO.select(nil, nil, nil, 0.3)
        got = rperf_weight_with(probe.close, "Object#rperf_child_in_window")
      end
      data = w.close
      Process.kill(:KILL, pid)
      Process.wait(pid)
      Rperf.stop
      child_report("probe" => got, "window" => rperf_weight_with(data, "Object#rperf_child_in_window"),
                   "processes" => data[:process_count])
    RUBY
    assert_child_ok(run)
    assert_operator(run.report["probe"], :>, 0, run.describe)
    assert_operator(run.report["window"], :>=, run.report["probe"], run.describe)
    assert_equal(2, run.report["processes"], run.describe)
  end
end
