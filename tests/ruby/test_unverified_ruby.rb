# frozen_string_literal: true

# tests/ruby/test_unverified_ruby.rb — rperf on a Ruby series the suite has
# not verified (a Ruby newer than every verified one) runs in its
# conservative form: start works, verbose says so in one line, the holder
# backend sends every tick by signal, and the allocation hook locks on every
# call and stays out of other Ractors' lists. RPERF_UNVERIFIED_RUBY=1 selects
# that form on this (verified) Ruby, so every test here runs its children
# with it.

require_relative "helper"

class TestUnverifiedRuby < Test::Unit::TestCase
  include RperfTestHelper

  UNVERIFIED = { "RPERF_UNVERIFIED_RUBY" => "1" }.freeze

  def test_this_ruby_is_verified_and_the_switch_turns_that_off
    assert_include(Rperf::VERIFIED_RUBIES, RUBY_VERSION[/\A\d+\.\d+/],
                   "the suite runs on the series it verifies")
    assert(Rperf.verified_ruby?)
    r = run_child("child_report(verified: Rperf.verified_ruby?)", env: UNVERIFIED)
    assert(r.success?, r.stderr)
    assert_equal(false, r.report["verified"])
  end

  def test_verbose_says_so_in_one_line_and_quiet_runs_say_nothing
    script = <<~RUBY
      Rperf.start(verbose: ENV["V"] == "1")
      cpu_spin(0.05)
      Rperf.stop
    RUBY
    loud = run_child(script, env: UNVERIFIED.merge("V" => "1"))
    assert(loud.success?, loud.stderr)
    lines = loud.stderr.lines.grep(/not a series rperf is verified on/)
    assert_equal(1, lines.size, loud.stderr)
    assert_include(lines.first, RUBY_VERSION)
    quiet = run_child(script, env: UNVERIFIED.merge("V" => "0"))
    assert(quiet.success?, quiet.stderr)
    assert_equal("", quiet.stderr)
  end

  # Time goes to the methods that spent it, on every thread, with every
  # tick of the holder backend sent by signal.
  def test_the_holder_backend_attributes_every_thread_s_work
    script = <<~RUBY
      data = Rperf.start(backend: :holder, mode: :cpu, frequency: 1000) do
        t = Thread.new { rperf_work_b(0.2) }
        rperf_work_a(0.2)
        t.join
      end
      w = Hash.new(0)
      data[:aggregated_samples].each do |frames, weight, *|
        labels = frames.map { |f| f[1] }
        w[:a] += weight if labels.include?("Object#rperf_work_a")
        w[:b] += weight if labels.include?("Object#rperf_work_b")
      end
      child_report(a: w[:a], b: w[:b], count: data[:sampling_count], backend: data[:backend])
    RUBY
    r = run_child(script, env: UNVERIFIED)
    assert(r.success?, r.stderr)
    rep = r.report
    assert_equal("holder", rep["backend"])
    assert_operator(rep["count"], :>, 0)
    assert_operator(rep["a"], :>, 0, rep.inspect)
    assert_operator(rep["b"], :>, 0, rep.inspect)
  end

  # The locked allocation hook: the live heap is kept exactly as on a
  # verified Ruby, threads allocating beside the main one; a Ractor's own
  # allocations are not sampled (its list gets no hook) and nothing breaks.
  def test_allocations_and_the_live_heap_with_threads_and_a_ractor
    script = <<~RUBY
      Warning[:experimental] = false
      keep = []
      Rperf.start(mode: :alloc, alloc_interval: 8)
      t = Thread.new { 50_000.times { |i| [i] } }
      30_000.times { |i| keep << [i] }
      t.join
      r = Ractor.new { 20_000.times.map { |i| [i] }.size }
      r.respond_to?(:value) ? r.value : r.take
      GC.start
      data = Rperf.stop
      kept = 0
      data[:allocations][:samples].each do |frames, cls, _ao, _ab, io, *|
        kept += io if cls == "Array" && frames.any? { |f| f[1] == "Integer#times" } && io > 0
      end
      child_report(kept: kept, ractors: data[:allocations][:ractors])
    RUBY
    r = run_child(script, env: UNVERIFIED)
    assert(r.success?, r.stderr)
    assert_in_delta(30_000, r.report["kept"], 30_000 * 0.15, r.report.inspect)
    assert_equal(false, r.report["ractors"])
  end
end
