# frozen_string_literal: true
#
# The EINTR matrix (docs/backends.md, "EINTR"): which blocking calls made by
# C code WHILE HOLDING THE GVL return EINTR or return early under each
# backend and mode at 10 kHz, measured with the test extension
# tests/ext/eintr_probe.c (each call kind repeated for 200 ms, 5 ms
# timeouts: entries into the calls, where :holder's rare EINTRs happen, are
# fixed per run, so short calls measure the per-call rate). Asserted:
#   * :nanosleep sends no signal into main-Ractor threads: zero EINTR and
#     zero early returns for every call (:holder, which signals no holder
#     blocked in a call: at most 1 call in 20 interrupted, zero early
#     returns), on the main thread and on a thread born during the run
#     (unknown to the engine until RESUMED), also (nanosleep) while another
#     Ractor runs and is signalled;
#   * :signal: the calls POSIX keeps free of EINTR under SA_RESTART (read on
#     a pipe without timeout, pthread_mutex_timedlock, pthread_cond_timedwait)
#     never fail; the rest are recorded and printed, and nanosleep(2) is
#     interrupted (the probe really blocks with the GVL while ticks arrive);
#   * Ruby's own blocking calls (sleep, IO#read, Queue#pop(timeout:),
#     Process.wait, IO.select) never raise EINTR nor return before the
#     requested time, under both backends and modes.
require_relative "helper"
require "etc"

PROBE_SO = File.join(File.dirname(RPERF_BUILD_LIB), "tests", "ext", "eintr_probe.so")
require PROBE_SO

