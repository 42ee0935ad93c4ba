# frozen_string_literal: true
#
# Ractor-aware profiling: threads in every Ractor are sampled and attributed
# (both backends, both modes), threads already running before start are
# reached, GC inside a Ractor is charged to that Ractor's thread, labels
# work inside Ractors, and the per-thread table names each thread's Ractor.
# Each scenario runs in a child Ruby (Ractors cannot be torn down in-process).
require_relative "helper"

class TestRactors < Test::Unit::TestCase
  include RperfTestHelper

  PRELUDE = <<~RUBY
    Warning[:experimental] = false
    def rperf_now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    8.times { |i| eval("def rperf_ractor_work_\#{i}(s) = cpu_spin(s)") }
    8.times { |i| eval("def rperf_ractor_units_\#{i}(n) = rperf_fixed_work(n)") }

    # A fixed amount of CPU work (deterministic, unlike a CPU-clock deadline:
    # under M:N a native thread's CPU clock also counts the other Ruby
    # threads that ran on it).
    def rperf_fixed_work(units)
      x = 0
      units.times { 2000.times { |i| x += i } }
      x
    end

    # units of rperf_fixed_work per second of CPU, measured on this thread
    def rperf_units_per_second
      t0 = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
      rperf_fixed_work(200)
      200 / (Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t0)
    end
    def rperf_ractor_alloc(s) = rperf_alloc_work(s)
    def rperf_ractor_pre(s) = cpu_spin(s)

    # [{method => weight}, {method => [thread_seq...]}] for the work methods
    def work_report(data, n, prefix = "rperf_ractor_work_")
      weights = {}
      seqs = {}
      n.times do |i|
        label = "Object#\#{prefix}\#{i}"
        samples = data[:aggregated_samples].select { |s| s[0].any? { |f| f[1] == label } }
        weights[i] = samples.sum { |s| s[1] }
        seqs[i] = samples.map { |s| s[2] }.uniq
      end
      [weights, seqs]
    end
  RUBY

  # n Ractors x t threads, each Ractor i running rperf_ractor_units_i with
  # (1 + i % 2) x `cpu` seconds' worth of fixed work per thread. In wall mode
  # the reference is the measured wall time of the threads' work; in cpu
  # mode it is the thread CPU time measured around the work when a Ractor
  # has one thread (it then keeps its native thread), and the amount of work
  # when threads share native threads (M:N), where no per-thread CPU clock
  # exists.
  def work_script(backend, mode, ractors, threads, cpu)
    <<~RUBY
      #{PRELUDE}
      base = (rperf_units_per_second * #{cpu}).round
      Rperf.start(backend: :#{backend}, mode: :#{mode}, frequency: 1000)
      rs = #{ractors}.times.map do |i|
        Ractor.new(i, #{threads}, base * (1 + i % 2)) do |idx, nthreads, units|
          work = lambda do
            t0 = rperf_now
            c0 = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
            __send__(:"rperf_ractor_units_\#{idx}", units)
            cpu = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - c0
            [nthreads == 1 ? cpu : units, rperf_now - t0]
          end
          # One thread: work in the Ractor's own thread. (Ruby 3.3.8 itself
          # hangs when 8 Ractors each wait in Thread#value, profiler or not.)
          nthreads == 1 ? [work.call] : nthreads.times.map { Thread.new(&work) }.map(&:value)
        end
      end
      measured = rs.map { |r| ractor_value(r) }
      data = Rperf.stop
      weights, seqs = work_report(data, #{ractors}, "rperf_ractor_units_")
      child_report(weights: weights, seqs: seqs, threads: data[:threads],
                   cpu: measured.map { |m| m.sum(&:first) }, wall: measured.map { |m| m.sum(&:last) },
                   dropped: data[:dropped_samples], total: data[:aggregated_samples].sum { |s| s[1] })
    RUBY
  end

  # Shares are statistical. Where the reference is the amount of work (M:N,
  # cpu mode) rather than a clock measured around it, CPU time per unit of
  # work also varies with the machine: on a loaded VM, time the host takes
  # the vCPU away counts as thread CPU time (measured up to 1.5x between
  # Ractors doing the same work). That case gets a wider band, still far
  # from the neighbouring Ractor's 2x share.
  def share_tolerance(mode, threads) = mode == :cpu && threads > 1 ? 0.5 : 0.35

  def check_proportional(rep, mode, ractors, what, tolerance = 0.35)
    ref = mode == :cpu ? rep["cpu"] : rep["wall"]
    weights = (0...ractors).map { |i| rep["weights"][i.to_s] }
    total_w = weights.sum.to_f
    total_r = ref.sum.to_f
    assert_operator(total_w, :>, 0, "#{what}: no work sampled #{rep.inspect}")
    ractor_of = rep["threads"].to_h { |t| [t["thread_seq"], t["ractor_id"]] }
    seen_ractors = []
    ractors.times do |i|
      share = ref[i] / total_r
      got = weights[i] / total_w
      assert_in_delta(share, got, share * tolerance,
                      "#{what}: Ractor #{i} weight share #{got.round(3)} vs its #{mode} share " \
                      "#{share.round(3)}\n#{rep.inspect}")
      ids = rep["seqs"][i.to_s].map { |s| ractor_of[s] }.uniq
      assert_equal(1, ids.size, "#{what}: work #{i} runs in exactly one Ractor: #{ids.inspect}")
      assert_operator(ids[0], :>, 1, "#{what}: work #{i} is attributed to a non-main Ractor id")
      seen_ractors << ids[0]
    end
    assert_equal(ractors, seen_ractors.uniq.size, "#{what}: each Ractor has its own id #{seen_ractors}")
    seqs = rep["threads"].map { |t| t["thread_seq"] }
    assert_equal(seqs.uniq, seqs, "#{what}: thread_seq is unique across Ractors")
  end

  def run_work(ractors, threads, cpu)
    each_combo do |backend, mode|
      what = "#{ractors} Ractors x #{threads} threads #{backend}/#{mode}"
      run = run_child(work_script(backend, mode, ractors, threads, cpu), timeout: 180)
      assert_child_ok(run, what)
      check_proportional(run.report, mode, ractors, what, share_tolerance(mode, threads))
    end
  end

  def test_four_ractors = run_work(4, 1, 0.2)
  def test_eight_ractors = run_work(8, 1, 0.1)
  def test_four_ractors_with_four_threads_each = run_work(4, 4, 0.05)

  def test_ractor_spinning_before_start_is_sampled
    RPERF_BACKENDS.each do |backend|
      run = run_child(<<~RUBY, timeout: 120)
        #{PRELUDE}
        r = Ractor.new do
          Ractor.main << :spinning
          rperf_ractor_pre(0.6)
          :done
        end
        Ractor.receive              # the Ractor is running (and never switches)
        Rperf.start(backend: :#{backend}, mode: :cpu, frequency: 1000)
        ractor_value(r)
        data = Rperf.stop
        w = data[:aggregated_samples].select { |s| s[0].any? { |f| f[1] == "Object#rperf_ractor_pre" } }
        child_report(weight: w.sum { |s| s[1] }, seqs: w.map { |s| s[2] }.uniq, threads: data[:threads])
      RUBY
      assert_child_ok(run, backend)
      rep = run.report
      assert_operator(rep["weight"], :>, 0, "#{backend}: a Ractor spinning before start is sampled #{rep}")
      ids = rep["threads"].select { |t| rep["seqs"].include?(t["thread_seq"]) }.map { |t| t["ractor_id"] }
      assert_operator(ids.min, :>, 1, "#{backend}: attributed to the spinning Ractor #{rep}")
    end
  end

  # The start right after the Ractor#send that wakes the other Ractor: its
  # thread may be asleep at the bootstrap scan and resume just after it
  # (then only the RESUMED hook reaches it, so the hooks must be in before
  # the engine runs), or the job its bootstrap signal triggers may be run
  # by the main thread's flush instead (then only a re-sent signal reaches
  # it). Either way it used to spin unsampled for the whole run, in about
  # one first start of a process in 15 on this machine, hence several
  # processes.
  def test_ractor_woken_just_before_the_first_start_is_sampled
    misses = []
    RPERF_BACKENDS.each do |backend|
      6.times do |i|
        run = run_child(<<~RUBY, timeout: 60)
          #{PRELUDE}
          r = Ractor.new { Ractor.main << :parked; Ractor.receive; rperf_ractor_pre(0.15); :done }
          Ractor.receive              # the Ractor is parked in Ractor.receive
          r.send(:go)
          Rperf.start(backend: :#{backend}, mode: :wall, frequency: 10_000)
          ractor_value(r)
          data = Rperf.stop
          w = data[:aggregated_samples].select { |s| s[0].any? { |f| f[1] == "Object#rperf_ractor_pre" } }
          child_report(weight: w.sum { |s| s[1] })
        RUBY
        assert_child_ok(run, backend)
        misses << "#{backend} ##{i}" unless run.report["weight"].positive?
      end
    end
    assert_empty(misses, "a Ractor woken just before start got no sample")
  end

  # A Ractor blocked when the run starts is first met when it resumes: its
  # blocked time since start is charged as [GVL blocked], and what it runs
  # then is weighed in full. In wall mode that run used to weigh nothing for
  # as long again as the block had lasted (0.3 s blocked, 0.25 s spin: one
  # sample of ~0.1 ms), under every backend.
  def test_ractor_blocked_at_start_is_weighed_for_its_run_after
    RPERF_BACKENDS.each do |backend|
      run = run_child(<<~RUBY, timeout: 60)
        #{PRELUDE}
        r = Ractor.new { Ractor.receive; rperf_ractor_pre(0.25); :done }
        Rperf.start(backend: :#{backend}, mode: :wall, frequency: 1000)
        sleep 0.3
        r.send(1)
        ractor_value(r)
        data = Rperf.stop
        w = data[:aggregated_samples].select { |s| s[0].any? { |f| f[1] == "Object#rperf_ractor_pre" } }
        blocked = data[:aggregated_samples].select { |s| s[0][0][1] == "[GVL blocked]" && s[0].any? { |f| f[1] == "Ractor.receive" } }
        child_report(spin: w.sum { |s| s[1] }, blocked: blocked.sum { |s| s[1] })
      RUBY
      assert_child_ok(run, backend)
      rep = run.report
      # 0.25 s of CPU is at least 0.25 s of wall time
      assert_operator(rep["spin"], :>=, 200_000_000, "#{backend}: the Ractor's run after its block #{rep}")
      assert_operator(rep["blocked"], :>=, 250_000_000, "#{backend}: its block since start #{rep}")
    end
  end

  # GC steps run by a non-main Ractor's thread fire only that Ractor's
  # hooks, and registering one there would turn off TracePoints of other
  # Ractors (Ruby 3.3), so that GC time stays ordinary time of the Ractor's
  # thread (docs/architecture.md, "GC in Ractors"): never lost, never
  # charged to another Ractor.
  def test_gc_inside_a_ractor_is_charged_to_its_thread
    each_combo do |backend, mode|
      run = run_child(<<~RUBY, timeout: 120)
        #{PRELUDE}
        Rperf.start(backend: :#{backend}, mode: :#{mode}, frequency: 1000)
        r = Ractor.new { c0 = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID); rperf_ractor_alloc(0.4); Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - c0 }
        cpu = ractor_value(r)
        data = Rperf.stop
        in_ractor = data[:aggregated_samples].select { |s| s[0].any? { |f| f[1] == "Object#rperf_ractor_alloc" } }
        child_report(seqs: in_ractor.map { |s| s[2] }.uniq, weight: in_ractor.sum { |s| s[1] },
                     cpu: cpu, threads: data[:threads])
      RUBY
      what = "#{backend}/#{mode}"
      assert_child_ok(run, what)
      rep = run.report
      assert_operator(rep["weight"], :>=, rep["cpu"] * 1e9 / 3, "#{what}: the Ractor's allocating work (GC included) #{rep}")
      ids = rep["threads"].select { |t| rep["seqs"].include?(t["thread_seq"]) }.map { |t| t["ractor_id"] }
      assert_operator(ids.min, :>, 1, "#{what}: charged to the Ractor's thread #{rep}")
    end
  end

  def test_labels_inside_ractors
    RPERF_BACKENDS.each do |backend|
      run = run_child(<<~RUBY, timeout: 120)
        #{PRELUDE}
        Rperf.start(backend: :#{backend}, mode: :cpu, frequency: 1000)
        rs = 3.times.map do |i|
          Ractor.new(i) do |idx|
            seen = Rperf.label(worker: idx, kind: "ractor") do
              __send__(:"rperf_ractor_work_\#{idx}", 0.2)
              Rperf.labels
            end
            [seen, Rperf.labels, Rperf.running?]
          end
        end
        inside = rs.map { |r| ractor_value(r) }
        rperf_ractor_work_7(0.1)
        data = Rperf.stop
        per = (0..2).to_h do |i|
          s = data[:aggregated_samples].select { |x| x[0].any? { |f| f[1] == "Object#rperf_ractor_work_\#{i}" } }
          [i, s.map { |x| x[3] }.uniq.map { |id| data[:label_sets][id] }]
        end
        main = data[:aggregated_samples].select { |x| x[0].any? { |f| f[1] == "Object#rperf_ractor_work_7" } }
        child_report(inside: inside.map { |a, b, c| [a.to_a, b.to_a, c] }, per: per.transform_values { |v| v.map(&:to_a) },
                     main: main.map { |x| x[3] }.uniq)
      RUBY
      assert_child_ok(run, backend)
      rep = run.report
      3.times do |i|
        seen, after, running = rep["inside"][i]
        assert_equal([["worker", i], %w[kind ractor]], seen, "#{backend}: Rperf.labels inside Ractor #{i}")
        assert_equal([], after, "#{backend}: labels restored after the block in Ractor #{i}")
        assert_equal(true, running, "#{backend}: Rperf.running? inside a Ractor")
        assert_equal([[["worker", i], %w[kind ractor]]], rep["per"][i.to_s],
                     "#{backend}: Ractor #{i}'s samples carry its labels only #{rep}")
      end
      assert_equal([0], rep["main"], "#{backend}: main-Ractor samples carry no label #{rep}")
    end
  end

  def test_rack_middleware_inside_ractor_workers
    run = run_child(<<~RUBY, timeout: 120)
      #{PRELUDE}
      require "rperf/middleware"
      Rperf.start(mode: :cpu, frequency: 1000)
      rs = 2.times.map do |i|
        Ractor.new(i) do |idx|
          app = ->(env) { __send__(:"rperf_ractor_work_\#{idx}", 0.15); [200, {}, [Rperf.labels[:endpoint]]] }
          mw = Rperf::Middleware.new(app)
          mw.call("REQUEST_METHOD" => "GET", "PATH_INFO" => "/r\#{idx}")
        end
      end
      bodies = rs.map { |r| ractor_value(r) }.map { |r| r[2][0] }
      data = Rperf.stop
      per = (0..1).map do |i|
        s = data[:aggregated_samples].select { |x| x[0].any? { |f| f[1] == "Object#rperf_ractor_work_\#{i}" } }
        s.map { |x| data[:label_sets][x[3]][:endpoint] }.uniq
      end
      child_report(bodies: bodies, per: per)
    RUBY
    assert_child_ok(run)
    assert_equal(["GET /r0", "GET /r1"], run.report["bodies"])
    assert_equal([["GET /r0"], ["GET /r1"]], run.report["per"])
  end

  def test_start_and_stop_are_main_ractor_only
    run = run_child(<<~RUBY, timeout: 60)
      #{PRELUDE}
      r = Ractor.new do
        begin
          Rperf.start
          :started
        rescue RuntimeError => e
          e.message
        end
      end
      child_report(msg: ractor_value(r), running: Rperf.running?)
    RUBY
    assert_child_ok(run)
    assert_match(/main Ractor/, run.report["msg"].to_s)
    assert_equal(false, run.report["running"])
  end
end
