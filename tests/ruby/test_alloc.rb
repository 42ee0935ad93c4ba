# frozen_string_literal: true
# Allocation sampling (mode: :alloc, allocations: true) and the live heap:
# estimates per method and class against known counts at the default
# interval, C methods as allocation sites, the live heap after GC, through
# compaction and across a clearing snapshot, GC.stress, threads, labels,
# deferred runs, fork, a stop while other threads allocate, and bad options.
require_relative "helper"

class AllocTestPoint
  def initialize(x) = @x = x
end

# Workloads with known allocation counts (one object per iteration each).
def alloc_points(n) = n.times { |i| AllocTestPoint.new(i) }
def alloc_pairs(n) = n.times { |i| [i, i] }
def alloc_hashes(n) = n.times { |i| { k: i } }
# Integer#to_s is a C method: its Strings are allocated with it as the leaf
def alloc_in_c(n) = n.times { |i| i.to_s }
def alloc_keep(keep, n) = n.times { |i| keep << [i] }
def alloc_churn(n) = n.times { |i| [i] }
def alloc_in_ractor(n) = n.times { |i| [i, i] }

class TestAlloc < Test::Unit::TestCase
  include RperfTestHelper

  def teardown
    Rperf.stop if Rperf.running?
    GC.stress = false
  end

  # {[innermost workload method, class] => [alloc_objects, alloc_bytes, inuse_objects, inuse_bytes]}
  def by_method(data)
    out = Hash.new { |h, k| h[k] = [0, 0, 0, 0] }
    data[:allocations][:samples].each do |frames, cls, *vals, _seq, _set|
      m = frames.map { |f| f[1] }.find { |l| l.start_with?("Object#alloc_") }
      next unless m

      vals.each_with_index { |v, i| out[[m, cls]][i] += v }
    end
    out
  end

  def test_estimates_per_method_are_within_5_percent_at_the_default_interval
    n = 6_000_000
    data = Rperf.start(mode: :alloc) do
      alloc_points(n)
      alloc_pairs(n)
      alloc_hashes(n)
      alloc_in_c(n)
    end
    assert_equal(:alloc, data[:mode])
    assert_equal(Rperf::DEFAULT_ALLOC_INTERVAL, data[:allocations][:interval])
    assert_equal([], data[:aggregated_samples], "an allocation-only run records no time")
    got = by_method(data)
    ctx = got.inspect
    { ["Object#alloc_points", "AllocTestPoint"] => n, ["Object#alloc_pairs", "Array"] => n,
      ["Object#alloc_hashes", "Hash"] => n, ["Object#alloc_in_c", "String"] => n }.each do |key, want|
      est = got[key][0]
      assert_in_delta(want, est, want * 0.05, "#{key.inspect}: #{est} estimated for #{want}\n#{ctx}")
      # bytes are slots: every object of these classes fills at least one 40-byte slot
      assert_operator(got[key][1], :>=, est * 40, "#{key.inspect} bytes")
    end
    # the C method is the allocation site's leaf frame
    leafs = data[:allocations][:samples].select { |f, c, *| c == "String" && f.any? { |x| x[1] == "Object#alloc_in_c" } }
                                        .map { |f, *| f.first[1] }.uniq
    assert_equal(["Integer#to_s"], leafs)
  end

  def test_the_live_heap_after_gc_holds_what_the_program_keeps
    keep = []
    Rperf.start(mode: :alloc, alloc_interval: 64)
    alloc_keep(keep, 300_000)
    alloc_churn(1_000_000)
    GC.start
    data = Rperf.snapshot
    got = by_method(data)
    kept = got[["Object#alloc_keep", "Array"]]
    assert_in_delta(300_000, kept[2], 300_000 * 0.08, "in use: #{kept.inspect}")
    assert_operator(kept[3], :>=, kept[2] * 40, "in-use bytes at least a slot each")
    churn = got[["Object#alloc_churn", "Array"]]
    assert_in_delta(1_000_000, churn[0], 1_000_000 * 0.08)
    assert_operator(churn[2], :<=, churn[0] / 100, "garbage collected is not in use: #{churn.inspect}")
    assert_operator(data[:allocations][:live], :>, 0)
    keep.clear
    GC.start
    data = Rperf.stop
    assert_operator(by_method(data)[["Object#alloc_keep", "Array"]][2], :<=, 3_000,
                    "released and collected: no longer in use")
  end

  # In use as of the last GC, as Go's heap profiles (what go tool pprof,
  # Parca and Pyroscope users read): objects allocated since the latest GC
  # may be garbage already, so they count once a GC has seen them live;
  # garbage made since never shows in use.
  def test_in_use_is_as_of_the_last_gc
    keep = []
    GC.start
    Rperf.start(mode: :alloc, alloc_interval: 64)
    GC.disable
    begin
      alloc_keep(keep, 100_000)
      alloc_churn(300_000)
      before = by_method(Rperf.snapshot)
    ensure
      GC.enable
    end
    assert_in_delta(100_000, before[["Object#alloc_keep", "Array"]][0], 8_000, before.inspect)
    assert_equal(0, before[["Object#alloc_keep", "Array"]][2], "no GC since: not in use yet #{before.inspect}")
    assert_equal(0, before[["Object#alloc_churn", "Array"]][2], "garbage not collected yet is not in use")
    GC.start
    after = by_method(Rperf.stop)
    assert_in_delta(100_000, after[["Object#alloc_keep", "Array"]][2], 8_000, "seen live by a GC #{after.inspect}")
    assert_operator(after[["Object#alloc_churn", "Array"]][2], :<=, 3_000, "collected")
  end

  def test_compaction_moves_the_live_heap_with_it
    omit("GC.compact is not supported here") unless GC.respond_to?(:compact)
    keep = []
    Rperf.start(mode: :alloc, alloc_interval: 16)
    alloc_keep(keep, 50_000)
    alloc_churn(200_000)
    GC.verify_compaction_references(expand_heap: true, toward: :empty)
    GC.compact
    data = Rperf.snapshot
    kept = by_method(data)[["Object#alloc_keep", "Array"]]
    assert_in_delta(50_000, kept[2], 50_000 * 0.08, "kept objects followed through compaction: #{kept.inspect}")
    keep.clear
    GC.start
    assert_operator(by_method(Rperf.stop)[["Object#alloc_keep", "Array"]][2], :<=, 500)
  end

  def test_a_clearing_snapshot_starts_counting_again_and_keeps_the_live_heap
    keep = []
    Rperf.start(mode: :alloc, alloc_interval: 32)
    alloc_keep(keep, 100_000)
    first = Rperf.snapshot(clear: true)
    assert_in_delta(100_000, by_method(first)[["Object#alloc_keep", "Array"]][0], 8_000)
    alloc_churn(100_000)
    GC.start
    second = Rperf.stop
    got = by_method(second)
    kept = got[["Object#alloc_keep", "Array"]]
    assert_equal(0, kept[0], "allocated in the earlier window")
    assert_in_delta(100_000, kept[2], 8_000, "still in use")
    assert_in_delta(100_000, got[["Object#alloc_churn", "Array"]][0], 8_000)
    assert_operator(second[:allocations][:sampled], :<, first[:allocations][:sampled] * 2)
  end

  def test_gc_stress_under_the_hook
    keep = []
    GC.stress = true
    Rperf.start(mode: :alloc, alloc_interval: 2)
    alloc_keep(keep, 500)
    alloc_churn(500)
    data = Rperf.stop
    GC.stress = false
    got = by_method(data)
    # 500 objects at one in two: an estimate of sd ~22
    assert_in_delta(500, got[["Object#alloc_keep", "Array"]][2], 150)
    assert_operator(got[["Object#alloc_churn", "Array"]][2], :<=, 20)
  end

  def test_allocations_beside_time_with_threads_and_labels
    data = Rperf.start(mode: :wall, allocations: true, alloc_interval: 16) do
      Rperf.label(job: "pairs") { alloc_pairs(200_000) }
      Thread.new { alloc_points(100_000) }.join
    end
    assert_equal(:wall, data[:mode])
    assert_not_empty(data[:aggregated_samples], "time samples as well")
    sets = data[:label_sets]
    pairs = data[:allocations][:samples].select { |f, c, *| c == "Array" && f.any? { |x| x[1] == "Object#alloc_pairs" } }
    assert_not_empty(pairs)
    pairs.each { |*, set| assert_equal({ job: "pairs" }, sets[set]) }
    points = data[:allocations][:samples].select { |_f, c, *| c == "AllocTestPoint" }
    assert_not_empty(points)
    main_seq = pairs.first[-2]
    points.each { |s| assert_not_equal(main_seq, s[-2], "the other thread's allocations are its own") }
  end

  def test_a_deferred_run_samples_allocations_inside_profile_blocks_only
    # ~5,000 records of deep stacks in a burst: a ring that holds them all
    # even when the worker gets no CPU meanwhile (a loaded machine)
    data = Rperf.start(mode: :cpu, defer: true, allocations: true, alloc_interval: 8, ring_size: 1 << 18) do
      alloc_points(100_000)
      Rperf.profile { alloc_pairs(40_000) }
    end
    assert_equal(0, data[:dropped_samples])
    got = by_method(data)
    assert_equal(0, got[["Object#alloc_points", "AllocTestPoint"]][0])
    assert_in_delta(40_000, got[["Object#alloc_pairs", "Array"]][0], 4_000)
  end

  def test_a_run_without_allocations_has_no_allocation_data
    data = Rperf.start(mode: :cpu) { alloc_pairs(10_000) }
    assert_false(data.key?(:allocations))
  end

  def test_fork_children_and_the_parent_keep_working
    Rperf.start(mode: :alloc, alloc_interval: 16, inherit: false)
    alloc_pairs(10_000)
    pid = fork do
      alloc_pairs(100_000)
      exit!(Rperf.running? ? 3 : 0)
    end
    _, st = Process.wait2(pid)
    assert_equal(0, st.exitstatus, "the child runs on, not profiled")
    data = Rperf.stop
    assert_in_delta(10_000, by_method(data)[["Object#alloc_pairs", "Array"]][0], 2_000)
  end

  # inherit: :fork (the default): a forked child samples its allocations
  # with the same settings, and its heap profile joins the root's at the
  # root's stop (pid label); its windows (RPERF_WINDOW_SECONDS) add their
  # allocations, and only its newest part counts for the objects in use.
  def test_forked_children_join_the_root_heap_profile
    script = <<~'RUBY'
      def child_keep(keep, n) = n.times { |i| keep << [i] }
      def child_churn(n) = n.times { |i| [i] }
      Rperf.start(mode: :alloc, alloc_interval: 16)
      pid = fork do
        keep = []
        child_keep(keep, 100_000)
        sleep 1.5                    # a window is written meanwhile
        child_churn(100_000)
        GC.start
      end
      Process.wait(pid)
      data = Rperf.stop
      sets = data[:label_sets]
      sum = Hash.new(0)
      data[:allocations][:samples].each do |frames, cls, ao, ab, io, ib, seq, set|
        m = frames.map { |f| f[1] }.find { |l| l.start_with?("Object#child_") }
        next unless m
        k = "#{m} #{cls} #{sets[set][:pid] == pid}"
        sum["#{k} ao"] += ao
        sum["#{k} io"] += io
      end
      child_report("sum" => sum, "processes" => data[:process_count])
    RUBY
    run = run_child(script, env: { "RPERF_WINDOW_SECONDS" => "1" }, timeout: 120)
    assert_child_ok(run)
    r = run.report
    assert_not_nil(r, run.describe)
    sum = r["sum"]
    assert_equal(2, r["processes"], run.describe)
    assert_in_delta(100_000, sum["Object#child_keep Array true ao"], 10_000, sum.inspect)
    assert_in_delta(100_000, sum["Object#child_keep Array true io"], 10_000, "in use once, not per window: #{sum.inspect}")
    assert_in_delta(100_000, sum["Object#child_churn Array true ao"], 10_000, sum.inspect)
    assert_operator(sum["Object#child_churn Array true io"], :<=, 2_000, sum.inspect)
  end

  # A run recording time and allocations: a forked child's parts carry
  # both, so the root's stop holds the child's time samples and its
  # allocations (pid label, one thread numbering for both), for cpu and
  # wall.
  COMBINED_PRELUDE = <<~'RUBY'
    class RperfForkedGadget; end
    def child_make_gadgets(n) = n.times { $gadgets << RperfForkedGadget.new }
    def child_burn_cpu(s) = cpu_spin(s)
    # the child's gadget allocations and its time in child_burn_cpu in `data`:
    # {"ao", "io", "time", "alloc_seqs", "time_seqs", "threads"}
    def child_part(data, pid)
      sets = data[:label_sets]
      mine = ->(set) { sets[set || 0][:pid] == pid }
      r = { "ao" => 0, "io" => 0, "time" => 0, "alloc_seqs" => [], "time_seqs" => [] }
      data[:allocations][:samples].each do |frames, cls, ao, _ab, io, _ib, seq, set|
        next unless mine.(set) && cls == "RperfForkedGadget" &&
                    frames.any? { |f| f[1] == "Object#child_make_gadgets" }
        r["ao"] += ao
        r["io"] += io
        r["alloc_seqs"] |= [seq]
      end
      data[:aggregated_samples].each do |frames, w, seq, set|
        next unless mine.(set) && frames.any? { |f| f[1] == "Object#child_burn_cpu" }
        r["time"] += w
        r["time_seqs"] |= [seq]
      end
      r["threads"] = data[:threads].map { |t| t[:thread_seq] }
      r
    end
    $gadgets = []
  RUBY
  GADGETS = 50_000

  def test_forked_children_of_a_time_and_allocation_run_bring_both
    script = COMBINED_PRELUDE + <<~RUBY
      out = {}
      %i[cpu wall].each do |mode|
        Rperf.start(mode: mode, allocations: true, alloc_interval: 16)
        pid = fork do
          child_make_gadgets(#{GADGETS})
          GC.start # in use as of the last GC: a GC that sees them live
          child_burn_cpu(0.1)
        end
        Process.wait(pid)
        data = Rperf.stop
        out[mode] = child_part(data, pid).merge("processes" => data[:process_count],
                                                "root_seqs" => data[:aggregated_samples].select { |s| data[:label_sets][s[3]][:pid].nil? }.map { |s| s[2] }.uniq)
      end
      child_report(out)
    RUBY
    run = run_child(script, timeout: 120)
    assert_child_ok(run)
    rep = run.report
    assert_not_nil(rep, run.describe)
    %w[cpu wall].each do |mode|
      r = rep[mode]
      assert_equal(2, r["processes"], "#{mode}: #{r}")
      assert_operator(r["time"], :>, 0, "#{mode}: the child's time samples: #{r}")
      assert_in_delta(GADGETS, r["ao"], GADGETS / 10, "#{mode}: the child's allocations: #{r}")
      assert_in_delta(GADGETS, r["io"], GADGETS / 10, "#{mode}: the child's objects in use at its end: #{r}")
      # one thread numbering per process: its allocations and its time on
      # the same thread, one the root's own samples do not use
      assert_equal(r["time_seqs"], r["alloc_seqs"], "#{mode}: #{r}")
      assert_empty(r["time_seqs"] & r["root_seqs"], "#{mode}: #{r}")
      assert_include(r["threads"], r["time_seqs"].first, "#{mode}: #{r}")
    end
  end

  # A part is two files, the time profile and the heap profile beside it;
  # one without the other (a child killed between the two writes, a
  # snapshot that took one before the other was written) merges on its own.
  def test_a_part_missing_one_of_its_two_files_still_merges
    script = COMBINED_PRELUDE + <<~RUBY
      Rperf.start(mode: :cpu, allocations: true, alloc_interval: 16)
      kids = 2.times.map do
        pid = fork do
          child_make_gadgets(#{GADGETS})
          GC.start # in use as of the last GC: a GC that sees them live
          child_burn_cpu(0.05)
        end
        Process.wait(pid)
        pid
      end
      dir = Rperf.instance_variable_get(:@run)[:inherit_dir]
      files = kids.map { |pid| Dir.children(dir).select { |n| n.start_with?("\#{pid}.") }.sort }
      File.delete(File.join(dir, "\#{kids[0]}.heap.pb.gz"))
      File.delete(File.join(dir, "\#{kids[1]}.pb.gz"))
      data = Rperf.stop
      child_report("files" => files, "kids" => kids, "processes" => data[:process_count],
                   "time_only" => child_part(data, kids[0]), "heap_only" => child_part(data, kids[1]))
    RUBY
    run = run_child(script, timeout: 120)
    assert_child_ok(run)
    rep = run.report
    assert_not_nil(rep, run.describe)
    rep["kids"].zip(rep["files"]).each do |pid, files|
      assert_equal(["#{pid}.heap.pb.gz", "#{pid}.pb.gz", "#{pid}.stat.json"], files)
    end
    assert_equal(3, rep["processes"], rep.inspect)
    assert_operator(rep["time_only"]["time"], :>, 0, rep.inspect)
    assert_equal(0, rep["time_only"]["ao"], rep.inspect)
    assert_equal(0, rep["heap_only"]["time"], rep.inspect)
    assert_in_delta(GADGETS, rep["heap_only"]["ao"], GADGETS / 10, rep.inspect)
    assert_in_delta(GADGETS, rep["heap_only"]["io"], GADGETS / 10, rep.inspect)
  end

  # The windows a running child writes hold its allocations too: a root
  # snapshot shows them (each allocation once, the objects in use once
  # however many windows held them), and a child killed with SIGKILL keeps
  # them in the root's stop.
  def test_a_running_child_s_windows_bring_its_allocations
    script = COMBINED_PRELUDE + <<~RUBY
      out = {}
      %i[cpu wall].each do |mode|
        Rperf.start(mode: mode, allocations: true, alloc_interval: 16)
        pid = fork do
          child_make_gadgets(#{GADGETS})
          GC.start # in use as of the last GC: a GC that sees them live
          child_burn_cpu(0.1)
          loop { IO.select(nil, nil, nil, 0.05) } # safepoints: the windows are taken
        end
        dir = Rperf.instance_variable_get(:@run)[:inherit_dir] # made at the fork
        seen = nil
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
        until Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          windows = Dir.children(dir).select { |n| n.start_with?("\#{pid}.w") }.map { |n| n.split(".")[1] }.uniq
          # two windows at least: the objects in use are in both
          if windows.size >= 2
            d = Rperf.snapshot
            seen = child_part(d, pid)
            break if seen["ao"] >= #{GADGETS} * 0.9 && seen["time"] > 0
          end
          IO.select(nil, nil, nil, 0.05)
        end
        Process.kill(:KILL, pid)
        Process.wait(pid)
        data = Rperf.stop
        out[mode] = { "seen" => seen, "stop" => child_part(data, pid), "processes" => data[:process_count],
                      "left" => Dir.glob(File.join(Dir.tmpdir, "rperf-run-\#{Process.pid}-*")) }
      end
      child_report(out)
    RUBY
    run = run_child(script, env: { "RPERF_WINDOW_SECONDS" => "1" }, timeout: 200)
    assert_child_ok(run)
    rep = run.report
    assert_not_nil(rep, run.describe)
    %w[cpu wall].each do |mode|
      r = rep[mode]
      seen = r["seen"]
      assert_not_nil(seen, "#{mode}: no snapshot held the running child's windows: #{r}")
      assert_operator(seen["time"], :>, 0, "#{mode}: #{r}")
      assert_in_delta(GADGETS, seen["ao"], GADGETS / 10, "#{mode}: allocations in the snapshot: #{r}")
      assert_in_delta(GADGETS, seen["io"], GADGETS / 10, "#{mode}: in use once: #{r}")
      stop = r["stop"]
      assert_equal(2, r["processes"], "#{mode}: #{r}")
      assert_operator(stop["time"], :>, 0, "#{mode}: #{r}")
      assert_in_delta(GADGETS, stop["ao"], GADGETS / 10, "#{mode}: the killed child's windows: #{r}")
      assert_in_delta(GADGETS, stop["io"], GADGETS / 10, "#{mode}: #{r}")
      assert_equal(stop["time_seqs"], stop["alloc_seqs"], "#{mode}: #{r}")
      assert_equal([], r["left"], "#{mode}: nothing left behind")
    end
  end

  def test_stop_while_other_threads_allocate
    go = true
    threads = 4.times.map { Thread.new { alloc_churn(1_000) while go } }
    5.times do
      Rperf.start(mode: :alloc, alloc_interval: 2)
      alloc_churn(20_000)
      data = Rperf.stop
      assert_operator(data[:allocations][:sampled], :>, 0)
    end
    go = false
    threads.each(&:join)
  end

  # Other Ractors' allocations are sampled (a hook in each Ractor's own
  # list) and attributed to their threads; their GCs leave the main
  # Ractor's live heap intact and readable (compaction included).
  def test_other_ractors_allocations_are_sampled_beside_the_main_ones
    Warning[:experimental] = false
    # Ractors of earlier tests collected now: Ruby 3.3 clears the VM-wide
    # event flags when it frees one (docs/architecture.md, "Allocations");
    # rperf puts them back within a few milliseconds, which a run this
    # short would see as a loss
    GC.start
    keep = []
    Rperf.start(mode: :alloc, alloc_interval: 16)
    rs = 2.times.map do
      Ractor.new do
        alloc_in_ractor(400_000)
        :done
      end
    end
    6.times do |k|
      alloc_keep(keep, 20_000)
      alloc_churn(40_000)
      GC.compact if GC.respond_to?(:compact) && k == 3
      Rperf.snapshot
    end
    assert_equal(%i[done done], rs.map { |r| ractor_value(r) })
    GC.start # in use as of the last GC: one after the last keep
    data = Rperf.stop
    assert_true(data[:allocations][:ractors])
    ractors = data[:threads].to_h { |t| [t[:thread_seq], t[:ractor_id]] }
    per_ractor = Hash.new(0)
    data[:allocations][:samples].each do |frames, cls, ao, *, seq, _set|
      next unless cls == "Array" && frames.any? { |f| f[1] == "Object#alloc_in_ractor" }

      per_ractor[ractors.fetch(seq)] += ao
    end
    assert_equal(2, per_ractor.size, per_ractor.inspect)
    per_ractor.each do |id, est|
      assert_operator(id, :>, 1)
      assert_in_delta(400_000, est, 40_000, "Ractor #{id}")
    end
    got = by_method(data)
    assert_in_delta(120_000, got[["Object#alloc_keep", "Array"]][0], 12_000)
    assert_in_delta(120_000, got[["Object#alloc_keep", "Array"]][2], 12_000, "kept, through compaction")
  end

  # With another hook in the main Ractor's list (a TracePoint here), adding
  # one to another Ractor's list would turn it off (Ruby 3.3 sets the
  # VM-wide event flags to the list that changed): only the main Ractor is
  # sampled then, and the TracePoint keeps firing.
  def test_a_tracepoint_in_the_main_ractor_keeps_other_ractors_unsampled
    Warning[:experimental] = false
    calls = 0
    tp = TracePoint.new(:call) { calls += 1 }
    tp.enable
    begin
      Rperf.start(mode: :alloc, alloc_interval: 16)
      r = Ractor.new { 50_000.times.map { |i| [i] }.size }
      assert_equal(50_000, ractor_value(r))
      before = calls
      alloc_pairs(100)
      assert_operator(calls, :>, before, "the TracePoint still fires")
      data = Rperf.stop
    ensure
      tp.disable
    end
    assert_false(data[:allocations][:ractors])
    ractors = data[:threads].to_h { |t| [t[:thread_seq], t[:ractor_id]] }
    data[:allocations][:samples].each { |*, seq, _set| assert_equal(1, ractors.fetch(seq, 1)) }
  end

  # output: at stop and at exit is written with the sample type asked for
  # at start (pprof: its default_sample_type; collapsed: its values).
  def test_output_with_a_sample_type_at_stop_and_at_exit
    Dir.mktmpdir do |dir|
      path = File.join(dir, "heap.collapsed")
      data = Rperf.start(mode: :alloc, alloc_interval: 8, output: path, sample_type: :alloc_objects) do
        alloc_pairs(50_000)
      end
      total = File.read(path).lines.sum { |l| Integer(l[/ (\d+)$/, 1]) }
      assert_equal(data[:allocations][:samples].sum { |s| s[2] }, total, "alloc_objects at stop")
      exit_path = File.join(dir, "exit.collapsed")
      script = <<~RUBY
        def child_pairs(n) = n.times { |i| [i, i] }
        Rperf.start(mode: :alloc, alloc_interval: 8, output: #{exit_path.inspect}, sample_type: :alloc_space)
        child_pairs(50_000)
      RUBY
      run = run_child(script, timeout: 120)
      assert_child_ok(run)
      lines = File.read(exit_path).lines
      assert_not_empty(lines)
      # slot bytes: 40 per two-element Array, so every value is a multiple of 8 × 40
      lines.each { |l| assert_equal(0, Integer(l[/ (\d+)$/, 1]) % 320, l) }
    end
  end

  def test_bad_options_name_the_option_and_start_nothing
    [[{ mode: :heap }, /mode must be :cpu, :wall or :alloc/],
     [{ mode: :cpu, sample_type: :inuse_space }, /sample_type: :inuse_space needs mode: :alloc or allocations: true/],
     [{ mode: :alloc, sample_type: :cpu }, /sample_type: :cpu is a time profile/],
     [{ mode: :wall, sample_type: :cpu }, /sample_type: :cpu does not match mode: :wall/],
     [{ mode: :alloc, sample_type: :bytes }, /sample_type: must be one of/],
     [{ mode: :alloc, alloc_interval: 0 }, /alloc_interval must be an Integer between 1 and/],
     [{ allocations: "yes" }, /allocations must be true or false/],
     [{ mode: :alloc, defer: true }, /defer: true needs mode :cpu or :wall/]].each do |opts, msg|
      e = assert_raise(ArgumentError, opts.inspect) { Rperf.start(**opts) }
      assert_match(msg, e.message)
      assert_false(Rperf.running?)
    end
  end
end
