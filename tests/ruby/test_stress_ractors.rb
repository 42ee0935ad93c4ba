# frozen_string_literal: true
#
# Stress (label `stress`): Ractors created and finished while profiling at
# 10 kHz, and start/snapshot/stop cycles while 8 Ractors run. Nothing may
# crash, nothing may be sampled after stop, and the weight of work done in
# Ractors that finished must still be there (up to what dropped_samples
# reports).
require_relative "helper"

class TestStressRactors < Test::Unit::TestCase
  include RperfTestHelper

  PRELUDE = <<~RUBY
    Warning[:experimental] = false
    def rperf_stress_work(s) = cpu_spin(s)
  RUBY

  def test_hundred_ractors_created_and_finished_at_10khz
    RPERF_BACKENDS.each do |backend|
      run = run_child(<<~RUBY, timeout: 300)
        #{PRELUDE}
        Rperf.start(backend: :#{backend}, mode: :cpu, frequency: 10_000)
        used = 0.0
        10.times do
          rs = 10.times.map { Ractor.new { rperf_stress_work(0.01) } }
          used += rs.sum { |r| ractor_value(r) }
        end
        data = Rperf.stop
        w = data[:aggregated_samples].select { |s| s[0].any? { |f| f[1] == "Object#rperf_stress_work" } }
        child_report(weight: w.sum { |s| s[1] }, used_ns: (used * 1e9).to_i,
                     dropped: data[:dropped_samples],
                     ractor_threads: data[:threads].count { |t| t[:ractor_id] > 1 })
      RUBY
      what = backend.to_s
      assert_child_ok(run, what)
      rep = run.report
      assert_operator(rep["ractor_threads"], :>=, 100, "#{what}: every Ractor's thread is in the table #{rep}")
      if rep["dropped"].zero?
        assert_in_delta(rep["used_ns"], rep["weight"], rep["used_ns"] * 0.35,
                        "#{what}: the CPU time of finished Ractors is kept #{rep}")
      else
        assert_operator(rep["weight"], :>, 0, "#{what}: #{rep}")
      end
    end
  end

  # The bootstrap signal at start must not reach Ruby's timer thread (its
  # timeslice wait would start over each time and starve the main Ractor's
  # other threads of the GVL): only runnable tasks get it.
  def test_start_stop_cycles_with_a_ractor_alive_keep_threads_switching
    RPERF_BACKENDS.each do |backend|
      run = run_child(<<~RUBY, timeout: 120)
        #{PRELUDE}
        r = Ractor.new { Ractor.receive }
        stop = false
        workers = 4.times.map { Thread.new { n = 0; until stop; rperf_stress_work(0.001); n += 1; end; n } }
        200.times do
          Rperf.start(frequency: 10_000, backend: :#{backend})
          rperf_stress_work(0.001)
          Rperf.stop
        end
        stop = true
        progress = workers.map(&:value)
        r.send(:done)
        ractor_value(r)
        child_report(progress: progress)
      RUBY
      assert_child_ok(run, backend)
      assert(run.report["progress"].all?(&:positive?), "#{backend}: every thread got the GVL #{run.report}")
    end
  end

  # Ruby 3.3.8 itself can hang in the fork child when another Ractor is
  # running Ruby code at fork time (its VM lock is inherited locked;
  # reproduced without rperf), so the Ractors here are parked in
  # Ractor.receive at the fork, after and before sampled work.
  def test_fork_while_ractors_exist
    RPERF_BACKENDS.each do |backend|
      run = run_child(<<~RUBY, timeout: 120)
        #{PRELUDE}
        Rperf.start(backend: :#{backend}, frequency: 1000, inherit: ENV["INHERIT"] == "fork" ? :fork : false)
        rs = 2.times.map do
          Ractor.new do
            rperf_stress_work(0.1)
            Ractor.main << :parked
            Ractor.receive
            rperf_stress_work(0.1)
          end
        end
        rs.size.times { Ractor.receive }
        rd, wr = IO.pipe
        pid = fork do
          rd.close
          running = Rperf.running?
          d = Rperf.start(backend: :#{backend}, frequency: 1000) { rperf_stress_work(0.05) }
          wr.write([running, d[:aggregated_samples].size, d[:threads].size].join(","))
          exit!(0)
        end
        wr.close
        child = rd.read
        Process.wait(pid)
        rs.each { |r| r.send(:go) }
        rs.each { |r| ractor_value(r) }
        data = Rperf.stop
        child_report(child: child, status: $?.exitstatus,
                     ractor_seqs: data[:threads].count { |t| t[:ractor_id] > 1 })
      RUBY
      assert_child_ok(run, backend)
      running, samples, threads = run.report["child"].split(",")
      assert_equal("false", running, "#{backend}: the fork child starts stopped")
      assert_operator(samples.to_i, :>, 0, "#{backend}: the child can profile")
      assert_equal("1", threads, "#{backend}: the child knows only its own thread")
      assert_equal(0, run.report["status"])
      assert_equal(2, run.report["ractor_seqs"], "#{backend}: the parent kept profiling its Ractors")
    end
  end

  def test_start_snapshot_stop_cycles_while_eight_ractors_run
    RPERF_BACKENDS.each do |backend|
      run = run_child(<<~RUBY, timeout: 300)
        #{PRELUDE}
        done = File.join(Dir.mktmpdir, "done").freeze
        rs = 8.times.map do
          Ractor.new(done) do |path|
            n = 0
            until File.exist?(path)
              rperf_stress_work(0.002)
              n += 1
            end
            n
          end
        end
        ok = 0
        100.times do |i|
          Rperf.start(backend: :#{backend}, mode: i.even? ? :cpu : :wall, frequency: 10_000)
          rperf_stress_work(0.002)
          Rperf.snapshot(clear: i % 3 == 0) if i % 4 == 0
          data = Rperf.stop
          ok += 1 if data.is_a?(Hash) && data[:aggregated_samples].is_a?(Array)
        end
        after = Rperf.running?
        File.write(done, "")
        loops = rs.map { |r| ractor_value(r) }
        child_report(ok: ok, running_after: after, loops: loops.size)
      RUBY
      assert_child_ok(run, backend)
      assert_equal(100, run.report["ok"], backend)
      assert_equal(false, run.report["running_after"], backend)
      assert_equal(8, run.report["loops"], backend)
    end
  end
end
