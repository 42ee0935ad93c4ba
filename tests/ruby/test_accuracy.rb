# frozen_string_literal: true
# Per-method time of C calls that keep the GVL, against the time each call
# really took: the case the late rule (core/thread_state.c) makes exact.
# The bound, a median error of 1 %, is an order of magnitude above what the
# profiler gives (0.03-0.1 % on the accuracy harness's `cw` family), and
# below what a profiler that ends such a sample at its tick, or ticks at
# exponential gaps, gives (2-15 % per method here). A median, not a mean:
# on a machine so busy that the timer thread misses ticks for milliseconds
# (two busy loops on two CPUs), a call with no tick at all goes to the
# next sampled one, a few methods off by several percent; the bounds widen
# by the periods the backend reports it missed (timer_overruns). The full
# table, every family, comes from bench/accuracy.sh.
require_relative "helper"

# Twelve methods, each a C call of its own length (String#count over its own
# string, no safepoint inside), defined from a string so that each has its
# own frame label.
module AccuracyProbe
  METHODS = (0...12).map { |i| :"c#{format('%02d', i)}" }
  METHODS.each { |m| module_eval("def self.#{m}(s) = s.count(\"a\")", __FILE__, __LINE__) }
end

class TestAccuracy < Test::Unit::TestCase
  include RperfTestHelper

  # Strings whose count takes ~5-15 ms, by a calibration in this process.
  def probe_strings
    big = "abcdefgh" * 1_000_000
    t = thread_cpu_now
    4.times { big.count("a") }
    per_byte = (thread_cpu_now - t) / 4 / big.bytesize
    AccuracyProbe::METHODS.each_index.map do |i|
      ms = 5 + 10.0 * i / (AccuracyProbe::METHODS.size - 1)
      "abcdefgh" * [(ms / 1000 / per_byte / 8).round, 1].max
    end
  end

  def test_c_calls_that_keep_the_gvl_get_their_own_time
    strings = probe_strings
    order = (AccuracyProbe::METHODS.each_index.to_a * 5).shuffle(random: Random.new(7))
    RPERF_BACKENDS.product(RPERF_MODES).each do |backend, mode|
      clock = mode == :cpu ? Process::CLOCK_THREAD_CPUTIME_ID : Process::CLOCK_MONOTONIC
      spent = Hash.new(0)
      result = Rperf.start(frequency: 1000, mode: mode, backend: backend) do
        order.each do |i|
          m = AccuracyProbe::METHODS[i]
          a = Process.clock_gettime(clock, :nanosecond)
          AccuracyProbe.send(m, strings[i])
          spent[m] += Process.clock_gettime(clock, :nanosecond) - a
        end
      end
      errors = spent.to_h do |m, truth|
        got = rperf_weight_with(result, "AccuracyProbe.#{m}")
        [m, (got - truth).abs.to_f / truth]
      end
      median = errors.values.sort[errors.size / 2]
      # Periods the backend's tick missed whole (its thread off the CPU on
      # a busy machine; the result counts them): a call no tick reached
      # goes to the next sampled one, so at most the missed time leaves
      # some methods and as much reaches others (2 x missed in all). A
      # method is off by at most that over its own time (max); the six
      # methods at or above the median share it (median).
      missed = 2.0 * (result[:timer_overruns] || 0) * 1_000_000
      least = spent.values.min
      ctx = "#{backend}/#{mode}: missed #{missed} ns, errors #{errors.transform_values { |e| e.round(4) }}\n" \
            "#{rperf_describe(result)}"
      assert_operator(median, :<, 0.01 + missed / (6 * least), "median relative error of the C calls #{ctx}")
      assert_operator(errors.values.max, :<, 0.5 + missed / least, "no method off by half its time #{ctx}")
    end
  end
end
