# frozen_string_literal: true
# The run directory of a root with forked children (inherit: :fork) over a
# long run: the root folds the files its children write into one aggregate
# per process and deletes them, so the directory stays small however long
# the children run, read or not; nothing is lost or counted twice across
# the folds, clearing snapshots and windows; and a child that never
# delivered its last part (SIGKILL) is named at the root's end, its
# windows in the profile; every window carries its counts, so the merged
# counts are the sums over every part. Each scenario runs in a child Ruby
# with a short window interval.
require_relative "helper"
require "rperf/report"

class TestRunDir < Test::Unit::TestCase
  include RperfTestHelper

  PRELUDE = <<~'RUBY'
    require "rperf/window"
    class RperfRunDirGadget; end
    def run_dir_gadgets(n) = n.times { ($gadgets ||= []) << RperfRunDirGadget.new }
    def run_dir_work(s) = cpu_spin(s)
    def run_dirs = Dir.glob(File.join(Dir.tmpdir, "rperf-run-#{Process.pid}-*"))
    def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    # the child's time in run_dir_work and its gadget allocations in `data`
    def child_part(data, pid)
      sets = data[:label_sets]
      mine = ->(set) { sets[set || 0][:pid] == pid }
      r = { "time" => 0, "ao" => 0, "io" => 0 }
      data[:aggregated_samples].each do |frames, w, _seq, set|
        r["time"] += w if mine.(set) && frames.any? { |f| f[1] == "Object#run_dir_work" }
      end
      (data[:allocations] || { samples: [] })[:samples].each do |frames, cls, ao, _ab, io, _ib, _seq, set|
        next unless mine.(set) && cls == "RperfRunDirGadget" && frames.any? { |f| f[1] == "Object#run_dir_gadgets" }

        r["ao"] += ao
        r["io"] += io
      end
      r
    end
    # the highest window number of `pid` among the profiles in `dir` now
    # (a window's counters file comes before them)
    def newest_window(dir, pid)
      Dir.children(dir).filter_map { |n| n[/\A#{pid}\.w(\d+)\.pb\.gz\z/, 1]&.to_i }.max || 0
    rescue SystemCallError
      0
    end
    def part_files(dir) = Dir.children(dir).count { |n| n.end_with?(".pb.gz") }
    # a child that works until `idle` is readable, reports its CPU in
    # run_dir_work on `res`, then waits (no Ruby code: no window) until
    # `done` is readable, and exits
    def fork_worker(gadgets: 0)
      idle_r, idle_w = IO.pipe
      done_r, done_w = IO.pipe
      res_r, res_w = IO.pipe
      pid = fork do
        [idle_w, done_w, res_r].each(&:close)
        run_dir_gadgets(gadgets)
        GC.start # in use as of the last GC: a GC that sees them live
        used = 0.0
        used += run_dir_work(0.02) until IO.select([idle_r], nil, nil, 0)
        res_w.write(used.to_s)
        res_w.close
        done_r.read
      end
      [idle_r, done_r, res_w].each(&:close)
      [pid, idle_w, done_w, res_r]
    end
  RUBY

  ENV_FAST = { "RPERF_WINDOW_SECONDS" => "0.1" }.freeze
  GADGETS = 20_000

  def run_scenario(body, timeout: 180)
    run = run_child(PRELUDE + body, env: ENV_FAST, timeout: timeout)
    assert_child_ok(run)
    [run.report, run]
  end

  # Nobody reads the root (no snapshot, no scrape) while its child writes
  # 30 windows and more: the root folds them, and once the child stops
  # writing the directory holds at most 8 part files. The stop's profile
  # holds everything the child sampled, once: what a window open over the
  # whole run took (every file, as it was written), and the child's CPU
  # time; its allocations once, the objects it keeps in use once.
  def test_a_root_nobody_reads_keeps_its_run_directory_small
    rep, run = run_scenario(<<~RUBY)
      Rperf.start(frequency: 1000, mode: :cpu, allocations: true, alloc_interval: 16)
      whole = Rperf::Window.open(allocations: true)
      pid, idle, done, res = fork_worker(gadgets: #{GADGETS})
      dir = Rperf.__children_dir
      windows = 0
      most = 0
      deadline = now + 120
      while windows < 30 && now < deadline
        windows = [windows, newest_window(dir, pid)].max
        most = [most, part_files(dir)].max
        IO.select(nil, nil, nil, 0.02)
      end
      idle.close
      used = res.read.to_f
      # the child writes no more: what the root left unfolded
      deadline = now + 60
      IO.select(nil, nil, nil, 0.05) until part_files(dir) <= 8 || now > deadline
      idle_files = part_files(dir)
      done.close
      Process.wait(pid)
      w = child_part(whole.close, pid)
      data = Rperf.stop
      child_report("windows" => windows, "most" => most, "idle_files" => idle_files, "used_ns" => (used * 1e9).round,
                   "window" => w, "stop" => child_part(data, pid), "processes" => data[:process_count],
                   "left" => run_dirs)
    RUBY
    ctx = "#{rep.inspect}\n#{run.describe}"
    assert_operator(rep["windows"], :>=, 30, "the child wrote 30 windows: #{ctx}")
    assert_operator(rep["idle_files"], :<=, 8, "part files left once the child stopped writing: #{ctx}")
    stop = rep["stop"]
    assert_equal(rep["window"]["time"], stop["time"], "the stop and a window over the whole run agree: #{ctx}")
    assert_equal(rep["window"]["ao"], stop["ao"], ctx)
    assert_operator(stop["time"], :<=, rep["used_ns"] * 1.02 + 2_000_000, "counted once: #{ctx}")
    assert_operator(stop["time"], :>=, rep["used_ns"] * 0.9, "nothing lost: #{ctx}")
    assert_in_delta(GADGETS, stop["ao"], GADGETS / 10, "each allocation once: #{ctx}")
    assert_in_delta(GADGETS, stop["io"], GADGETS / 10, "the objects in use once: #{ctx}")
    assert_equal(2, rep["processes"], ctx)
    assert_equal([], rep["left"], ctx)
    assert_no_match(/ended without/, run.stderr)
  end

  # A scraped root: each window's close folds what the child wrote, so no
  # file written a second before a close is left after it. Then clearing
  # snapshots and the root's own folds take turns. The child's time over
  # every clear and the stop is what one window open over the whole run
  # holds (each file once), and every scrape holds no more than its share.
  def test_scrapes_and_clears_fold_and_add_up
    rep, run = run_scenario(<<~'RUBY')
      Rperf.start(frequency: 1000, mode: :cpu)
      whole = Rperf::Window.open
      pid, idle, done, res = fork_worker
      dir = Rperf.__children_dir
      scraped = 0
      stale = []
      # scrapes back to back, about four windows of the child each
      12.times do
        w = Rperf::Window.open
        IO.select(nil, nil, nil, 0.4)
        closing = Time.now
        scraped += child_part(w.close, pid)["time"]
        stale.concat(Dir.children(dir).select do |n|
          File.mtime(File.join(dir, n)) < closing - 1
        rescue SystemCallError
          false
        end)
      end
      # clearing snapshots, about five windows of the child apart: the
      # root's own fold runs in between too
      cleared = 0
      12.times do
        IO.select(nil, nil, nil, 0.5)
        cleared += child_part(Rperf.snapshot(clear: true), pid)["time"]
      end
      idle.close
      used = res.read.to_f
      done.close
      Process.wait(pid)
      total = child_part(whole.close, pid)["time"]
      last = child_part(Rperf.stop, pid)["time"]
      child_report("scraped" => scraped, "stale" => stale, "cleared" => cleared, "last" => last, "whole" => total,
                   "used_ns" => (used * 1e9).round, "left" => run_dirs)
    RUBY
    ctx = "#{rep.inspect}\n#{run.describe}"
    assert_operator(rep["scraped"], :>, 0, ctx)
    assert_equal([], rep["stale"], "files older than a second left after a scrape: #{ctx}")
    assert_operator(rep["cleared"], :>, 0, ctx)
    assert_equal(rep["whole"], rep["cleared"] + rep["last"], "every file in one clear or the stop: #{ctx}")
    assert_operator(rep["scraped"], :<=, rep["whole"], ctx)
    assert_operator(rep["whole"], :<=, rep["used_ns"] * 1.02 + 2_000_000, "counted once: #{ctx}")
    assert_operator(rep["whole"], :>=, rep["used_ns"] * 0.9, "nothing lost: #{ctx}")
    assert_equal([], rep["left"], ctx)
  end

  # Each window a child writes carries the counts of its span: the merged
  # sampling_count is the root's own plus every sample of the child, over
  # its windows and its last part, whether the stop reads the child's
  # files (nobody read them before, unless 8 waited) or the root folded
  # them already (a snapshot in between). The run is deferred, so the child samples only
  # inside its profile block, which one Rperf::Window of its own spans:
  # that window's count is the child's whole (the window keeps what each
  # clear of a written window takes away).
  def test_the_windows_counts_add_up_in_the_merged_result
    rep, run = run_scenario(<<~'RUBY')
      own = nil
      Rperf.singleton_class.prepend(Module.new do
        define_method(:__merge_children) { |data, *args, **kw| own = data; super(data, *args, **kw) }
      end)
      out = [false, true].map do |snapshot|
        Rperf.start(frequency: 1000, mode: :cpu, defer: true)
        Rperf.profile { run_dir_work(0.02) }
        idle_r, idle_w = IO.pipe
        res_r, res_w = IO.pipe
        pid = fork do
          [idle_w, res_r].each(&:close)
          w = Rperf::Window.open
          Rperf.profile { run_dir_work(0.02) until IO.select([idle_r], nil, nil, 0) }
          res_w.write(w.close[:sampling_count].to_s)
          res_w.close
        end
        [idle_r, res_w].each(&:close)
        dir = Rperf.__children_dir
        windows = 0
        read = false
        deadline = now + 60
        while windows < 6 && now < deadline
          windows = [windows, newest_window(dir, pid)].max
          read ||= (Rperf.snapshot; true) if snapshot && windows >= 3 # folds the windows so far
          IO.select(nil, nil, nil, 0.02)
        end
        idle_w.close
        kid = Integer(res_r.read)
        Process.wait(pid)
        folded = Rperf.__children_folded?
        data = Rperf.stop
        { "windows" => windows, "kid" => kid, "own" => own[:sampling_count], "merged" => data[:sampling_count],
          "processes" => data[:process_count], "folded" => folded }
      end
      child_report(out)
    RUBY
    rep.each_with_index do |r, i|
      ctx = "#{i == 1 ? 'folded' : 'read at the stop'}: #{r.inspect}\n#{run.describe}"
      assert_operator(r["windows"], :>=, 6, "the child wrote 6 windows: #{ctx}")
      assert(r["folded"], "the snapshot folded the child's windows: #{ctx}") if i == 1
      assert_equal(2, r["processes"], ctx)
      assert_operator(r["kid"], :>, 0, ctx)
      assert_equal(r["own"] + r["kid"], r["merged"], "the root's samples and every part of the child's: #{ctx}")
    end
  end

  # A child killed with SIGKILL after it wrote windows: the root's end (its
  # exit, writing output:) names it on stderr, and its windows are in the
  # output. A child that ended normally is not named, nor one still
  # running at the root's end.
  def test_a_child_that_never_delivered_its_last_part_is_named
    rep, run = run_scenario(<<~'RUBY')
      out = File.join(Dir.mktmpdir, "out.pb.gz")
      Rperf.start(frequency: 1000, mode: :cpu, output: out)
      killed, = fork_worker
      running, idle, = fork_worker
      dir = Rperf.__children_dir # made at the first fork
      normal = fork { run_dir_work(0.05) }
      # each has written two windows (the root may fold them meanwhile):
      # the first may hold little more than the child's start, the second
      # its work
      wrote = {}
      deadline = now + 60
      until wrote.size == 2 || now > deadline
        [killed, running].each { |pid| wrote[pid] = true if newest_window(dir, pid) >= 2 }
        IO.select(nil, nil, nil, 0.02)
      end
      Process.kill(:KILL, killed)
      Process.wait(killed)
      Process.wait(normal)
      idle.close # `running` waits for its `done` pipe, which this process holds until its exit
      child_report("killed" => killed, "normal" => normal, "running" => running, "out" => out)
    RUBY
    ctx = "#{rep.inspect}\n#{run.describe}"
    lines = run.stderr.lines.grep(/ended without/)
    assert_equal(["rperf: 1 process ended without its last part: pid #{rep['killed']} " \
                  "(its samples up to its last window are included)\n"], lines, ctx)
    data = Rperf::Report.load(rep["out"]).data
    by_pid = Hash.new(0)
    data[:aggregated_samples].each do |frames, w, _seq, set|
      by_pid[data[:label_sets][set][:pid]] += w if frames.any? { |f| f[1] == "Object#run_dir_work" }
    end
    assert_operator(by_pid[rep["killed"]], :>, 0, "the killed child's windows: #{by_pid} #{ctx}")
    assert_operator(by_pid[rep["normal"]], :>, 0, ctx)
    assert_operator(by_pid[rep["running"]], :>, 0, ctx)
  ensure
    FileUtils.rm_rf(File.dirname(rep["out"])) if rep && rep["out"]
  end
end
