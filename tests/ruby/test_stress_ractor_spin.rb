# frozen_string_literal: true
#
# Stress (label `stress`): a Ractor whose threads spin must never hang the
# process under the profiler. The Ractor starts 1-4 spinning
# threads and a sleeper and returns; Ruby kills its threads, whose `ensure`
# reports to the main Ractor. Under the profiler this hung in ~2-3 % of runs:
# the sampling job called a Ruby method, whose return checks interrupts;
# there the Ractor's thread switch let the Ractor's main thread post the
# kill, the kill was taken inside the job and its throw was swallowed by
# rb_postponed_job_flush, so the thread spun on forever (docs/backends.md,
# "The sampling job calls no Ruby method").
#
# Each configuration (spinning threads × mode × backend × frequency, the 32
# of bench/stress_ractor_spin.rb) runs in child Rubies with the env
# auto-start, a per-run timeout, while two busy shell loops (always killed)
# load the CPUs. Sized for CI: 3 rounds = 96 runs, ~50 s (before the fix
# 5 of 96 such runs hung); the full count is the bench.
require_relative "helper"
require_relative "../../bench/stress_ractor_spin"

class TestStressRactorSpin < Test::Unit::TestCase
  include RperfTestHelper

  ROUNDS = Integer(ENV.fetch("RPERF_SPIN_ROUNDS", "3"))
  TIMEOUT = 20 # seconds per run; a working run takes about 1 s under load

  def test_spinning_ractor_threads_never_hang_the_process
    configs = RactorSpinStress.all_configs(control: false)
    stats = RactorSpinStress.run(configs, rounds: ROUNDS, lib: RPERF_BUILD_LIB, timeout: TIMEOUT)
    hung = stats.select { |_, s| s[:hangs].positive? }.map { |c, s| "#{c.label}: #{s[:hangs]}/#{s[:runs]}" }
    failed = stats.flat_map { |c, s| s[:failures].map { |f| "#{c.label}: #{f.inspect[0, 400]}" } }
    runs = stats.values.sum { |s| s[:runs] }
    assert_equal(configs.size * ROUNDS, runs)
    assert_empty(hung, "hangs (of #{runs} runs)")
    assert_empty(failed, "runs that exited wrongly")
  end
end
