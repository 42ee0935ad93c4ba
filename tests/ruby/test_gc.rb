# frozen_string_literal: true
# GC synthetic frames, GC.stress, compaction while profiling.
require_relative "helper"

def rperf_no_alloc(seconds) = cpu_spin(seconds)

class TestGC < Test::Unit::TestCase
  include RperfTestHelper

  def test_gc_frames_in_both_modes
    each_combo do |backend, mode|
      result = Rperf.start(frequency: 1000, mode: mode, backend: backend) do
        rperf_alloc_work(0.3)
        GC.start # a full mark + sweep for good measure
      end
      ctx = "#{backend}/#{mode}\n#{rperf_describe(result)}"
      marking = rperf_samples_with_leaf(result, GC_MARKING)
      sweeping = rperf_samples_with_leaf(result, GC_SWEEPING)
      assert_not_empty(marking, "[GC marking] recorded #{ctx}")
      assert_not_empty(sweeping, "[GC sweeping] recorded #{ctx}")
      (marking + sweeping).each { |s| assert_sample_shape(s, msg: ctx) }
      # GC samples sit on top of the stack that triggered the GC.
      assert((marking + sweeping).any? { |f, *| rperf_labels_of(f).include?("Object#rperf_alloc_work") },
             "a GC frame on top of the allocating method's stack #{ctx}")
      # Synthetic frames only ever appear at the leaf position.
      result[:aggregated_samples].each do |frames, *|
        frames.drop(1).each do |f|
          assert_not_include(SYNTHETIC_FRAMES, f, "synthetic frame below the leaf: #{frames.first(3).inspect}")
        end
      end
    end
  end

  def test_gc_time_not_counted_twice
    # Total weight of a single-threaded allocation run must stay close to the
    # elapsed time: GC time is not charged again to the next normal sample.
    each_combo do |backend, mode|
      m0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
      result = Rperf.start(frequency: 1000, mode: mode, backend: backend) { rperf_alloc_work(0.3) }
      elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - m0
      total = rperf_total_weight(result)
      assert_operator(total, :<=, elapsed * 1.5,
                      "total #{total} vs elapsed #{elapsed} (#{backend}/#{mode})\n#{rperf_describe(result)}")
      gc = rperf_samples_with_leaf(result, GC_MARKING).sum { |s| s[1] } +
           rperf_samples_with_leaf(result, GC_SWEEPING).sum { |s| s[1] }
      assert_operator(gc, :<, total, "GC is part of the total, not all of it (#{backend}/#{mode})")
    end
  end

  # GC time belongs to code that ran GC. A thread alternates 0.2 ms of
  # allocation with 0.2 ms of computing that allocates nothing: no GC
  # record may sit on the computing method (a tick that recorded the GC
  # time pending since its previous sample on its own stack would often
  # put it on the computing method).
  def test_gc_time_lands_only_on_code_that_ran_gc
    each_combo do |backend, mode|
      result = Rperf.start(frequency: 1000, mode: mode, backend: backend) do
        1000.times do
          rperf_alloc_work(0.0002)
          rperf_no_alloc(0.0002)
        end
      end
      ctx = "#{backend}/#{mode}\n#{rperf_describe(result)}"
      gc = rperf_samples_with_leaf(result, GC_MARKING) + rperf_samples_with_leaf(result, GC_SWEEPING)
      assert_not_empty(gc, ctx)
      on_no_alloc = gc.select { |f, *| rperf_labels_of(f).include?("Object#rperf_no_alloc") }
      assert_empty(on_no_alloc, "no GC time on a method that allocates nothing #{ctx}")
      assert_operator(rperf_weight_with(result, "Object#rperf_no_alloc"), :>, 0, "it is sampled #{ctx}")
    end
  end

  def test_gc_time_of_short_steps_is_kept
    # Lazy sweeping runs many GC steps far shorter than an interval; their
    # time waits until its sum is sampled (or the thread exits). None of it
    # may be lost: the profile's GC time matches Ruby's own GC clock.
    each_combo do |backend, mode|
      next unless mode == :cpu # GC.stat(:time) is process CPU time

      t0 = GC.stat(:time)
      result = Rperf.start(frequency: 1000, mode: mode, backend: backend) do
        Thread.new { rperf_alloc_work(0.3) }.join
      end
      ruby_gc = (GC.stat(:time) - t0) * 1_000_000
      gc = rperf_samples_with_leaf(result, GC_MARKING).sum { |s| s[1] } +
           rperf_samples_with_leaf(result, GC_SWEEPING).sum { |s| s[1] }
      ctx = "profile #{gc} ns vs GC.stat #{ruby_gc} ns (#{backend}/#{mode})"
      assert_operator(ruby_gc, :>, 0, ctx)
      assert_operator(gc, :>=, ruby_gc * 0.5, ctx)
      assert_operator(gc, :<=, ruby_gc * 2 + 2_000_000, ctx)
    end
  end

  def test_gc_stress_does_not_crash
    script = <<~'RUBY'
      RPERF_BACKENDS.each do |backend|
        RPERF_MODES.each do |mode|
          r = Rperf.start(frequency: 1000, mode: mode, backend: backend) do
            begin
              GC.stress = true
              60.times { |i| [i.to_s, { i => [i] }] }
              Rperf.label(phase: "stress") { 20.times { "a" + "b" } }
              Rperf.snapshot
            ensure
              GC.stress = false
            end
            cpu_spin(0.02)
          end
          ok = r.is_a?(Hash) && r[:aggregated_samples].all? { |f, w| f.all? { |p, l| p.is_a?(String) && l.is_a?(String) } && w > 0 }
          child_report("combo" => "#{backend}/#{mode}", "ok" => ok)
        end
      end
      # start and stop themselves under GC.stress
      GC.stress = true
      Rperf.start(frequency: 1000)
      10.times { [] }
      r = Rperf.stop
      GC.stress = false
      child_report("combo" => "stress-start-stop", "ok" => r.is_a?(Hash))
    RUBY
    run = run_child(script, timeout: 300)
    assert_child_ok(run)
    assert_equal(RPERF_BACKENDS.size * RPERF_MODES.size + 1, run.reports.size, run.describe)
    run.reports.each { |r| assert_true(r["ok"], "#{r['combo']}\n#{run.describe}") }
  end

  def test_compaction_mid_run_keeps_frames_correct
    script = <<~'RUBY'
      # Methods defined at run time, so that their iseqs and method entries
      # are ordinary movable heap objects created right before profiling.
      class RperfCompactVictim
        40.times do |i|
          class_eval <<~SRC, "victim.rb", 1
            def m#{i}(s) = cpu_spin(s)
          SRC
        end
        def before_compact(s) = 40.times { |i| send(:"m#{i}", s) }
        def after_compact(s) = 40.times { |i| send(:"m#{i}", s) }
      end

      results = []
      RPERF_BACKENDS.each do |backend|
        RPERF_MODES.each do |mode|
          v = RperfCompactVictim.new
          garbage = Array.new(20_000) { |i| "garbage #{i}" }
          r = Rperf.start(frequency: 1000, mode: mode, backend: backend) do
            v.before_compact(0.003)
            garbage = nil
            GC.compact
            GC.verify_compaction_references(expand_heap: true, toward: :empty)
            v.after_compact(0.003)
            GC.verify_compaction_references(expand_heap: true, toward: :empty)
          end
          samples = r[:aggregated_samples]
          labels = samples.flat_map { |f, *| f.map { |fr| fr[1] } }.uniq
          victim = samples.flat_map { |f, *| f }.select { |p, _| p == "victim.rb" }.map { |_, l| l }.uniq
          chains_ok = samples.all? do |f, *|
            ls = f.map { |fr| fr[1] }
            i = ls.index { |l| l =~ /\ARperfCompactVictim#m\d+\z/ }
            next true unless i
            # each m<i> is called (via a block + Integer#times) by before/after_compact
            ls[i..].any? { |l| l =~ /\A(block in )?RperfCompactVictim#(before|after)_compact\z/ }
          end
          child_report(
            "combo" => "#{backend}/#{mode}",
            "before" => labels.include?("RperfCompactVictim#before_compact"),
            "after" => labels.include?("RperfCompactVictim#after_compact"),
            "victim_ok" => victim.all? { |l| l =~ /\ARperfCompactVictim#m\d+\z/ },
            "victim_count" => victim.size,
            "chains_ok" => chains_ok,
            "strings_ok" => labels.all? { |l| l.is_a?(String) && l.valid_encoding? },
            "bad_victim" => victim.reject { |l| l =~ /\ARperfCompactVictim#m\d+\z/ }.first(5))
        end
      end
    RUBY
    run = run_child(script, timeout: 300)
    assert_child_ok(run)
    assert_equal(RPERF_BACKENDS.size * RPERF_MODES.size, run.reports.size, run.describe)
    run.reports.each do |r|
      ctx = "#{r['combo']}: #{r.inspect}\n#{run.describe}"
      assert_true(r["before"], "method run before compaction resolves by name #{ctx}")
      assert_true(r["after"], "method run after compaction resolves by name #{ctx}")
      assert_true(r["victim_ok"], "frames from victim.rb resolve to the right methods #{ctx}")
      assert_operator(r["victim_count"], :>, 5, ctx)
      assert_true(r["chains_ok"], "callers resolve correctly #{ctx}")
      assert_true(r["strings_ok"], ctx)
    end
  end

  def test_compaction_with_snapshot_and_labels
    script = <<~'RUBY'
      Rperf.start(frequency: 2000)
      Rperf.label(step: "one") { rperf_work_a(0.03) }
      s1 = Rperf.snapshot
      GC.compact
      Rperf.label(step: "two") { rperf_work_b(0.03) }
      GC.verify_compaction_references(expand_heap: true, toward: :empty)
      s2 = Rperf.snapshot(clear: true)
      rperf_work_a(0.02)
      r = Rperf.stop
      has = ->(res, l) { res[:aggregated_samples].any? { |f, *| f.any? { |fr| fr[1] == l } } }
      child_report("s1" => has.(s1, "Object#rperf_work_a"),
                   "s2a" => has.(s2, "Object#rperf_work_a"), "s2b" => has.(s2, "Object#rperf_work_b"),
                   "r" => has.(r, "Object#rperf_work_a"), "rb" => has.(r, "Object#rperf_work_b"),
                   "labels" => s2[:label_sets].map { |h| h.transform_keys(&:to_s) })
    RUBY
    run = run_child(script, timeout: 120)
    assert_child_ok(run)
    r = run.report
    assert_not_nil(r, run.describe)
    assert_equal({ "s1" => true, "s2a" => true, "s2b" => true, "r" => true, "rb" => false },
                 r.slice("s1", "s2a", "s2b", "r", "rb"), run.describe)
    assert_include(r["labels"], { "step" => "one" })
    assert_include(r["labels"], { "step" => "two" })
  end

  # Ruby 3.3 clears the VM-wide event flags when it frees a Ractor whose
  # hook list is empty: every event hook, rperf's GC hook included, stops
  # firing. A run that meets it puts the flags back (ruby/hooks.c,
  # rperf_rb_hooks_heal), so GC time is still attributed after it.
  def test_gc_frames_go_on_after_a_ractor_is_collected_mid_run
    script = <<~'RUBY'
      Warning[:experimental] = false
      ractor_value(Ractor.new { 1 })
      res = Rperf.start(frequency: 1000, mode: :wall) do
        GC.start                 # frees the finished Ractor: the flags go
        rperf_alloc_work(0.4)
      end
      gc = res[:aggregated_samples].select { |f, *| f[0][0] == "<GC>" }.sum { |s| s[1] }
      child_report("gc_ms" => gc / 1e6, "total_ms" => res[:aggregated_samples].sum { |s| s[1] } / 1e6)
    RUBY
    run = run_child(script, timeout: 120)
    assert_child_ok(run)
    r = run.report
    assert_not_nil(r, run.describe)
    # rperf_alloc_work spends a good part of its time in GC: ~0 without the fix
    assert_operator(r["gc_ms"], :>, r["total_ms"] * 0.03, r.inspect)
  end
end
