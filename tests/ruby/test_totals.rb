# frozen_string_literal: true
#
# The promise behind time-delta sampling: in wall mode each thread's
# samples add up to the wall time it lived in the run, whatever it did
# (ran, blocked, waited for the GVL) and however it came to the profiler:
# the caller of start, a thread created during the run, a thread started
# before the run and blocked when it began. Each thread times its own life
# with the monotonic clock; the totals must match within a few percent
# (an accounting identity, not a speed: samples carry the time since the
# thread's previous one). Both wall-mode bugs of session 12 broke it (a
# thread first met at RESUMED lost its run after its first block).
require_relative "helper"

class TestTotals < Test::Unit::TestCase
  include RperfTestHelper

  def test_each_threads_wall_total_is_the_time_it_lived_in_the_run
    RPERF_BACKENDS.each do |backend|
      run = run_child(<<~RUBY, timeout: 60)
        def mono = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        def spin(s) = (t = mono + s; nil while mono < t)
        life = {}
        q = Queue.new
        pre = Thread.new { q.pop; spin(0.08); sleep 0.03; spin(0.04); life[:pre_end] = mono }
        sleep 0.05
        t_start = mono
        Rperf.start(backend: :#{backend}, mode: :wall, frequency: 1000)
        spin(0.05)
        made = Thread.new do
          life[:made_begin] = mono
          spin(0.05); sleep 0.05; spin(0.05)
          life[:made_end] = mono
        end
        sleep 0.1
        q << 1
        pre.join
        made.join
        spin(0.05)
        data = Rperf.stop
        t_stop = mono
        total = Hash.new(0)
        data[:aggregated_samples].each { |s| total[s[2]] += s[1] }
        main = data[:threads].find { |t| t[:name] == "main" }[:thread_seq]
        others = data[:threads].map { |t| t[:thread_seq] } - [main]
        # the created thread began later and lived shorter than the pre-existing one
        made_seq, pre_seq = others.sort_by { |s| total[s] }
        child_report(main: [total[main] / 1e9, t_stop - t_start],
                     pre: [total[pre_seq] / 1e9, life[:pre_end] - t_start],
                     made: [total[made_seq] / 1e9, life[:made_end] - life[:made_begin]],
                     threads: data[:threads].size)
      RUBY
      assert_child_ok(run, backend.to_s)
      rep = run.report
      assert_equal(3, rep["threads"], "#{backend}: #{rep}")
      %w[main pre made].each do |k|
        got, lived = rep[k]
        assert_in_delta(lived, got, lived * 0.05 + 0.01, "#{backend}: #{k}'s total against its life #{rep}")
      end
    end
  end
end
