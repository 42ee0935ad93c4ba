# frozen_string_literal: true
#
# An idle profiled process: while no thread of any Ractor holds a GVL, the
# timer-thread backends' tick thread (:holder, the default, and :nanosleep)
# parks and the worker waits longer, so a
# server left profiled between requests costs almost nothing ("nearly
# free to leave on"). And the first thread that takes a GVL again
# (main thread, another thread, another Ractor's) wakes the ticks at once:
# its work is sampled at the full rate, not after the tick thread's
# watchdog. Each scenario runs in a child Ruby so its own threads are the
# only ones counted.
require_relative "helper"
require "etc"

class TestIdle < Test::Unit::TestCase
  include RperfTestHelper

  # Voluntary context switches of the profiler's own threads (a wake-up
  # each: a tick, a futex or condition-variable wait that ended).
  WAKES = <<~RUBY
    def rperf_wakes
      Dir["/proc/self/task/*"].each_with_object(Hash.new(0)) do |d, h|
        comm = File.read("\#{d}/comm").strip rescue next
        n = File.read("\#{d}/status")[/^voluntary_ctxt_switches:\\s+(\\d+)/, 1].to_i rescue next
        h[comm] += n if comm.start_with?("rperf-")
      end
    end
  RUBY

  TIMER_BACKENDS = %i[holder nanosleep].freeze

  # Child code: stop, and report for each key the number of raw samples
  # with a frame of the given name.
  STOP_AND_COUNT = <<~RUBY
    def rperf_stop_and_count(**names)
      data = Rperf.stop
      child_report(**names.transform_values { |n| data[:raw_samples].count { |s| s[0].any? { |f| f[1] == n } } })
    end
  RUBY

  # The child's report[key] is at least `min`.
  def assert_child_count(run, key, min, what, msg)
    assert_child_ok(run, what)
    assert_operator(run.report[key], :>=, min, "#{what}: #{msg} #{run.report}")
  end

  def each_backend_and_mode(&block)
    TIMER_BACKENDS.product(%i[wall cpu]).each(&block)
  end

  def test_an_idle_process_wakes_the_profiler_rarely
    each_backend_and_mode do |backend, mode|
      run = run_child(<<~RUBY, timeout: 60)
        #{WAKES}
        q = Queue.new
        blocked = 3.times.map { Thread.new { q.pop } }
        Rperf.start(backend: :#{backend}, frequency: 1000, mode: :#{mode})
        sleep 0.3                      # every thread blocked: nothing to tick
        a = rperf_wakes
        sleep 1.0
        b = rperf_wakes
        3.times { q << 1 }
        blocked.each(&:join)
        Rperf.stop
        child_report(timer: b["rperf-timer"] - a["rperf-timer"],
                     worker: b["rperf-worker"] - a["rperf-worker"])
      RUBY
      what = "#{backend} #{mode}"
      assert_child_ok(run, what)
      rep = run.report
      # ticking: ~1,000 wake-ups in that second; parked: the watchdog's 1
      assert_operator(rep["timer"], :<, 100, "#{what}: the tick thread parks while idle #{rep}")
      # every 50 ms: 20; backing off while nothing is recorded: ~3
      assert_operator(rep["worker"], :<, 10, "#{what}: the worker backs off while idle #{rep}")
    end
  end

  # After 0.3 s with every thread blocked (long enough to park), work in
  # the main thread, in a new thread and in another Ractor is sampled at
  # about 1 kHz. A missed wake would leave the ticks parked until the
  # watchdog (1 s): no sample at all in 0.25 s of work.
  def test_work_after_an_idle_spell_is_sampled_at_the_full_rate
    each_backend_and_mode do |backend, mode|
      run = run_child(<<~RUBY, timeout: 120)
        Warning[:experimental] = false
        def rperf_idle_main(s) = cpu_spin(s)
        def rperf_idle_thread(s) = cpu_spin(s)
        r = Ractor.new do
          Ractor.receive
          x = 0
          t = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + 0.25
          x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < t
          x
        end
        Rperf.start(backend: :#{backend}, frequency: 1000, mode: :#{mode}, aggregate: false)
        sleep 0.3
        rperf_idle_main(0.25)
        sleep 0.3
        Thread.new { rperf_idle_thread(0.25) }.join
        sleep 0.3
        r.send(1)
        ractor_value(r)
        data = Rperf.stop
        count = ->(name) { data[:raw_samples].count { |s| s[0].any? { |f| f[1] == name } } }
        ractor_seqs = data[:threads].select { |t| t[:ractor_id].to_i > 1 }.map { |t| t[:thread_seq] }
        child_report(main: count.("Object#rperf_idle_main"), thread: count.("Object#rperf_idle_thread"),
                     ractor: data[:raw_samples].count { |s| ractor_seqs.include?(s[2]) })
      RUBY
      what = "#{backend} #{mode}"
      assert_child_ok(run, what)
      rep = run.report
      # ~250 each at 1 kHz; a quarter of that leaves room for a loaded machine
      %w[main thread ractor].each do |k|
        assert_operator(rep[k], :>=, 60, "#{what}: #{k} sampled after an idle spell #{rep}")
      end
    end
  end

  # A bursty server: each request is a short burst of Ruby work (under a
  # period) after an idle gap long enough for the tick thread to park.
  # Ticking must restart at a random phase of the period after the wake-up,
  # so a burst is sampled with probability burst/period (~0.5 here: ~30 of
  # 60 bursts). Restarting exactly one period after the wake-up would never
  # land in a burst: its time would go to a later sample or to the thread's
  # root frame.
  def test_short_bursts_after_idle_gaps_are_sampled
    (TIMER_BACKENDS + [:signal]).product(%i[wall cpu]).each do |backend, mode|
      run = run_child(<<~RUBY, timeout: 60)
        #{STOP_AND_COUNT}
        def rperf_burst(s) = cpu_spin(s)
        Rperf.start(backend: :#{backend}, frequency: 1000, mode: :#{mode}, aggregate: false)
        60.times do
          sleep 0.02 # over the 10 ms the tick thread idles before it parks
          rperf_burst(0.0005)
        end
        rperf_stop_and_count(bursts: "Object#rperf_burst")
      RUBY
      assert_child_count(run, "bursts", 5, "#{backend} #{mode}", "short bursts sampled")
    end
  end

  # The tick thread asks the scheduler for a 100 us slice, so it can
  # preempt a busy thread whose CPU it shares (backends/timer_thread.c,
  # ask_short_slice), and keeps the nice value it inherits: a niced process
  # stays niced. The slice is read where the kernel shows it (se.slice in
  # /proc/<tid>/sched) and honours the request (Linux 6.12+).
  def test_the_tick_thread_asks_for_a_short_slice_and_stays_niced
    TIMER_BACKENDS.each do |backend|
      run = run_child(<<~RUBY, timeout: 60)
        Process.setpriority(Process::PRIO_PROCESS, 0, 5) # this thread; new threads inherit it
        Rperf.start(backend: :#{backend}, frequency: 1000)
        dir = Dir["/proc/self/task/*"].find { |d| (File.read("\#{d}/comm").strip rescue "") == "rperf-timer" }
        nice = File.read("\#{dir}/stat").split(")").last.split[16].to_i
        sched = (File.read("\#{dir}/sched") rescue "")
        slice = sched.include?("se.slice") ? sched[/^se\\.slice\\s*:\\s*(\\d+)/, 1].to_i : nil
        Rperf.stop
        child_report(nice: nice, slice: slice)
      RUBY
      assert_child_ok(run, backend)
      rep = run.report
      assert_equal(5, rep["nice"], "#{backend}: the tick thread keeps the process's nice value #{rep}")
      kernel = Etc.uname[:release].split(".").first(2).map(&:to_i)
      next if rep["slice"].nil? || (kernel <=> [6, 12]).negative?

      assert_equal(100_000, rep["slice"], "#{backend}: the tick thread's slice #{rep}")
    end
  end

  # The caller of start holds the GVL from before the start: no RESUMED
  # told the backend. Right after start it sits in a C call that keeps the
  # GVL and takes no job (a sort of 500,000 Floats: no safepoint), so
  # every trigger stays unconsumed, as in an idle process. The tick thread
  # must still see a holder and keep ticking; had it parked, nothing would
  # wake it when the call returns (no thread resumes), and the work after
  # the call would wait for the watchdog (1 s): about no sample in 0.25 s.
  def test_a_gvl_holding_call_right_after_start_keeps_the_ticks
    each_backend_and_mode do |backend, mode|
      run = run_child(<<~RUBY, timeout: 60)
        #{STOP_AND_COUNT}
        def rperf_after_sort(s) = cpu_spin(s)
        floats = Array.new(500_000) { rand }
        Rperf.start(backend: :#{backend}, frequency: 1000, mode: :#{mode}, aggregate: false)
        floats.sort!
        rperf_after_sort(0.25)
        rperf_stop_and_count(after: "Object#rperf_after_sort")
      RUBY
      assert_child_count(run, "after", 60, "#{backend} #{mode}", "work after the call sampled")
    end
  end
end
