# frozen_string_literal: true

# tests/ruby/test_code_memory.rb — the profiler keeps what a profile needs
# of the code it samples (names, paths, lines), not the code: a program
# that keeps making code (eval, templates compiled at run time,
# define_method with strings) and is profiled for days keeps the memory it
# has unprofiled. The shape is Ruby's own
# TestMethod#test_kwarg_eval_memory_leak: 100,000 evals, then 100,000 more,
# memory after the second batch against memory after the first.

require_relative "helper"

class TestCodeMemory < Test::Unit::TestCase
  include RperfTestHelper

  EVALS = <<~RUBY
    def live_slots = (c = ObjectSpace.count_objects; c[:TOTAL] - c[:FREE])
    def rss_kb = File.read("/proc/self/status")[/VmRSS:\\s+(\\d+)/, 1].to_i
    Rperf.start(frequency: 10_000, mode: :wall) if ENV["PROFILED"] == "1"
    100_000.times { eval("Hash[foo: 123]") }
    GC.start
    rss_before = rss_kb
    100_000.times { eval("Hash[foo: 123]") }
    GC.start
    report = { live: live_slots, rss_before: rss_before, rss_after: rss_kb }
    data = Rperf.stop
    report[:samples] = data[:sampling_count] if data
    child_report(report)
  RUBY

  # Live slots after GC.start within 1.2 times the unprofiled program's, and
  # the resident memory after the second batch within 1.2 times that after
  # the first (the bound of Ruby's own test), at 10 kHz wall.
  def test_evaluated_code_is_collected_while_profiled
    plain = run_child(EVALS, timeout: 300)
    assert(plain.success?, plain.describe)
    profiled = run_child(EVALS, env: { "PROFILED" => "1" }, timeout: 300)
    assert(profiled.success?, profiled.describe)
    p0 = plain.report
    p1 = profiled.report
    assert_operator(p1["samples"], :>, 1000, "the evals were sampled")
    assert_operator(p1["live"], :<=, p0["live"] * 1.2,
                    "live slots after GC.start: #{p1["live"]} profiled, #{p0["live"]} unprofiled")
    assert_operator(p1["rss_after"], :<=, p1["rss_before"] * 1.2,
                    "RSS after the second 100,000 evals: #{p1["rss_after"]} kB against #{p1["rss_before"]} kB")
  end

  # Frames whose code was collected keep their names and paths in the
  # result: each eval defines a method in a class of its own, called once,
  # and every sample in such a method names it and the eval's path.
  def test_frames_of_collected_code_keep_their_names
    r = run_child(<<~RUBY, timeout: 300)
      Rperf.start(frequency: 10_000, mode: :cpu)
      3000.times { eval("Class.new { def rperf_evaled; x = 0; 3000.times { x += 1 }; x; end }.new.rperf_evaled") }
      GC.start
      data = Rperf.stop
      evaled = data[:aggregated_samples].select { |frames, _| frames.any? { |_, label| label.end_with?("#rperf_evaled") } }
      paths = evaled.map { |frames, _| frames.find { |_, label| label.end_with?("#rperf_evaled") }[0] }.uniq
      classes = evaled.map { |frames, _| frames.find { |_, label| label.end_with?("#rperf_evaled") }[1] }.uniq
      child_report(evaled: evaled.sum { |_, w| w }, total: data[:aggregated_samples].sum { |_, w| w },
                   paths: paths, classes: classes.size,
                   unnamed: data[:aggregated_samples].count { |frames, _| frames.any? { |path, label| path == "<C method>" && label.empty? } })
    RUBY
    assert(r.success?, r.describe)
    rep = r.report
    assert_operator(rep["evaled"], :>, rep["total"] / 4, "most of the time is in the evaluated methods")
    assert(rep["paths"].all? { |path| path.start_with?("(eval at ") }, "every evaluated method's path names its eval: #{rep["paths"]}")
    assert_operator(rep["classes"], :>, 100, "the methods of many classes were sampled")
    assert_equal(0, rep["unnamed"], "no frame lost its name")
  end
end
