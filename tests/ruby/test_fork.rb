# frozen_string_literal: true
# fork while profiling / after profiling. With inherit: false a fork child
# starts with a stopped profiler and can start its own run; with the
# default inherit: :fork it goes on profiling and its profile joins the
# root's result (pid label, process_count), and nothing is left in the temp
# directory. Every scenario runs in its own child Ruby (which forks a
# grandchild), so a crash is reported, not fatal.
require_relative "helper"

class TestFork < Test::Unit::TestCase
  include RperfTestHelper

  # Common code for the forking child: fork, run `child_body` in the
  # grandchild, send its JSON result through a pipe, report the grandchild's
  # exit status.
  FORK_PRELUDE = <<~'RUBY'
    def rperf_parent_before_fork(s) = cpu_spin(s)
    def rperf_parent_after_fork(s) = cpu_spin(s)
    def rperf_child_work(s) = cpu_spin(s)

    def fork_and_collect
      rd, wr = IO.pipe
      pid = fork do
        rd.close
        out = yield
        wr.write(JSON.dump(out))
        wr.close
        exit 0
      end
      wr.close
      [pid, rd]
    end

    def finish_child(pid, rd)
      data = rd.read
      rd.close
      _, st = Process.wait2(pid)
      { "exitstatus" => st.exitstatus, "termsig" => st.termsig, "child" => (data.empty? ? nil : JSON.parse(data)) }
    end

    def has_label(res, label)
      res && res[:aggregated_samples].any? { |f, *| f.any? { |fr| fr[1] == label } }
    end
  RUBY

  def run_fork_scenario(body)
    run = run_child(FORK_PRELUDE + body, timeout: 120)
    assert_child_ok(run)
    run
  end

  def assert_grandchild_ok(rep, ctx)
    assert_nil(rep["termsig"], "forked child killed by signal #{rep['termsig']} " \
                               "(#{rep['termsig'] && Signal.signame(rep['termsig'])}) #{ctx}")
    assert_equal(0, rep["exitstatus"], ctx)
    assert_not_nil(rep["child"], "child sent its result #{ctx}")
  end

  def test_fork_while_profiling
    each_combo do |backend, mode|
      run = run_fork_scenario(<<~RUBY)
        B = :#{backend}; M = :#{mode}
        Rperf.start(frequency: 1000, mode: M, backend: B, inherit: false)
        Rperf.label(side: "parent") { rperf_parent_before_fork(0.05) }
        pid, rd = fork_and_collect do
          out = { "running" => Rperf.running?, "stop_nil" => Rperf.stop.nil?,
                  "snapshot_nil" => Rperf.snapshot.nil?, "labels" => Rperf.labels.to_s }
          cpu_spin(0.05) # an inherited timer or pending signal would strike here
          r = Rperf.start(frequency: 1000, mode: M, backend: B) { rperf_child_work(0.08) }
          out["child_has_work"] = has_label(r, "Object#rperf_child_work")
          out["child_has_parent_work"] = has_label(r, "Object#rperf_parent_before_fork")
          out["child_backend"] = r[:backend].to_s
          out["child_label_sets"] = (r[:label_sets] || []).map(&:to_s)
          out["running_after"] = Rperf.running?
          out
        end
        rperf_parent_after_fork(0.1)
        rep = finish_child(pid, rd)
        rperf_parent_after_fork(0.02)
        res = Rperf.stop
        rep["parent_has_before"] = has_label(res, "Object#rperf_parent_before_fork")
        rep["parent_has_after"] = has_label(res, "Object#rperf_parent_after_fork")
        rep["parent_has_child_work"] = has_label(res, "Object#rperf_child_work")
        child_report(rep)
      RUBY
      ctx = "#{backend}/#{mode}\n#{run.describe}"
      rep = run.report
      assert_not_nil(rep, ctx)
      assert_grandchild_ok(rep, ctx)
      c = rep["child"]
      assert_false(c["running"], "profiler is stopped in the child #{ctx}")
      assert_true(c["stop_nil"], "stop returns nil in the child #{ctx}")
      assert_true(c["snapshot_nil"], "snapshot returns nil in the child #{ctx}")
      assert_true(c["child_has_work"], "a fresh run in the child gets samples #{ctx}")
      assert_false(c["child_has_parent_work"], "the child's run starts clean #{ctx}")
      assert_equal(backend.to_s, c["child_backend"], ctx)
      assert_not_include(c["child_label_sets"], { side: "parent" }.to_s, "no inherited label sets #{ctx}")
      assert_false(c["running_after"], ctx)
      assert_true(rep["parent_has_before"], "parent keeps pre-fork samples #{ctx}")
      assert_true(rep["parent_has_after"], "parent keeps profiling after the fork #{ctx}")
      assert_false(rep["parent_has_child_work"], ctx)
    end
  end

  def test_fork_while_profiling_child_does_not_restart
    # The child just works and exits normally (at_exit handlers run).
    RPERF_BACKENDS.each do |backend|
      run = run_fork_scenario(<<~RUBY)
        Rperf.start(frequency: 10_000, backend: :#{backend}, mode: :wall, inherit: false)
        reps = 3.times.map do
          pid, rd = fork_and_collect do
            cpu_spin(0.1)
            sleep 0.01
            { "ok" => true, "running" => Rperf.running? }
          end
          rperf_parent_after_fork(0.01)
          finish_child(pid, rd)
        end
        res = Rperf.stop
        child_report("children" => reps, "parent_ok" => res.is_a?(Hash) && has_label(res, "Object#rperf_parent_after_fork"))
      RUBY
      rep = run.report
      ctx = "#{backend}\n#{run.describe}"
      assert_not_nil(rep, ctx)
      rep["children"].each do |c|
        assert_grandchild_ok(c, ctx)
        assert_false(c["child"]["running"], ctx)
      end
      assert_true(rep["parent_ok"], ctx)
    end
  end

  def test_fork_with_other_threads_running
    RPERF_BACKENDS.each do |backend|
      run = run_fork_scenario(<<~RUBY)
        Rperf.start(frequency: 5000, backend: :#{backend}, mode: :cpu, inherit: false)
        stop = false
        bg = 3.times.map { Thread.new { cpu_spin(0.001) until stop } }
        pid, rd = fork_and_collect do
          cpu_spin(0.05)
          r = Rperf.start(frequency: 5000, backend: :#{backend}) do
            Thread.new { rperf_child_work(0.03) }.join
            rperf_child_work(0.03)
          end
          { "has" => has_label(r, "Object#rperf_child_work"), "threads" => r[:detected_thread_count] }
        end
        rperf_parent_after_fork(0.05)
        rep = finish_child(pid, rd)
        stop = true
        bg.each(&:join)
        res = Rperf.stop
        rep["parent_ok"] = has_label(res, "Object#rperf_parent_after_fork")
        child_report(rep)
      RUBY
      rep = run.report
      ctx = "#{backend}\n#{run.describe}"
      assert_not_nil(rep, ctx)
      assert_grandchild_ok(rep, ctx)
      assert_true(rep["child"]["has"], ctx)
      assert_operator(rep["child"]["threads"], :>=, 1, ctx)
      assert_operator(rep["child"]["threads"], :<=, 3, "child's run counts only its own threads #{ctx}")
      assert_true(rep["parent_ok"], ctx)
    end
  end

  def test_repeated_start_stop_then_fork
    RPERF_BACKENDS.each do |backend|
      run = run_fork_scenario(<<~RUBY)
        reps = []
        10.times do |round|
          5.times do
            Rperf.start(frequency: 10_000, backend: :#{backend}, mode: round.even? ? :cpu : :wall)
            cpu_spin(0.002)
            Rperf.stop
          end
          # fork immediately after stop: no late timer signal may reach the child
          pid, rd = fork_and_collect do
            cpu_spin(0.02)
            { "running" => Rperf.running? }
          end
          reps << finish_child(pid, rd)
        end
        child_report("children" => reps)
      RUBY
      rep = run.report
      ctx = "#{backend}\n#{run.describe}"
      assert_not_nil(rep, ctx)
      assert_equal(10, rep["children"].size, ctx)
      rep["children"].each do |c|
        assert_grandchild_ok(c, ctx)
        assert_false(c["child"]["running"], ctx)
      end
    end
  end

  def test_fork_in_raw_mode_and_with_snapshot
    run = run_fork_scenario(<<~'RUBY')
      Rperf.start(frequency: 2000, aggregate: false, inherit: false)
      rperf_parent_before_fork(0.03)
      pid, rd = fork_and_collect do
        r = Rperf.start(frequency: 2000) { rperf_child_work(0.03) }
        s = nil
        Rperf.start(frequency: 2000)
        rperf_child_work(0.02)
        s = Rperf.snapshot
        Rperf.stop
        { "has" => has_label(r, "Object#rperf_child_work"), "snap" => has_label(s, "Object#rperf_child_work"),
          "raw" => r.key?(:raw_samples) }
      end
      rperf_parent_after_fork(0.03)
      rep = finish_child(pid, rd)
      res = Rperf.stop
      rep["parent_raw"] = res[:raw_samples].any? { |f, *| f.any? { |fr| fr[1] == "Object#rperf_parent_after_fork" } }
      child_report(rep)
    RUBY
    rep = run.report
    assert_not_nil(rep, run.describe)
    assert_grandchild_ok(rep, run.describe)
    assert_true(rep["child"]["has"], run.describe)
    assert_true(rep["child"]["snap"], run.describe)
    assert_false(rep["child"]["raw"], "child's own run uses its own options")
    assert_true(rep["parent_raw"], run.describe)
  end

  # inherit: :fork (the default): every forked child, and its own forks,
  # profile with the root's settings; the root's result holds their samples
  # with a pid label (its own carry none), process_count counts them, and
  # the run's directory is gone after the stop.
  def test_forked_children_join_the_root_profile
    each_combo do |backend, mode|
      run = run_fork_scenario(<<~RUBY)
        require "tmpdir"
        Rperf.start(frequency: 1000, mode: :#{mode}, backend: :#{backend})
        rperf_parent_before_fork(0.03)
        pids = []
        pids << fork { rperf_child_work(0.05) }
        pids << fork do
          g = fork { rperf_child_work(0.05) }   # a grandchild
          rperf_child_work(0.02)
          Process.wait(g)
        end
        pids.each { |pid| Process.wait(pid) }
        res = Rperf.stop
        sets = res[:label_sets]
        by = Hash.new { |h, k| h[k] = [] }
        res[:aggregated_samples].each { |f, _w, _seq, set| by[sets[set][:pid]].concat(f.map { |fr| fr[1] }) }
        child_report("count" => res[:process_count], "pids" => by.keys.compact.size,
                     "root_child_work" => by[nil].include?("Object#rperf_child_work"),
                     "root_own" => by[nil].include?("Object#rperf_parent_before_fork"),
                     "children_work" => by.reject { |k, _| k.nil? }.values.all? { |v| v.include?("Object#rperf_child_work") },
                     "running_after" => Rperf.running?,
                     "left" => Dir.glob(File.join(Dir.tmpdir, "rperf-run-\#{Process.pid}-*")))
      RUBY
      rep = run.report
      ctx = "#{backend}/#{mode}\n#{run.describe}"
      assert_equal({ "count" => 4, "pids" => 3, "root_child_work" => false, "root_own" => true,
                     "children_work" => true, "running_after" => false, "left" => [] }, rep, ctx)
    end
  end

  # Every count of a merged result is the sum over its processes: a root
  # and two forked children, each child's counts taken from its own stop
  # (which writes its part), the root's from what its stop merged the
  # children into. A child's named thread keeps its name in the merged
  # result (1:1 threads: only they have kernel names, docs/architecture.md).
  def test_a_merged_result_adds_up_every_count_and_keeps_thread_names
    run = run_child(FORK_PRELUDE + <<~'RUBY', env: { "RUBY_MN_THREADS" => nil })
      COUNTS = %i[sampling_count trigger_count sampling_time_ns detected_thread_count dropped_samples
                  timer_overruns label_sets_overflowed].freeze
      counts = ->(d) { COUNTS.to_h { |k| [k, d[k]] }.merge(d[:allocations].slice(:sampled, :dropped, :live)) }
      own = nil
      Rperf.singleton_class.prepend(Module.new do
        define_method(:__merge_children) { |data, *args, **kw| own = counts.(data); super(data, *args, **kw) }
      end)
      Rperf.start(frequency: 1000, mode: :wall, allocations: true, alloc_interval: 16)
      rperf_parent_before_fork(0.02)
      kids = 2.times.map do |i|
        rd, wr = IO.pipe
        pid = fork do
          rd.close
          # a thread's name is read at its first sample and again every
          # 32 of its jobs: it works until its run knows the name
          Thread.new do
            Thread.current.name = "rperf-named-#{i}"
            rperf_child_work(0.01) until Rperf.snapshot[:threads].any? { |t| t[:name] == "rperf-named-#{i}" }
          end.join
          r = Rperf.stop
          named = r[:threads].find { |t| t[:name] == "rperf-named-#{i}" }
          wr.write(JSON.dump(counts.(r).merge(named: named && named[:thread_seq])))
          wr.close
        end
        wr.close
        [pid, rd]
      end
      reports = kids.to_h { |pid, rd| [pid, JSON.parse(rd.read)].tap { rd.close; Process.wait(pid) } }
      res = Rperf.stop
      sets = res[:label_sets]
      seqs = Hash.new { |h, k| h[k] = [] }
      res[:aggregated_samples].each { |_f, _w, seq, set| seqs[sets[set][:pid]] |= [seq] }
      named = reports.keys.each_with_index.to_h do |pid, i|
        t = res[:threads].find { |th| th[:name] == "rperf-named-#{i}" }
        [pid, t && seqs[pid].include?(t[:thread_seq])]
      end
      child_report("own" => own, "kids" => reports, "merged" => counts.(res), "processes" => res[:process_count],
                   "named" => named)
    RUBY
    assert_child_ok(run)
    rep = run.report
    assert_equal(3, rep["processes"], run.describe)
    rep["kids"].each_value { |k| assert_not_nil(k.delete("named"), "the child saw its named thread\n#{run.describe}") }
    rep["merged"].each do |key, value|
      want = rep["own"][key] + rep["kids"].values.sum { |k| k[key] }
      assert_equal(want, value, "#{key}: the root's #{rep['own'][key]} and the children's " \
                                "#{rep['kids'].values.map { |k| k[key] }}\n#{run.describe}")
    end
    assert_operator(rep["merged"]["sampling_count"], :>, rep["own"]["sampling_count"], run.describe)
    assert_equal(rep["kids"].keys.to_h { |pid| [pid, true] }, rep["named"],
                 "each child's named thread, under its name, on the child's samples\n#{run.describe}")
  end

  # A child that outlives the root's stop has nowhere to write: one line on
  # stderr at its end, no file left behind, no effect on its exit status.
  def test_a_child_outliving_the_root_stop
    run = run_fork_scenario(<<~'RUBY')
      require "tmpdir"
      Rperf.start(frequency: 1000)
      rd, wr = IO.pipe
      started_r, started_w = IO.pipe
      # the child's block runs after its run restarted (the fork hook):
      # the root stops only then, or the child would find no run to join
      pid = fork { wr.close; started_w.write("s"); started_w.close; rd.read; rperf_child_work(0.01); exit 3 }
      rd.close
      started_w.close
      started_r.read(1)
      res = Rperf.stop
      wr.close
      _, st = Process.wait2(pid)
      child_report("status" => st.exitstatus, "count" => res[:process_count],
                   "left" => Dir.glob(File.join(Dir.tmpdir, "rperf-run-#{Process.pid}-*")))
    RUBY
    assert_equal({ "status" => 3, "count" => 1, "left" => [] }, run.report, run.describe)
    assert_match(/^rperf: process \d+ ended after the run it was part of; its profile is left out$/, run.stderr)
  end

  def test_inherit_is_validated
    assert_raise_with_message(ArgumentError, "inherit must be :fork, true or false, got :spawn") do
      Rperf.start(inherit: :spawn)
    end
    assert_false(Rperf.running?)
  end

  # The root's snapshots hold the children that have ended: each child's
  # part once when the snapshots clear, in every window when they do not.
  def test_root_snapshots_hold_the_ended_children
    run = run_fork_scenario(<<~'RUBY')
      Rperf.start(frequency: 1000)
      pid = fork { rperf_child_work(0.05) }
      Process.wait(pid)
      kept1 = Rperf.snapshot
      kept2 = Rperf.snapshot
      cleared = Rperf.snapshot(clear: true)
      after = Rperf.snapshot
      res = Rperf.stop
      child = ->(d) { d[:aggregated_samples].any? { |f, _w, _s, set| (d[:label_sets] || [{}])[set][:pid] == pid && f.any? { |fr| fr[1] == "Object#rperf_child_work" } } }
      child_report("kept" => [child.(kept1), child.(kept2)], "cleared" => child.(cleared),
                   "after" => child.(after), "stop" => child.(res), "count" => [cleared[:process_count], res[:process_count]])
    RUBY
    assert_equal({ "kept" => [true, true], "cleared" => true, "after" => false, "stop" => false, "count" => [2, 1] },
                 run.report, run.describe)
  end

  # A fork child that starts its own run (the rperf 0.6 way, whose fork
  # child was stopped) gets it: the inherited run gives way, and what it
  # had sampled still joins the root's profile.
  def test_a_child_own_start_replaces_the_inherited_run
    run = run_fork_scenario(<<~'RUBY')
      Rperf.start(frequency: 1000)
      rd, wr = IO.pipe
      pid = fork do
        rd.close
        rperf_child_work(0.03)
        r = Rperf.start(frequency: 500, mode: :wall) { rperf_parent_after_fork(0.02) }
        wr.write(JSON.dump("own" => r[:frequency], "mode" => r[:mode].to_s))
      end
      wr.close
      own = JSON.parse(rd.read)
      Process.wait(pid)
      res = Rperf.stop
      inherited = res[:aggregated_samples].any? { |f, _w, _s, set| (res[:label_sets] || [{}])[set][:pid] == pid && f.any? { |fr| fr[1] == "Object#rperf_child_work" } }
      child_report(own.merge("inherited_part_joined" => inherited))
    RUBY
    assert_equal({ "own" => 500, "mode" => "wall", "inherited_part_joined" => true }, run.report, run.describe)
  end

  # inherit: true: a Ruby program spawned during the run is profiled
  # through the environment and joins the root's profile; the variables
  # are the application's again after the stop, and nothing is left in the
  # temp directory.
  def test_inherit_true_takes_in_spawned_ruby_programs
    run = run_fork_scenario(<<~'RUBY')
      require "tmpdir"
      before = ENV.to_h
      Rperf.start(frequency: 1000, inherit: true)
      during = ENV["RPERF_CHILD_DIR"] ? true : false
      system(RbConfig.ruby, "-e", "def rperf_spawned_work = (t = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID); nil while Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - t < 0.05); rperf_spawned_work")
      res = Rperf.stop
      spawned = res[:aggregated_samples].any? { |f, _w, _s, set| res[:label_sets][set][:pid] && f.any? { |fr| fr[1] == "Object#rperf_spawned_work" } }
      child_report("count" => res[:process_count], "spawned" => spawned, "during" => during,
                   "env_back" => ENV.to_h == before,
                   "left" => Dir.glob(File.join(Dir.tmpdir, "rperf-run-#{Process.pid}-*")))
    RUBY
    assert_equal({ "count" => 2, "spawned" => true, "during" => true, "env_back" => true, "left" => [] },
                 run.report, run.describe)
  end

  # ... with the run's allocation sampling too: a spawned program's
  # allocations join the root's (mode :alloc, and time with allocations).
  def test_inherit_true_passes_allocation_sampling_to_spawned_programs
    run = run_fork_scenario(<<~'RUBY')
      class RperfSpawnedThing; end
      prog = "class RperfSpawnedThing; end; def rperf_spawned_allocs = 40_000.times { RperfSpawnedThing.new }; rperf_spawned_allocs"
      out = [{ mode: :alloc }, { mode: :cpu, allocations: true }].map do |opts|
        Rperf.start(frequency: 1000, inherit: true, alloc_interval: 16, **opts)
        system(RbConfig.ruby, "-e", prog)
        res = Rperf.stop
        res[:allocations][:samples].select { |f, cls, *| cls == "RperfSpawnedThing" && f.any? { |fr| fr[1] == "Object#rperf_spawned_allocs" } }
                                   .sum { |s| s[2] }
      end
      child_report("estimates" => out)
    RUBY
    est = run.report["estimates"]
    assert_equal(2, est&.size, run.describe)
    est.each { |e| assert_in_delta(40_000, e, 6_000, run.describe) }
  end

  # A run with forked children that is left going at exit, without an
  # output, still removes its directory there.
  def test_exit_without_stop_leaves_no_directory
    Dir.mktmpdir("rperf-fork-tmp") do |tmp|
      run = run_child(<<~'RUBY', env: { "TMPDIR" => tmp })
        Rperf.start(frequency: 1000)
        pid = fork { cpu_spin(0.01) }
        Process.wait(pid)
      RUBY
      assert(run.success?, run.describe)
      assert_equal([], Dir.children(tmp))
    end
  end
end
