# frozen_string_literal: true
# The profile of a process tree while it runs: a forked child of an
# inherited run writes its windows as it goes, so the root's snapshots hold
# running children (pid label, process_count), each window exactly once
# across snapshot(clear: true) calls, a child killed with SIGKILL loses only
# its current window, and nothing stays in the temp directory. Each
# scenario runs in a child Ruby with a short window interval.
require_relative "helper"

class TestLiveChildren < Test::Unit::TestCase
  include RperfTestHelper

  PRELUDE = <<~'RUBY'
    def rperf_live_child_work(s) = cpu_spin(s)
    def child_weight(data, pid)
      sets = data[:label_sets] || []
      ids = sets.each_index.select { |i| sets[i][:pid].to_s == pid.to_s }
      data[:aggregated_samples].select { |s| ids.include?(s[3]) && s[0].any? { |f| f[1] == "Object#rperf_live_child_work" } }
                               .sum { |s| s[1] }
    end
    def run_dirs = Dir.glob(File.join(Dir.tmpdir, "rperf-run-#{Process.pid}-*"))
    # a child that works until killed, or until its parent is gone
    def fork_worker
      parent = Process.pid
      fork { rperf_live_child_work(0.05) while Process.ppid == parent }
    end
  RUBY

  ENV_FAST = { "RPERF_WINDOW_SECONDS" => "0.1" }.freeze

  def run_scenario(body)
    run = run_child(PRELUDE + body, env: ENV_FAST, timeout: 120)
    assert_child_ok(run)
    run.report
  end

  def test_a_root_snapshot_holds_a_running_child
    each_combo do |backend, mode|
      rep = run_scenario(<<~RUBY)
        Rperf.start(frequency: 1000, backend: :#{backend}, mode: :#{mode})
        pid = fork_worker
        seen = nil
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
        until seen || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          d = Rperf.snapshot
          seen = d if child_weight(d, pid) > 0
          Thread.pass
        end
        Process.kill(:KILL, pid)
        Process.wait(pid)
        Rperf.stop
        child_report("seen" => !seen.nil?, "processes" => seen && seen[:process_count], "left" => run_dirs)
      RUBY
      assert(rep["seen"], "#{backend}/#{mode}: no snapshot held the running child")
      assert_equal(2, rep["processes"], "#{backend}/#{mode}")
      assert_equal([], rep["left"], "#{backend}/#{mode}")
    end
  end

  # Each window is in exactly one snapshot(clear: true) (or the stop): the
  # child's sampled time over them all is its CPU time, not more.
  def test_windows_are_taken_once
    rep = run_scenario(<<~'RUBY')
      Rperf.start(frequency: 1000, mode: :cpu)
      rd, wr = IO.pipe
      pid = fork do
        rd.close
        used = rperf_live_child_work(0.6)
        wr.write(used.to_s)
        wr.close
      end
      wr.close
      total = 0
      windows = 0
      loop do
        d = Rperf.snapshot(clear: true)
        w = child_weight(d, pid)
        windows += 1 if w > 0
        total += w
        break if Process.waitpid(pid, Process::WNOHANG)
        IO.select(nil, nil, nil, 0.05)
      end
      used = rd.read.to_f
      total += child_weight(Rperf.stop, pid)
      child_report("total" => total, "used_ns" => (used * 1e9).round, "windows" => windows, "left" => run_dirs)
    RUBY
    assert_operator(rep["windows"], :>=, 2, "the running child's time came in windows: #{rep}")
    assert_operator(rep["total"], :<=, rep["used_ns"] * 1.02 + 2_000_000, "counted once: #{rep}")
    assert_operator(rep["total"], :>=, rep["used_ns"] * 0.9, "nothing lost: #{rep}")
    assert_equal([], rep["left"])
  end

  # SIGKILL: the windows the child wrote before are in the root's result.
  def test_a_killed_child_loses_only_its_current_window
    rep = run_scenario(<<~'RUBY')
      Rperf.start(frequency: 1000, mode: :cpu)
      pid = fork_worker
      dir = Rperf.instance_variable_get(:@run)[:inherit_dir]
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
      # a whole window: written to "<name>.tmp.<random>", then renamed
      until Dir.children(dir).any? { |n| n.start_with?("#{pid}.w") && n.end_with?(".pb.gz") } ||
            Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        IO.select(nil, nil, nil, 0.02)
      end
      Process.kill(:KILL, pid)
      Process.wait(pid)
      data = Rperf.stop
      child_report("weight" => child_weight(data, pid), "processes" => data[:process_count], "left" => run_dirs)
    RUBY
    assert_operator(rep["weight"], :>, 0, rep.inspect)
    assert_equal(2, rep["processes"])
    assert_equal([], rep["left"])
  end

  # Servers stop in their SIGTERM trap (Puma's after_stopped hook): a
  # snapshot and a stop there merge the children too (no `require` in a
  # signal handler, which raises ThreadError).
  def test_snapshot_and_stop_in_a_signal_handler_merge_the_children
    rep = run_scenario(<<~'RUBY')
      out = File.join(Dir.mktmpdir, "out.pb.gz")
      Rperf.start(frequency: 1000, mode: :cpu, output: out)
      pid = fork { rperf_live_child_work(0.05) }
      Process.wait(pid)
      got = {}
      trap("TERM") do
        got["snapshot"] = Rperf.snapshot[:process_count]
        got["stop"] = Rperf.stop[:process_count]
      rescue Exception => e # rubocop:disable Lint/RescueException
        got["error"] = "#{e.class}: #{e.message}"
      end
      Process.kill(:TERM, Process.pid)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
      IO.select(nil, nil, nil, 0.01) until got.size >= 2 || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      child_report(got.merge("written" => File.size?(out).to_i, "left" => run_dirs))
    RUBY
    assert_nil(rep["error"], rep.inspect)
    assert_equal(2, rep["snapshot"], rep.inspect)
    assert_equal(2, rep["stop"], rep.inspect)
    assert_operator(rep["written"], :>, 0)
    assert_equal([], rep["left"])
  end

  # Without inherit (false), nothing is written and nothing merged.
  def test_a_child_of_a_run_without_inherit_writes_no_window
    rep = run_scenario(<<~'RUBY')
      Rperf.start(frequency: 1000, inherit: false)
      pid = fork { rperf_live_child_work(0.3) }
      Process.wait(pid)
      data = Rperf.stop
      child_report("weight" => child_weight(data, pid), "left" => run_dirs)
    RUBY
    assert_equal(0, rep["weight"])
    assert_equal([], rep["left"])
  end
end
