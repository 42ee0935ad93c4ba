# frozen_string_literal: true
#
# Stress (label `stress`): the lifecycle stress suite of bench/stress.rb in a
# size that fits CI (RPERF_STRESS_SCALE, default 0.05; 1 = the full size of
# docs/reliability.md): start/stop cycles under GC.stress and GC.compact,
# threads created and exiting at 10 kHz, forks while profiling, exits
# without stop, stop/start/snapshot storms with 8 Ractors labelling. Every
# scenario must lose nothing and crash nothing.
require_relative "helper"

class TestStressLifecycle < Test::Unit::TestCase
  include RperfTestHelper

  SCALE = ENV.fetch("RPERF_STRESS_SCALE", "0.05")

  def mn_main? = ENV["RUBY_MN_THREADS"].to_i.positive?

  def test_stress_suite_loses_nothing
    bench = File.expand_path("../../bench/stress.rb", __dir__)
    run = run_command([RbConfig.ruby, "-I", RPERF_BUILD_LIB, bench, "--scale=#{SCALE}", "--json"],
                      timeout: 900)
    rows = run.stdout.lines.grep(/\ARPERF_STRESS /).map { |l| JSON.parse(l.sub("RPERF_STRESS ", "")) }
    # cycles, forks: one row per backend; threads, exits: per backend and
    # mode; storms, windows: one
    assert_equal(6 * 3 + 2, rows.size, "every scenario reported\n#{run.describe}")
    rows.each do |row|
      what = "#{row['scenario']}: #{row}"
      if row["timed_out"] && mn_main?
        # Ruby 3.3's M:N scheduler loses wake-ups, with or without the
        # profiler (docs/reliability.md, "Ruby's M:N scheduler loses
        # wake-ups"; bench/mn_hang.rb): a thread sleeping in the main
        # Ractor is now and then never woken. Reported with the child's
        # stacks (stderr), not failed: only a Ruby with the upstream fix
        # could tell the profiler's hangs from Ruby's here.
        notify("known M:N hang: #{what}\n#{run.stderr.lines.last(40).join}")
        next
      end
      assert_equal(0, row["crashed"], what)
      assert_equal(0, row["lost"], what)
      # an accounting check (threads' sampled weight against their own
      # clocks), generous: the figure itself goes to docs/reliability.md
      assert_in_delta(1.0, row["weight_ratio"], 0.2, what) if row.key?("weight_ratio")
    end
  end
end
