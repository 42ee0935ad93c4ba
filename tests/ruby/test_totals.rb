# frozen_string_literal: true
#
# The promise behind time-delta sampling: in wall mode each thread's
# samples add up to the wall time it lived in the run, whatever it did
# (ran, blocked, waited for the GVL) and however it came to the profiler:
# the caller of start, a thread created during the run, a thread started
# before the run and blocked when it began. Each thread times its own life
# with the monotonic clock; the totals must match within a few percent
# (an accounting identity, not a speed: samples carry the time since the
# thread's previous one). It breaks when a thread first met at RESUMED
# loses its run after its first block.
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

  # Threads still off the GVL when a window closes get their time up to the
  # close, on the call that released the GVL: a pool thread parked since
  # before the start and never woken (it used to be missing from the
  # profile altogether), and a thread that blocks during the run and is
  # still blocked at the close. Per window of snapshot(clear: true) too:
  # every thread's total is the window's duration.
  def test_threads_off_the_gvl_at_a_close_get_their_time_up_to_it
    RPERF_BACKENDS.each do |backend|
      run = run_child(<<~RUBY, timeout: 60)
        def mono = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        def spin(s) = (t = mono + s; nil while mono < t)
        def park(q) = q.pop
        def nap(q) = q.pop
        pool = Queue.new
        parked = Thread.new { park(pool) }
        Thread.pass until parked.stop?
        Rperf.start(backend: :#{backend}, mode: :wall, frequency: 1000)
        later = Queue.new
        napper = Thread.new { spin(0.02); nap(later) }
        spin(0.1)
        windows = 3.times.map { spin(0.08); Rperf.snapshot(clear: true) }
        spin(0.05)
        windows << Rperf.stop
        # who is who: the method each thread blocks in
        seqs = {}
        windows.last[:aggregated_samples].each do |frames, _, seq, _|
          labels = frames.map { |f| f[1] }
          seqs[seq] = "parked" if labels.include?("Object#park")
          seqs[seq] = "napper" if labels.include?("Object#nap")
        end
        windows.last[:threads].each { |t| seqs[t[:thread_seq]] ||= t[:name] }
        report = windows.map do |data|
          total = Hash.new(0)
          parked_on = Hash.new(0)
          data[:aggregated_samples].each do |frames, w, seq, _|
            total[seq] += w
            leaf, caller = frames[0][1], frames[1]&.[](1)
            parked_on[seq] += w if leaf == "[GVL blocked]" && caller == "Thread::Queue#pop"
          end
          { "duration" => data[:duration_ns], "total" => total, "parked_on" => parked_on }
        end
        pool << 1; later << 1
        parked.join; napper.join
        child_report(windows: report, threads: seqs)
      RUBY
      assert_child_ok(run, backend.to_s)
      rep = run.report
      assert_equal(3, rep["threads"].size, "#{backend}: #{rep}")
      main = rep["threads"].key("main")
      napper = rep["threads"].key("napper")
      parked = rep["threads"].key("parked")
      assert(main && napper && parked, "#{backend}: #{rep}")
      rep["windows"].each_with_index do |w, i|
        dur = w["duration"]
        rep["threads"].each_key do |seq|
          next if i.zero? && seq == napper # it starts inside the first window
          got = w["total"][seq] || 0
          assert_in_delta(dur, got, dur * 0.05 + 2_000_000,
                          "#{backend}: window #{i}, thread #{seq}'s total against the window #{rep}")
        end
        # the parked thread spends every window blocked in Queue#pop, the
        # napper every window after the first
        assert_operator(w["parked_on"][parked] || 0, :>=, dur * 0.9,
                        "#{backend}: window #{i}, the parked thread's block #{rep}")
        next if i.zero?

        assert_operator(w["parked_on"][napper] || 0, :>=, dur * 0.9,
                        "#{backend}: window #{i}, the napper's block #{rep}")
      end
    end
  end

  # cpu mode's version: each pool thread's samples add up to the CPU time
  # it burned. The pool threads sleep on Queue#pop for far longer than a
  # quarter interval between jobs, and are woken by the main thread: the
  # whole sleep is idle for them (no CPU clock reading at the wake), their
  # jobs' CPU is all counted, on the job's stack. Skipped where main-Ractor
  # threads share native threads (M:N): a Ruby thread has no CPU clock then.
  def test_each_pool_threads_cpu_total_is_the_cpu_it_burned
    omit("no per-thread CPU clock under M:N threads") if ENV["RUBY_MN_THREADS"] == "1"
    RPERF_BACKENDS.each do |backend|
      run = run_child(<<~RUBY, timeout: 60)
        def cpu = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
        def rperf_pool_job(s) = (t = cpu + s; nil while cpu < t)
        qs = Array.new(3) { Queue.new }
        burned = {}
        Rperf.start(backend: :#{backend}, mode: :cpu, frequency: 1000)
        pool = qs.each_with_index.map do |q, i|
          Thread.new do
            Thread.current.name = "pool\#{i}"
            c0 = cpu
            while (job = q.pop)
              rperf_pool_job(job)
            end
            burned["pool\#{i}"] = cpu - c0
          end
        end
        12.times do
          qs.each { |q| q << 0.004 }
          sleep 0.01
        end
        qs.each { |q| q << nil }
        pool.each(&:join)
        data = Rperf.stop
        total = Hash.new(0)
        on_job = Hash.new(0)
        data[:aggregated_samples].each do |s|
          total[s[2]] += s[1]
          on_job[s[2]] += s[1] if s[0].any? { |f| f[1] == "Object#rperf_pool_job" }
        end
        seq = data[:threads].to_h { |t| [t[:name], t[:thread_seq]] }
        child_report(burned.to_h { |name, c| [name, [total[seq[name]] / 1e9, on_job[seq[name]] / 1e9, c]] })
      RUBY
      assert_child_ok(run, backend.to_s)
      rep = run.report
      assert_equal(%w[pool0 pool1 pool2], rep.keys.sort, "#{backend}: #{rep}")
      rep.each do |name, (got, on_job, burned)|
        assert_in_delta(burned, got, burned * 0.1 + 0.002, "#{backend}: #{name}'s total against its CPU #{rep}")
        assert_operator(on_job, :>=, got * 0.8, "#{backend}: #{name}'s CPU is on its jobs #{rep}")
      end
    end
  end
end