class TestEintr < Test::Unit::TestCase
  include RperfTestHelper

  TOTAL_MS = 200
  EACH_MS = 5
  # POSIX: never EINTR with SA_RESTART (read without timeout) or at all
  # (pthread_mutex_timedlock, pthread_cond_timedwait).
  NEVER_EINTR = %w[read_pipe mutex_timedlock cond_timedwait].freeze

  # {kind => [calls, eintr, early]} for one backend/mode, probing on the
  # main thread (where: :main) or on a thread born during the run.
  def matrix(backend, mode, where)
    Rperf.start(backend: backend, mode: mode, frequency: 10_000)
    row = EintrProbe.kinds.to_h do |k|
      r = where == :main ? EintrProbe.run(k, TOTAL_MS, EACH_MS) : Thread.new { EintrProbe.run(k, TOTAL_MS, EACH_MS) }.value
      [k, r]
    end
    data = Rperf.stop
    assert_operator(data[:sampling_count], :>, 0, "#{backend}/#{mode}: sampled")
    @overruns = data[:timer_overruns] || 0
    row
  end

  def show(title, row)
    $stdout.puts format("%-28s %s", title, row.map { |k, (c, e, x)| "#{k}=#{e}/#{x}/#{c}" }.join(" "))
  end

  def test_nanosleep_and_holder_never_interrupt_main_ractor_c_code
    %i[nanosleep holder].each do |backend|
      RPERF_MODES.each do |mode|
        %i[main thread].each do |where|
          row = matrix(backend, mode, where)
          show("#{backend}/#{mode}/#{where} eintr/early/calls", row)
          row.each do |kind, (calls, eintr, early)|
            assert_operator(calls, :>, 0, "#{kind} ran")
            assert_equal(0, early, "#{backend}/#{mode}: #{kind} returned early")
            next if backend == :holder

            assert_equal(0, eintr, "#{backend}/#{mode}: #{kind} #{where == :main ? "on the main thread" : "on a new thread"} " \
                                   "was interrupted (#{calls} calls)")
          end
          next unless backend == :holder

          # :holder signals a holder only when it ran during the last
          # interval and is not in a blocking call now: a call can see EINTR
          # only when it starts within microseconds of that check (under
          # :signal nearly every call of these kinds is interrupted). On a
          # busy machine the timer thread can be preempted between its
          # check and its signal, which makes the check stale; such delays
          # show as periods it missed (timer_overruns), each allowed one.
          eintr = row.sum { |_, (_, e, _)| e }
          calls = row.sum { |_, (c, _, _)| c }
          assert_operator(eintr, :<=, calls / 20 + @overruns,
                          "#{backend}/#{mode}/#{where}: #{eintr} of #{calls} calls interrupted (#{@overruns} periods missed)")
        end
      end
    end
  end

  def test_signal_matrix
    RPERF_MODES.each do |mode|
      row = matrix(:signal, mode, :main)
      show("signal/#{mode}/main eintr/early/calls", row)
      NEVER_EINTR.each do |kind|
        calls, eintr, = row.fetch(kind)
        assert_equal(0, eintr, "signal/#{mode}: #{kind} must not see EINTR (#{calls} calls)")
      end
      assert_operator(row["nanosleep"][1], :>, 0,
                      "signal/#{mode}: the probe blocks with the GVL held and ticks reach it")
    end
  end

  # Start's bootstrap signal (one per runnable task, for GVL holders of other
  # Ractors) leaves the main Ractor's threads out: a thread running C code
  # outside the GVL at that instant (runnable, like the spinner here) gets
  # no signal from any backend. Under RUBY_MN_THREADS=1 the main Ractor's
  # threads share native threads with other Ractors, so the bootstrap
  # cannot leave them out (docs/backends.md) and this is not asserted.
  def test_start_sends_no_bootstrap_signal_to_main_ractor_threads
    omit("RUBY_MN_THREADS=1: main-Ractor threads are not left out") if ENV["RUBY_MN_THREADS"] == "1"
    Rperf.backends.each do |backend|
      spinner = Thread.new { EintrProbe.spin_without_gvl }
      Thread.pass until EintrProbe.spinning?
      # read before stop: stop discards pending instances of the signal
      begin
        Rperf.start(backend: backend, frequency: 1000)
      ensure
        EintrProbe.stop_spin
        pending = spinner.value
        Rperf.stop
      end
      assert_equal([], pending, "#{backend}: signals sent to a main-Ractor thread outside the GVL at start")
    end
  end

  # A bootstrap signal is re-sent until the task's handler answers
  # (docs/backends.md, "Bootstrap"); a helper pthread that blocks every
  # signal never answers, and must get the one signal only, not one per
  # re-send round queued up on it. (Stop discards pending instances: the
  # count is read before.)
  def test_a_thread_blocking_the_tick_signal_gets_one_bootstrap_signal
    Rperf.backends.each do |backend|
      EintrProbe.helper_start
      begin
        Rperf.start(backend: backend, frequency: 1000)
        sleep(0.3) # re-send rounds run every 2 ms for at most 100 ms after start
      ensure
        queued = EintrProbe.helper_stop
        Rperf.stop
      end
      assert_operator(queued, :<=, 1, "#{backend}: tick signals queued on a thread that blocks them")
    end
  end

  # The fixed case: a Ractor runs (its threads get tgkill ticks), and a
  # main-Ractor thread born during the run blocks in C code with the GVL.
  def test_nanosleep_with_another_ractor_signals_only_it
    run = run_child(<<~RUBY, timeout: 120)
      Warning[:experimental] = false
      require #{PROBE_SO.dump}
      def rperf_eintr_spin(s) = cpu_spin(s)
      r = Ractor.new { Ractor.main << :go; rperf_eintr_spin(0.8); :done }
      Ractor.receive
      Rperf.start(backend: :nanosleep, mode: :wall, frequency: 10_000)
      rows = %w[nanosleep poll sem_timedwait].to_h { |k| [k, Thread.new { EintrProbe.run(k, 200, 20) }.value] }
      ractor_value(r)
      data = Rperf.stop
      w = data[:aggregated_samples].select { |s| s[0].any? { |f| f[1] == "Object#rperf_eintr_spin" } }
      child_report(rows: rows, ractor_weight: w.sum { |s| s[1] })
    RUBY
    assert_child_ok(run)
    rep = run.report
    assert_operator(rep["ractor_weight"], :>, 0, "the other Ractor is sampled (signalled): #{rep}")
    rep["rows"].each do |kind, (calls, eintr, early)|
      assert_equal([0, 0], [eintr, early], "#{kind} in a main-Ractor thread (#{calls} calls): #{rep}")
    end
  end

  def assert_not_early(what, requested_ns)
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
    yield
    took = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - t0
    assert_operator(took, :>=, requested_ns, "#{what} returned early")
  end

  def ruby_blocking_calls(what)
    q = Queue.new
    r, w = IO.pipe
    4.times do
      assert_not_early("#{what}: sleep", 20_000_000) { sleep(0.02) }
      assert_not_early("#{what}: Queue#pop(timeout:)", 20_000_000) { assert_nil(q.pop(timeout: 0.02)) }
      assert_not_early("#{what}: IO.select", 20_000_000) { assert_nil(IO.select([r], nil, nil, 0.02)) }
      writer = Thread.new { sleep(0.02); w.write("x") }
      assert_not_early("#{what}: IO#read", 20_000_000) { assert_equal("x", r.read(1)) }
      writer.join
      assert_not_early("#{what}: Process.wait", 20_000_000) do
        pid = spawn("sleep", "0.02")
        assert_equal(pid, Process.wait(pid))
        assert_predicate($?, :success?)
      end
    end
  ensure
    r&.close
    w&.close
  end

  def test_ruby_blocking_calls_are_not_interrupted
    each_combo do |backend, mode|
      what = "#{backend}/#{mode}"
      Rperf.start(backend: backend, mode: mode, frequency: 10_000)
      # on the main thread and on a thread born during the run
      ruby_blocking_calls("#{what} main")
      Thread.new { ruby_blocking_calls("#{what} thread") }.join
      # Errno::EINTR would have raised out of the calls above
      data = Rperf.stop
      assert_operator(data[:sampling_count], :>, 0, "#{what}: sampled")
    end
  end
end
