# frozen_string_literal: true
#
# A Ractor's number must not depend on a tick reaching it: the timer thread
# can be off the CPU for longer than a short Ractor lives (a loaded
# machine), and a Ractor that never ran a job used to end with Ractor id 0.
# At 1 Hz no tick reaches Ractors that each run a few ms of CPU, so every
# number here comes from the job asked for at RESUMED, or from the
# re-signal after another thread's job run took that request (the job
# bitset is one per VM; docs/backends.md, "Numbered at the first turn").
# Without the re-signal :holder left ~2 Ractors in 40 unnumbered in every
# run; with it only after a numbering run, :nanosleep lost one about once
# in 40 runs (a run by an already numbered thread took the bit); :signal,
# before it had the re-signal, left 3-8 Ractors in 40 unnumbered in every
# run. A request every re-signal missed (rare, under load) is covered by
# the thread's EXITED, which numbers a thread its Ractor never numbered.
require_relative "helper"

class TestShortRactors < Test::Unit::TestCase
  include RperfTestHelper

  %i[holder nanosleep signal].each do |backend|
    define_method("test_ractors_shorter_than_an_interval_are_numbered_under_#{backend}") do
      run = run_child(<<~RUBY, timeout: 120)
        Warning[:experimental] = false
        Rperf.start(backend: :#{backend}, mode: :cpu, frequency: 1)
        5.times do
          rs = 8.times.map { Ractor.new { cpu_spin(0.005) } }
          rs.each { |r| ractor_value(r) }
        end
        data = Rperf.stop
        ids = data[:threads].reject { |t| t[:ractor_id] == 1 }.map { |t| t[:ractor_id] }
        child_report(ids: ids)
      RUBY
      assert_child_ok(run, backend.to_s)
      ids = run.report["ids"]
      assert_equal(40, ids.size, "one thread per Ractor, none of them main-Ractor #{ids}")
      assert_equal([], ids.select { |i| i < 2 }, "every Ractor numbered #{ids}")
      assert_equal(40, ids.uniq.size, "one number per Ractor #{ids}")
    end
  end
end
