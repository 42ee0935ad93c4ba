# frozen_string_literal: true
#
# A Ractor's number must not depend on a tick reaching it: the :nanosleep
# timer thread can be off the CPU for longer than a short Ractor lives (a
# loaded machine), and a Ractor that never ran a job used to end with
# Ractor id 0. At 1 Hz no tick reaches Ractors that each run a few ms of
# CPU, so every number here comes from the job asked for at RESUMED, or from
# the re-signal after another Ractor's flush took it (docs/backends.md,
# "Numbered at the first turn"). :signal has no such re-signal and is not
# asserted here.
require_relative "helper"

class TestShortRactors < Test::Unit::TestCase
  include RperfTestHelper

  def test_ractors_shorter_than_an_interval_are_numbered_under_nanosleep
    run = run_child(<<~RUBY, timeout: 120)
      Warning[:experimental] = false
      Rperf.start(backend: :nanosleep, mode: :cpu, frequency: 1)
      5.times do
        rs = 8.times.map { Ractor.new { cpu_spin(0.005) } }
        rs.each(&:take)
      end
      data = Rperf.stop
      ids = data[:threads].reject { |t| t[:ractor_id] == 1 }.map { |t| t[:ractor_id] }
      child_report(ids: ids)
    RUBY
    assert_child_ok(run, "nanosleep")
    ids = run.report["ids"]
    assert_equal(40, ids.size, "one thread per Ractor, none of them main-Ractor #{ids}")
    assert_equal([], ids.select { |i| i < 2 }, "every Ractor numbered #{ids}")
    assert_equal(40, ids.uniq.size, "one number per Ractor #{ids}")
  end
end
