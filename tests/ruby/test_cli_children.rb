# frozen_string_literal: true

# tests/ruby/test_cli_children.rb — the `rperf` command profiles every Ruby
# process of the command: the command itself, its forks and the Ruby
# processes it spawns each write a profile into the run's private directory
# (mode 0700, in $TMPDIR), and the CLI merges them into one output with a
# numeric `pid` label on every sample and each process's threads kept
# apart; `stat` sums the processes into one block; the directory is
# removed afterwards, those of dead runs at the next start; the command's
# exit status is kept; a program a process execs into adds its own profile;
# a process killed with SIGKILL after it wrote a window is in the merged
# profile and counts, and is named on stderr.
# Without the CLI, fork children follow Rperf.start's inherit: (the env
# auto-start: RPERF_INHERIT).

require_relative "helper"
require "rperf/report"

class TestCLIChildren < Test::Unit::TestCase
  EXE = File.expand_path("../../exe/rperf", __dir__)

  # The command: burns CPU in a method named after the process, forks twice
  # (Kernel#fork with a block, Process.fork without), spawns a Ruby child,
  # records every pid and the run directory's mode, exits 5. Each process
  # works until it has used 40 ms of CPU, so each has samples.
  BURN = "t = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID); " \
         "nil while Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - t < 0.04"
  COMMAND = <<~RUBY
    require "json"
    def rperf_parent_work = (#{BURN})
    def rperf_fork_work = (#{BURN})
    def rperf_forked_again_work = (#{BURN})
    dir = ENV.fetch("RPERF_CHILD_DIR")
    File.write("run_dir", format("%s %o\n", dir, File.stat(dir).mode & 0o7777))
    first = fork { rperf_fork_work }
    second = Process.fork
    if second.nil?
      rperf_forked_again_work
      exit!(0) if ENV["EXIT_BANG"] # no at_exit: this process writes no profile
      exit 0
    end
    spawned = Process.spawn(RbConfig.ruby, "-e", #{"def rperf_spawned_work = (#{BURN}); rperf_spawned_work".dump})
    rperf_parent_work
    [first, second, spawned].each { |pid| Process.wait(pid) }
    File.write("pids", JSON.generate("parent" => $$, "fork" => first, "fork2" => second, "spawned" => spawned))
    exit 5
  RUBY

  def setup
    @dir = Dir.mktmpdir("rperf-children-test")
    @tmp = File.join(@dir, "tmp") # the CLI's TMPDIR: run directories go here
    Dir.mkdir(@tmp, 0o700)
    File.write(File.join(@dir, "cmd.rb"), COMMAND)
  end

  def teardown
    FileUtils.remove_entry(@dir)
  end

  # -> [stdout, stderr, Process::Status], run in @dir
  def rperf(*args, env: {})
    Open3.capture3({ "RUBYOPT" => nil, "RPERF_ENABLED" => nil, "RPERF_CHILD_DIR" => nil,
                     "TMPDIR" => @tmp }.merge(env), RbConfig.ruby, EXE, *args, chdir: @dir)
  end

  def pids
    JSON.parse(File.read(File.join(@dir, "pids")))
  end

  # pid => [function names with flat or cum weight in that process's samples]
  def functions_by_pid(profile)
    sets = profile.data[:label_sets]
    out = Hash.new { |h, k| h[k] = [] }
    profile.data[:aggregated_samples].each do |frames, _w, _seq, set|
      out[sets[set][:pid]].concat(frames.map { |f| f[1] })
    end
    out.transform_values(&:uniq)
  end

  def test_record_merges_every_process_with_a_pid_label
    _, err, st = rperf("record", "-o", "all.pb.gz", "ruby", "cmd.rb")
    assert_equal(5, st.exitstatus, "the command's exit status is kept\n#{err}")
    ids = pids
    profile = Rperf::Report.load(File.join(@dir, "all.pb.gz"))
    by_pid = functions_by_pid(profile)
    assert_equal(ids.values.sort, by_pid.keys.sort, "one pid label per process, each an Integer:\n#{err}")
    { "parent" => "Object#rperf_parent_work", "fork" => "Object#rperf_fork_work",
      "fork2" => "Object#rperf_forked_again_work", "spawned" => "Object#rperf_spawned_work" }.each do |who, fn|
      assert_include(by_pid[ids[who]], fn, "#{who}'s samples carry its own pid")
      (ids.keys - [who]).each { |other| assert_not_include(by_pid[ids[other]], fn, "#{fn} only in #{who}") }
    end
    # threads kept apart: each process's main thread has its own thread_seq
    seqs = Hash.new { |h, k| h[k] = [] }
    profile.data[:aggregated_samples].each { |_f, _w, seq, set| seqs[profile.data[:label_sets][set][:pid]] << seq }
    seqs.transform_values!(&:uniq)
    assert(seqs.values.all? { |s| s.all?(&:positive?) }, seqs.inspect)
    assert_equal(seqs.values.sum(&:size), seqs.values.flatten.uniq.size, "no thread_seq shared by two processes: #{seqs}")
    assert_equal(seqs.values.flatten.sort, profile.data[:threads].map { |t| t[:thread_seq] }.sort)

    run_dir, mode = File.read(File.join(@dir, "run_dir")).split
    assert_equal("700", mode, "the run directory is private")
    assert_equal(@tmp, File.dirname(run_dir))
    assert_match(/\Arperf-run-\d+-\h{16}\z/, File.basename(run_dir))
    assert_empty(Dir.children(@tmp), "the run directory is removed")

    # the pid label is a numeric pprof label: --label filters it, a text
    # format shows the merged samples
    out, err, st = rperf("report", "--label", "pid=#{ids['fork2']}", "all.pb.gz")
    assert_equal(0, st.exitstatus, err)
    assert_include(out, "Object#rperf_forked_again_work")
    assert_not_include(out, "Object#rperf_parent_work")
    pb = Zlib.gunzip(File.binread(File.join(@dir, "all.pb.gz")))
    assert_not_include(pb, ids["parent"].to_s, "the pid is a number, not a string in the table")
  end

  def test_every_format_and_print_get_the_merged_profile
    out, err, st = rperf("record", "-p", "ruby", "cmd.rb")
    assert_equal(5, st.exitstatus, err)
    assert_match(/\ATotal: [\d.]+ms \(cpu\)\n/, out)
    %w[rperf_parent_work rperf_fork_work rperf_forked_again_work rperf_spawned_work].each do |fn|
      assert_include(out, "Object##{fn}")
    end
    _, err, st = rperf("record", "-o", "all.collapsed", "ruby", "cmd.rb")
    assert_equal(5, st.exitstatus, err)
    assert_include(File.read(File.join(@dir, "all.collapsed")), "Object#rperf_spawned_work")
    assert_empty(Dir.children(@tmp))
  end

  def test_stat_sums_the_processes
    _, err, st = rperf("stat", "--report", "ruby", "cmd.rb")
    assert_equal(5, st.exitstatus, err)
    assert_equal(1, err.scan("Performance stats for 'ruby cmd.rb'").size, "one block for the run:\n#{err}")
    assert_match(/^ +4     \[Ruby\] detected threads$/, err, "one main thread in each of the 4 processes")
    assert_match(/^ +4     \[Rperf\] Ruby processes profiled$/, err)
    %w[rperf_parent_work rperf_fork_work rperf_forked_again_work rperf_spawned_work].each do |fn|
      assert_match(/^ Cumulative:.*Object##{fn} /m, err)
    end
    samples = err[/^  (\d+) samples \/ \d+ triggers/, 1].to_i
    assert_operator(samples, :>=, 4)
    assert_empty(Dir.children(@tmp))
  end

  def test_stale_run_directories_are_removed
    dead = Process.spawn(RbConfig.ruby, "-e", "0")
    Process.wait(dead)
    stale = File.join(@tmp, "rperf-run-#{dead}-0123456789abcdef")
    live = File.join(@tmp, "rperf-run-#{Process.pid}-0123456789abcdef") # this test's pid: alive
    other = File.join(@tmp, "rperf-run-#{dead}-notours") # not a run directory name
    [stale, live, other].each { |d| Dir.mkdir(d, 0o700) }
    File.write(File.join(stale, "1.pb.gz"), "x")
    _, err, st = rperf("stat", "ruby", "-e", "exit 3")
    assert_equal(3, st.exitstatus, err)
    refute(File.exist?(stale), "a dead run's directory is removed")
    assert(File.directory?(live), "a running rperf's directory is kept")
    assert(File.directory?(other))
  end

  def test_a_process_killed_or_ended_without_at_exit
    # exit! runs no at_exit: that process writes nothing and is left out
    _, err, st = rperf("record", "-o", "p.pb.gz", "ruby", "cmd.rb", env: { "EXIT_BANG" => "1" })
    assert_equal(5, st.exitstatus, err)
    by_pid = functions_by_pid(Rperf::Report.load(File.join(@dir, "p.pb.gz")))
    assert_equal([pids["parent"], pids["fork"], pids["spawned"]].sort, by_pid.keys.sort)
    # a command killed by a signal: the CLI dies the same way, the directory is gone
    _, _, st = rperf("record", "-o", "k.pb.gz", "ruby", "-e", "def w = 200_000.times { }; w; Process.kill(:TERM, $$)")
    assert_equal(Signal.list["TERM"], st.termsig)
    assert_empty(Dir.children(@tmp))
  end

  # A forked child killed with SIGKILL (as Puma kills a hung worker) never
  # writes its last part: every process of the command writes a window
  # every RPERF_WINDOW_SECONDS, so its windows are in the merged profile,
  # its counts (samples, allocated objects) in the stats block, and the
  # command names it on stderr. The child allocates its gadgets, then
  # works until two more of its windows are on disk (a profile file
  # <pid>.w<n>.pb.gz is complete: it is renamed into place; the command
  # folds them only once 8 wait) and kills itself.
  KILLED = <<~RUBY
    require "json"
    def rperf_killed_gadgets = 300_000.times.map { [] }
    def rperf_killed_work = (#{BURN})
    def newest_window
      Dir.children(ENV.fetch("RPERF_CHILD_DIR")).filter_map { |n| n[/\\A\#{$$}\\.w(\\d+)\\.pb\\.gz\\z/, 1]&.to_i }.max || 0
    end
    child = fork do
      rperf_killed_gadgets
      first = newest_window
      # (a bound, so that a command writing no window fails the test, not hangs)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
      rperf_killed_work until newest_window >= first + 2 || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      Process.kill(:KILL, $$)
    end
    _, status = Process.wait2(child)
    File.write("pids", JSON.generate("parent" => $$, "killed" => child, "termsig" => status.termsig))
  RUBY

  def test_a_process_killed_after_its_windows_is_merged_and_named
    File.write(File.join(@dir, "killed.rb"), KILLED)
    env = { "RPERF_WINDOW_SECONDS" => "0.1" }
    ended = ->(pid) { "rperf: 1 process ended without its last part: pid #{pid} " \
                      "(its samples up to its last window are included)\n" }

    _, err, st = rperf("stat", "--report", "ruby", "killed.rb", env: env)
    assert_equal(0, st.exitstatus, err)
    ids = pids
    assert_equal(Signal.list["KILL"], ids["termsig"], err)
    assert_equal([ended.(ids["killed"])], err.lines.grep(/ended without/), err)
    assert_match(/^ +2     \[Rperf\] Ruby processes profiled$/, err, "the killed child is counted")
    assert_match(/^ +2     \[Ruby\] detected threads$/, err)
    assert_match(/^ Cumulative:.*Object#rperf_killed_work /m, err, "its work up to its last window")
    allocated = err[/^ +(\d+)     \[Ruby\] allocated objects$/, 1]
    assert_operator(allocated.to_i, :>=, 300_000, "its allocations up to its last window:\n#{err}")
    assert_empty(Dir.children(@tmp))

    _, err, st = rperf("record", "-o", "killed.pb.gz", "ruby", "killed.rb", env: env)
    assert_equal(0, st.exitstatus, err)
    ids = pids
    assert_equal([ended.(ids["killed"])], err.lines.grep(/ended without/), err)
    profile = Rperf::Report.load(File.join(@dir, "killed.pb.gz"))
    by_pid = functions_by_pid(profile)
    assert_equal([ids["parent"], ids["killed"]].sort, by_pid.keys.sort, err)
    assert_include(by_pid[ids["killed"]], "Object#rperf_killed_work")
    assert_not_include(by_pid[ids["parent"]], "Object#rperf_killed_work")
    assert_empty(Dir.children(@tmp))
  end

  # A process that execs another Ruby program: the profile of each image,
  # both with the same pid, is in the merged output.
  def test_a_program_exec_d_into_keeps_its_predecessor_s_profile
    launcher = "def rperf_launcher_work = (#{BURN}); rperf_launcher_work; " \
               "exec RbConfig.ruby, '-e', #{"def rperf_exec_d_work = (#{BURN}); rperf_exec_d_work".dump}"
    _, err, st = rperf("record", "-o", "x.pb.gz", "ruby", "-e", launcher)
    assert_equal(0, st.exitstatus, err)
    by_pid = functions_by_pid(Rperf::Report.load(File.join(@dir, "x.pb.gz")))
    assert_equal(1, by_pid.size, by_pid.inspect)
    assert_include(by_pid.values.first, "Object#rperf_launcher_work")
    assert_include(by_pid.values.first, "Object#rperf_exec_d_work")
    assert_empty(Dir.children(@tmp))
  end

  def test_unwritable_output_runs_nothing
    marker = File.join(@dir, "ran")
    out, err, st = rperf("record", "-o", "no/such/dir/p.pb.gz", "ruby", "-e", "File.write(#{marker.dump}, '')")
    assert_equal(1, st.exitstatus)
    assert_match(%r{\Arperf: -o/--output "no/such/dir/p.pb.gz" cannot be written: }, err)
    assert_equal("", out)
    refute(File.exist?(marker))
    assert_empty(Dir.children(@tmp))
  end

  # A run recording time and allocations (RPERF_ALLOCATIONS=1 in the
  # environment the command gives its processes): each process's part
  # holds both, and the command's merge keeps the fork child's time
  # samples and its allocations, pid-labelled, on one thread numbering.
  def test_the_merge_of_a_time_and_allocation_run_holds_both
    require "rperf/cli"
    run_dir = Rperf::RunDir.make(@tmp)
    script = <<~RUBY
      require "json"
      class RperfCliGadget; end
      def rperf_cli_gadgets(n) = n.times { $gadgets << RperfCliGadget.new }
      def rperf_fork_work = (#{BURN})
      $gadgets = []
      # GC.start: objects are in use as of the last GC
      pid = fork { rperf_cli_gadgets(50_000); GC.start; rperf_fork_work }
      Process.wait(pid)
      File.write("pids", JSON.generate("parent" => $$, "fork" => pid))
    RUBY
    env = { "RPERF_ENABLED" => "1", "RPERF_MODE" => "cpu", "RPERF_FREQUENCY" => "1000",
            "RPERF_CHILD_DIR" => run_dir, "RPERF_ALLOCATIONS" => "1", "RPERF_ALLOC_INTERVAL" => "16",
            "RUBYOPT" => "-rrperf", "TMPDIR" => @tmp }
    _, err, st = Open3.capture3(env, RbConfig.ruby, "-I", RPERF_BUILD_LIB, "-e", script, chdir: @dir)
    assert(st.success?, err)
    profile, = Rperf::CLI.new.merge_run_dir(run_dir)
    ids = pids
    data = profile.data
    by_pid = functions_by_pid(profile)
    assert_equal(ids.values.sort, by_pid.keys.sort, err)
    assert_include(by_pid[ids["fork"]], "Object#rperf_fork_work")
    assert_not_nil(data[:allocations], "the merge holds the processes' allocations")
    sets = data[:label_sets]
    gadgets = Hash.new(0)
    alloc_seqs = Hash.new { |h, k| h[k] = [] }
    data[:allocations][:samples].each do |frames, cls, ao, _ab, io, _ib, seq, set|
      pid = sets[set][:pid]
      alloc_seqs[pid] |= [seq]
      next unless cls == "RperfCliGadget" && frames.any? { |f| f[1] == "Object#rperf_cli_gadgets" }

      gadgets["#{pid} ao"] += ao
      gadgets["#{pid} io"] += io
    end
    assert_in_delta(50_000, gadgets["#{ids['fork']} ao"], 5_000, gadgets.inspect)
    assert_in_delta(50_000, gadgets["#{ids['fork']} io"], 5_000, gadgets.inspect)
    assert_equal(0, gadgets["#{ids['parent']} ao"], gadgets.inspect)
    # each process's allocations on its own threads, numbered as its time samples
    time_seqs = Hash.new { |h, k| h[k] = [] }
    data[:aggregated_samples].each { |_f, _w, seq, set| time_seqs[sets[set][:pid]] |= [seq] }
    assert_equal(time_seqs[ids["fork"]], alloc_seqs[ids["fork"]], "#{time_seqs} #{alloc_seqs}")
    assert_empty(alloc_seqs[ids["fork"]] & alloc_seqs[ids["parent"]], "#{alloc_seqs}")
  end

  # Context switches are counted for every thread of every process (the
  # kernel counts them per thread; each process sums its own, exited
  # threads included). Each 0.5 ms sleep blocks its thread: one voluntary
  # switch at least, so 4 threads x 200 sleeps make 800 or more, whether
  # they run in the command or in a child it forks (the command then only
  # waits: its own threads switch far fewer times). 1:1 threads: an M:N
  # thread's sleep need not block a native thread.
  def test_stat_counts_the_context_switches_of_every_thread_and_process
    sleepers = "def sleepers = 4.times.map { Thread.new { 200.times { sleep 0.0005 } } }.each(&:join)\n"
    { "threads" => "sleepers", "forked child" => "Process.wait(fork { sleepers })" }.each do |where, body|
      File.write(File.join(@dir, "sleepers.rb"), sleepers + body)
      _, err, st = rperf("stat", "-f", "100", "ruby", "sleepers.rb", env: { "RUBY_MN_THREADS" => nil })
      assert_equal(0, st.exitstatus, err)
      voluntary = err[/\[OS\] context switches \((\d+) voluntary/, 1]
      assert_not_nil(voluntary, err)
      assert_operator(voluntary.to_i, :>=, 800, "#{where}:\n#{err}")
    end
  end

  # pprof carries no thread names: a forked child's named thread keeps its
  # name in the merged profile through the child's counters file (1:1
  # threads: only they have kernel names, docs/architecture.md).
  def test_a_forked_child_s_thread_names_reach_the_merged_profile
    File.write(File.join(@dir, "named.rb"), <<~RUBY)
      def rperf_named_work = (#{BURN})
      # (a thread's name is read at its first sample and again every 32 of
      # its jobs: it works until its run knows the name)
      named = -> { Rperf.snapshot[:threads].any? { |t| t[:name] == "rperf-cli-named" } }
      pid = fork { Thread.new { Thread.current.name = "rperf-cli-named"; rperf_named_work until named.() }.join }
      Process.wait(pid)
    RUBY
    _, err, st = rperf("record", "-m", "wall", "-o", "named.json", "ruby", "named.rb", env: { "RUBY_MN_THREADS" => nil })
    assert_equal(0, st.exitstatus, err)
    names = JSON.parse(File.read(File.join(@dir, "named.json")))["profiles"].map { |p| p["name"] }
    assert(names.any? { |n| n.include?('"rperf-cli-named"') }, names.inspect)
  end

  # Without the CLI, the env auto-start's fork children join the root's
  # profile (inherit: :fork, the default) with a pid label on their samples
  # only; with RPERF_INHERIT=false a fork child's profiler is stopped and
  # it writes nothing. Either way nothing is left in the temp directory.
  def test_without_the_cli_fork_children_follow_rperf_inherit
    script = <<~RUBY
      def rperf_forked_work = (#{BURN})
      pid = fork { print Rperf.running?; rperf_forked_work }
      Process.wait(pid)
    RUBY
    { nil => ["true", true], "false" => ["false", false] }.each do |inherit, (running, joined)|
      env = { "RPERF_ENABLED" => "1", "RPERF_OUTPUT" => "plain.pb.gz", "RPERF_CHILD_DIR" => nil,
              "RUBYOPT" => "-rrperf", "RPERF_INHERIT" => inherit, "TMPDIR" => @tmp }
      out, err, st = Open3.capture3(env, RbConfig.ruby, "-I", RPERF_BUILD_LIB, "-e", script, chdir: @dir)
      assert(st.success?, err)
      assert_equal(running, out, "RPERF_INHERIT=#{inherit.inspect}: the fork child's profiler")
      assert_equal(["cmd.rb", "plain.pb.gz", "tmp"], Dir.children(@dir).sort)
      assert_empty(Dir.children(@tmp), "nothing left in the temp directory")
      profile = Rperf::Report.load(File.join(@dir, "plain.pb.gz"))
      by_pid = functions_by_pid(profile)
      if joined
        assert_equal(2, by_pid.size, by_pid.keys.inspect)
        child = by_pid.keys.compact.first
        assert_include(by_pid[child], "Object#rperf_forked_work")
        assert_not_include(by_pid[nil], "Object#rperf_forked_work", "the root's samples carry no pid")
      else
        assert_equal([{}], profile.data[:label_sets], "no pid label without children")
      end
    end
  end
end
