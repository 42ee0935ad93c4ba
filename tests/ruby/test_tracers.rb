# frozen_string_literal: true
#
# The profiler is invisible to tracers: TracePoint, set_trace_func and
# Thread#add_trace_func record exactly the events of the unprofiled program
# while profiling at 10 kHz (the sampling job, thread and GC hooks and
# Rperf.label run on the application's threads), and a TracePoint in one
# Ractor keeps firing while other Ractors are created and sampled (Ruby 3.3
# publishes the VM-global event flags from the hook list of the Ractor that
# last changed its hooks). Also: thread names in results are valid Strings.
# Every scenario runs in a child Ruby (Ractors cannot be torn down).
require_relative "helper"

class TestTracers < Test::Unit::TestCase
  include RperfTestHelper

  PRELUDE = <<~RUBY
    Warning[:experimental] = false
    def rperf_tr_leaf(i) = i + 1
    def rperf_tr_alloc(n) = Array.new(n) { |i| "s\#{i}" * 4 }.size
  RUBY

  # One traced pass: every kind of tracer on the main thread and on worker
  # threads, around deterministic work that runs every periodic path of the
  # job at 10 kHz: long enough for thread-name reads (every 32 jobs per
  # thread), label changes, named threads, a new Ractor, GC. Returns the
  # recorded events as {"event method_id" => count} per tracer.
  TRACED_PASS = <<~RUBY
    def rperf_tr_work(rounds)
      x = 0
      rounds.times do |r|
        Rperf.label(round: r % 4) do
          3000.times { |i| x = rperf_tr_leaf(x) + i % 3 }
        end
        rperf_tr_alloc(2000) if r % 10 == 0
      end
      x
    end

    def rperf_tr_pass(ractor_units)
      tp_counts = Hash.new(0)
      stf_counts = Hash.new(0)
      thr_counts = Hash.new(0)
      tp = TracePoint.new(:call, :return, :c_call, :c_return, :line, :b_call, :b_return,
                          :raise, :class, :end, :thread_begin, :thread_end) do |t|
        tp_counts["\#{t.event} \#{t.method_id}"] += 1
      end
      set_trace_func(proc { |ev, _f, _l, id, _b, _k| stf_counts["\#{ev} \#{id}"] += 1 })
      tp.enable do
        # one Ruby thread runs at a time: Ruby 3.3's own tracers are not
        # deterministic when traced threads run concurrently
        2.times do |k|
          Thread.new do
            Thread.current.name = "tracer-\#{k}"
            Thread.current.add_trace_func(proc { |ev, _f, _l, id, _b, _k| thr_counts["\#{ev} \#{id}"] += 1 })
            rperf_tr_work(12)
          end.join
        end
        rperf_tr_work(20)
        GC.start
        if ractor_units.positive?
          r = Ractor.new(ractor_units) { |n| x = 0; n.times { |i| x += i }; x }
          ractor_value(r)
          rperf_tr_work(4)
        end
      end
      set_trace_func(nil)
      { "tracepoint" => tp_counts, "set_trace_func" => stf_counts, "thread_trace_func" => thr_counts }
    end
  RUBY

  def diff(want, got)
    (want.keys | got.keys).filter_map { |k| [k, want[k], got[k]] if want[k] != got[k] }.first(20)
  end

  # One child per configuration (after a Ractor existed, Ruby 3.3's tracers
  # are not deterministic from one pass to the next in the same process).
  def traced_pass(start)
    run = run_child(<<~RUBY, timeout: 120)
      #{PRELUDE}
      #{TRACED_PASS}
      rperf_tr_pass(0)                     # warm-up: first-time loading, caches
      #{start}
      counts = rperf_tr_pass(50_000)
      data = Rperf.stop if Rperf.running?
      child_report(counts: counts, samples: data && data[:sampling_count])
    RUBY
    assert_child_ok(run, start)
    run.report
  end

  def test_tracers_see_no_profiler_events
    base = traced_pass("")["counts"]
    assert_operator(base["tracepoint"]["call rperf_tr_leaf"], :>, 0, "the unprofiled pass is traced")
    each_combo do |backend, mode|
      what = "#{backend}/#{mode}"
      rep = traced_pass("Rperf.start(backend: :#{backend}, mode: :#{mode}, frequency: 10_000)")
      assert_operator(rep["samples"], :>, 100, "#{what}: the pass was sampled")
      base.each do |tracer, want|
        got = rep["counts"][tracer]
        assert_equal(want, got, "#{what}: #{tracer} saw other events than unprofiled: " \
                                "[key, unprofiled, profiled] #{diff(want, got).inspect}")
      end
    end
  end

  # Issue shapes: the main Ractor's TracePoint while Ractors are created and
  # sampled, and a TracePoint inside a non-main Ractor while the main Ractor
  # is sampled. Each variant's event list is computed unprofiled first, then
  # repeated under the profiler (10 kHz, both modes alternating).
  RACTOR_VARIANTS = <<~RUBY
    def rperf_tr_callee(x) = x * 2

    # Ruby 3.3 itself: freeing a finished Ractor's hook list publishes an
    # empty flag set, which turns off every TracePoint, whenever GC frees it.
    # So no GC runs during a variant, profiled or not.
    def rperf_tr_variant(fn)
      GC.start
      GC.disable
      fn.call
    ensure
      GC.enable
    end

    VARIANTS = {
      # the issue's program: the :line of `c = 3` after the Ractor ran
      "line" => lambda do
        rs = []
        TracePoint.new(:line) { |tp| rs << tp.lineno if tp.path == __FILE__ }.enable do
          r = Ractor.new {
            a = 0
            200_000.times { a += 1 }
          }
          ractor_value(r)
          c = 3
        end
        rs
      end,
      "call_return_c_call" => lambda do
        rs = []
        TracePoint.new(:call, :return, :c_call) { |tp| rs << [tp.event, tp.method_id] if tp.method_id == :rperf_tr_callee || tp.method_id == :abs }.enable do
          r = Ractor.new { a = 0; 200_000.times { a += 1 }; a }
          ractor_value(r)
          5.times { |i| rperf_tr_callee(i); (-i).abs }
        end
        rs
      end,
      "in_other_ractor" => lambda do
        r = Ractor.new do
          rs = []
          TracePoint.new(:line, :c_call) { |tp| rs << [tp.event, tp.lineno] if tp.path == __FILE__ }.enable do
            a = 0
            100_000.times { a += 1 }
            b = [1, 2].sum
            a += b
          end
          rs
        end
        rperf_tr_alloc(20_000)            # main is sampled meanwhile
        ractor_value(r)
      end,
      "ractors_in_a_loop" => lambda do
        rs = []
        TracePoint.new(:line) { |tp| rs << tp.lineno if tp.path == __FILE__ }.enable do
          rs4 = 4.times.map { |i| Ractor.new(i) { |k| a = 0; 50_000.times { a += k }; a } }
          rs4.each { |r| ractor_value(r) }
          c = 3
          d = c + 1
        end
        rs
      end,
    }
  RUBY

  def test_tracepoints_in_every_ractor_keep_firing
    RPERF_BACKENDS.each do |backend|
      run = run_child(<<~RUBY, timeout: 240)
        #{PRELUDE}
        #{RACTOR_VARIANTS}
        want = VARIANTS.transform_values { |fn| rperf_tr_variant(fn) }
        bad = []
        8.times do |i|
          Rperf.start(backend: :#{backend}, mode: i.even? ? :wall : :cpu, frequency: 10_000)
          VARIANTS.each do |name, fn|
            got = rperf_tr_variant(fn)
            bad << [i, name, got] if got != want[name]
          end
          Rperf.stop
          # and after the profiler stopped
          VARIANTS.each { |name, fn| got = rperf_tr_variant(fn); bad << [i, "after stop: \#{name}", got] if got != want[name] }
        end
        child_report(want: want, bad: bad.first(10), nbad: bad.size)
      RUBY
      assert_child_ok(run, backend)
      rep = run.report
      assert_not_empty(rep["want"]["line"], "the unprofiled :line TracePoint records lines")
      assert_equal(0, rep["nbad"], "#{backend}: event lists differ from unprofiled #{rep['want'].inspect}\n" \
                                   "[iteration, variant, profiled] #{rep['bad'].inspect}")
    end
  end

  def test_thread_names_are_valid_strings
    each_combo do |backend, mode|
      run = run_child(<<~RUBY, timeout: 60)
        Rperf.start(backend: :#{backend}, mode: :#{mode}, frequency: 10_000)
        ts = ["\\u00e9" * 40, "worker-1"].map do |name|
          Thread.new { Thread.current.name = name; cpu_spin(0.05) }
        end
        ts.each(&:join)
        cpu_spin(0.02)
        data = Rperf.stop
        names = data[:threads].map { |t| t[:name] }
        child_report(names: names.map { |n| n && [n, n.encoding.name, n.valid_encoding?] },
                     json: (data[:threads].to_json rescue $!.class.name))
      RUBY
      what = "#{backend}/#{mode}"
      assert_child_ok(run, what)
      rep = run.report
      assert_kind_of(String, rep["json"], "#{what}: to_json on the threads table")
      named = rep["names"].compact
      named.each { |n, _enc, valid| assert_true(valid, "#{what}: #{n.inspect} is a valid String") }
      assert_include(named.map(&:first), "main", "#{what}: the main thread")
      next if ENV["RUBY_MN_THREADS"] == "1" # threads sharing native threads have no name
      # names are read by a thread's own sampling job; :nanosleep's jobs may
      # land on another thread (docs/backends.md, known limitation)
      next if backend == :nanosleep

      assert_include(named.map(&:first), "worker-1", "#{what}: #{rep['names']}")
      cut = named.map(&:first).find { |n| n.start_with?("\u00e9") }
      assert_not_nil(cut, "#{what}: the long name appears #{rep['names']}")
      assert_match(/\A\u00e9+\z/, cut, "#{what}: cut on a character boundary")
    end
  end
end
