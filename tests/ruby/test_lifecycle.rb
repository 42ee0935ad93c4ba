# frozen_string_literal: true
# The lifecycle windows where a profiler can hurt its host: the process exits
# while profiling (no stop), threads die between stop and release, stop is
# raced by other Ractors labelling, label ids outlive their run, a run
# started after the end proc meets RUBY_FREE_AT_EXIT. Each
# scenario runs in a child Ruby so that a crash is reported, not fatal.
require_relative "helper"

class TestLifecycle < Test::Unit::TestCase
  include RperfTestHelper

  EXIT_RUNS = Integer(ENV.fetch("RPERF_EXIT_RUNS", "8"))

  # A program that starts profiling and exits without stopping: the usual
  # "start it in an initializer" shape. `extra` adds threads or Ractors that
  # are still running at exit.
  def exit_program(backend, mode, extra)
    <<~RUBY
      Warning[:experimental] = false
      #{extra}
      Rperf.start(frequency: 10_000, backend: :#{backend}, mode: :#{mode})
      x = 0
      200_000.times { x += 1 }
    RUBY
  end

  EXTRAS = {
    "plain" => "",
    "threads" => "2.times { Thread.new { loop { 1000.times {} } } }",
    "ractors" => "4.times { Ractor.new { loop { 1000.times {} } } }",
  }.freeze

  def test_exit_without_stop
    failures = []
    runs = 0
    each_combo do |backend, mode|
      EXTRAS.each do |kind, extra|
        EXIT_RUNS.times do
          runs += 1
          run = run_child(exit_program(backend, mode, extra), timeout: 60)
          failures << "#{backend}/#{mode}/#{kind}: #{run.describe}" unless run.success?
        end
      end
    end
    assert_empty(failures, "#{failures.size} of #{runs} exits failed:\n#{failures.first(3).join("\n")}")
  end

  # RUBY_FREE_AT_EXIT=1 (what ASan/valgrind runs of an application set):
  # Ruby frees its postponed-job queue before the VM's at-exit hooks. A run
  # started by an at_exit block registered before `require "rperf"` (as
  # minitest/autorun registers its own) runs after rperf's end proc, and is
  # still going then: it must be halted before that free (a tick's trigger
  # would write through the freed queue).
  def test_a_run_started_after_the_end_proc_with_free_at_exit
    failures = []
    runs = 0
    RPERF_BACKENDS.each do |backend|
      Integer(ENV.fetch("RPERF_FREE_AT_EXIT_RUNS", "40")).times do
        runs += 1
        run = run_command([RbConfig.ruby, "-W0", "-I", RPERF_BUILD_LIB, "-e", <<~RUBY], env: { "RUBY_FREE_AT_EXIT" => "1" }, timeout: 60)
          at_exit { Rperf.start(frequency: 10_000, mode: :wall, backend: :#{backend}); x = 0; 300_000.times { x += 1 } }
          require "rperf"
        RUBY
        failures << "#{backend}: #{run.describe}" unless run.success?
      end
    end
    assert_empty(failures, "#{failures.size} of #{runs} exits failed:\n#{failures.first(2).join("\n")}")
  end

  # An output: given to start is written at exit, as with the env auto-start.
  def test_exit_writes_the_output_given_to_start
    Dir.mktmpdir do |dir|
      each_combo do |backend, mode|
        path = File.join(dir, "#{backend}-#{mode}.txt")
        run = run_child(<<~RUBY, timeout: 60)
          Rperf.start(frequency: 1000, backend: :#{backend}, mode: :#{mode}, output: #{path.dump}, format: :collapsed)
          rperf_work_a(0.05)
        RUBY
        assert_child_ok(run, "#{backend}/#{mode}")
        assert(File.exist?(path), "#{path} written at exit (#{backend}/#{mode})")
        assert_match(/rperf_work_a/, File.read(path), "#{backend}/#{mode}")
      end
    end
  end

  # What the program's threads see of the main thread at exit is what they
  # see unprofiled: Ruby kills them after the end procs, so a thread waiting
  # for the main thread to stop never gets to run again (Ruby's own
  # TestThread#test_main_thread_status_at_exit). The profile is written
  # after that, and is written: from the environment, from start's output:,
  # and with the stat report.
  MAIN_STATUS_PROGRAM = <<~RUBY
    q = Thread::Queue.new
    Thread.new(Thread.current) do |mth|
      begin
        q.push nil
        mth.run
        Thread.pass until mth.stop?
        p :mth_stopped
      ensure
        puts "\#{mth.alive?} \#{mth.status} \#{Thread.current.status}"
      end
    end
    q.pop
  RUBY

  def test_the_main_threads_status_at_exit_is_what_the_program_sees_unprofiled
    Dir.mktmpdir do |dir|
      prog = File.join(dir, "prog.rb")
      File.write(prog, MAIN_STATUS_PROGRAM)
      plain = run_command([RbConfig.ruby, prog], timeout: 60)
      assert_equal("false false aborting\n", plain.stdout, "the unprofiled program")
      out = File.join(dir, "p.pb.gz")
      envs = {
        "environment" => { "RUBYOPT" => "-I#{RPERF_BUILD_LIB} -rrperf", "RPERF_ENABLED" => "1",
                           "RPERF_MODE" => "wall", "RPERF_FREQUENCY" => "10000", "RPERF_OUTPUT" => out },
        "stat" => { "RUBYOPT" => "-I#{RPERF_BUILD_LIB} -rrperf", "RPERF_ENABLED" => "1", "RPERF_STAT" => "1" },
      }
      5.times do
        envs.each do |kind, env|
          File.delete(out) if File.exist?(out)
          run = run_command([RbConfig.ruby, prog], env: env, timeout: 60)
          assert(run.success?, "#{kind}: #{run.describe}")
          assert_equal(plain.stdout, run.stdout, "#{kind}: #{run.describe}")
          if kind == "stat"
            assert_match(/Performance stats/, run.stderr, kind)
          else
            assert_operator(File.size(out), :>, 0, kind)
          end
        end
        run = run_child(<<~CHILD, timeout: 60)
          Rperf.start(mode: :wall, frequency: 10_000, output: #{out.dump})
          #{MAIN_STATUS_PROGRAM}
        CHILD
        assert(run.success?, "start: #{run.describe}")
        assert_equal(plain.stdout, run.stdout, "start: #{run.describe}")
        assert_operator(File.size(out), :>, 0, "start")
      end
    end
  end

  # The profile of a run going at exit is written after the at_exit blocks.
  # An at_exit block registered before `require "rperf"` runs after rperf's
  # end proc has stopped the run: if it execs, or starts a run of its own,
  # the stopped run's profile is written first (not lost, not mixed).
  def test_a_late_at_exit_block_that_execs_or_starts_again_keeps_the_stopped_runs_profile
    Dir.mktmpdir do |dir|
      first = File.join(dir, "first.txt")
      second = File.join(dir, "second.txt")
      run = run_command([RbConfig.ruby, "-I", RPERF_BUILD_LIB, "-e", <<~RUBY], timeout: 60)
        at_exit { exec(#{RbConfig.ruby.dump}, "-e", "exit 0") }
        require "rperf"
        Rperf.start(mode: :cpu, frequency: 1000, output: #{first.dump}, format: :text)
        x = 0
        3_000_000.times { x += 1 }
      RUBY
      assert(run.success?, "exec: #{run.describe}")
      assert_match(/\ATotal: .*Integer#times/m, File.read(first), "exec")

      File.delete(first)
      run = run_command([RbConfig.ruby, "-I", RPERF_BUILD_LIB, "-e", <<~RUBY], timeout: 60)
        def rperf_late_work = (x = 0; 2_000_000.times { x += 1 })
        at_exit { Rperf.start(mode: :cpu, frequency: 1000, output: #{second.dump}, format: :text); rperf_late_work }
        require "rperf"
        def rperf_first_work = (x = 0; 3_000_000.times { x += 1 })
        Rperf.start(mode: :cpu, frequency: 1000, output: #{first.dump}, format: :text)
        rperf_first_work
      RUBY
      assert(run.success?, "start: #{run.describe}")
      one = File.read(first)
      assert_match(/Object#rperf_first_work/, one, "start")
      refute_match(/rperf_late_work/, one, "start")
    end
  end

  # A TracePoint that raises on every call, left enabled at exit (with an
  # at_exit block of the application, which then raises): the exit path
  # must still stop the engine (no crash), exit as the unprofiled program
  # does and write the profile: it is written after Ruby has removed every
  # TracePoint, so the application's cannot raise into it.
  def test_exit_with_raising_tracepoint
    script = <<~RUBY
      at_exit { puts "app at_exit" }
      x = 0
      100_000.times { x += 1 }
      TracePoint.new(:call, :c_call) { raise "boom from tracepoint" }.enable
    RUBY
    cmd = [RbConfig.ruby, "-I", RPERF_BUILD_LIB, "-e", script]
    plain = run_command(cmd, timeout: 60)
    each_combo do |backend, mode|
      Dir.mktmpdir do |dir|
        run = run_command(cmd, env: { "RPERF_ENABLED" => "1", "RPERF_FREQUENCY" => "10000",
                                      "RPERF_MODE" => mode.to_s, "RPERF_BACKEND" => backend.to_s,
                                      "RPERF_OUTPUT" => File.join(dir, "p.txt"), "RUBYOPT" => "-rrperf" },
                          timeout: 60)
        ctx = "#{backend}/#{mode}: #{run.describe}"
        assert_nil(run.status.termsig, ctx)
        assert_equal(plain.status.exitstatus, run.status.exitstatus, ctx)
        assert_equal(plain.stdout, run.stdout, ctx)
        assert_equal(plain.stderr, run.stderr, ctx)
        assert_match(/\ATotal: .*<main>/m, File.read(File.join(dir, "p.txt")), ctx)
      end
    end
  end

  # Threads alive at stop that exit (and are collected) before the result is
  # released: release must not write through their dead Thread objects.
  def test_threads_dying_between_stop_and_release
    each_combo do |backend, mode|
      run = run_child(<<~RUBY, timeout: 120)
        slow = Object.new
        def slow.encode(data)
          sleep 0.2
          GC.start
          GC.compact
          "slow"
        end
        Rperf.register_exporter(:slow, slow)
        Dir.mktmpdir do |dir|
          3.times do |round|
            Rperf.start(frequency: 10_000, backend: :#{backend}, mode: :#{mode},
                        output: File.join(dir, "p\#{round}.slow"), exporter: :slow)
            rperf_work_a(0.02)
            20.times { Thread.new { sleep 0.05; 1000.times {} } }
            Rperf.stop
            GC.start
            GC.compact
          end
          Rperf.start(frequency: 1000, backend: :#{backend}, mode: :#{mode})
          rperf_work_b(0.02)
          res = Rperf.stop
          child_report("ok" => res[:aggregated_samples].any?)
        end
      RUBY
      assert_child_ok(run, "#{backend}/#{mode}")
      assert_equal({ "ok" => true }, run.report, "#{backend}/#{mode}")
    end
  end

  # A label block that spans stop/start keeps ids of its own run only: the id
  # captured before the block belongs to the old run and must not name a
  # label set of the new one.
  def test_label_ids_never_cross_runs
    Rperf.start(frequency: 1000)
    inside = nil
    Rperf.label(a: "1") do                        # id 1 of run 1
      Rperf.label(b: "2") do                      # captured: id 1 of run 1
        Rperf.stop
        Rperf.start(frequency: 1000)
        Rperf.label(c: "3") { }                   # id 1 of run 2
        Rperf.label(d: "4") { }                   # id 2 of run 2
      end
      # restored the id captured in run 1: it names no label set of run 2
      inside = Rperf.labels
      rperf_work_a(0.02)
    end
    assert_equal({}, inside)
    res = Rperf.stop
    ids = res[:aggregated_samples].select { |f, *| f.any? { |fr| fr[1].include?("rperf_work_a") } }.map { |s| s[3] }
    assert_not_empty(ids)
    assert_equal([0], ids.uniq, "samples after the block carry the empty set")
    Dir.mktmpdir { |dir| assert_nothing_raised { Rperf.save(File.join(dir, "p.pb.gz"), res, format: :pprof) } }
  end

  # Rperf.label from other Ractors while the main Ractor stops and starts:
  # no crash, no state leaking into the next run (thread_seq values unique).
  def test_label_storm_during_stop_start
    run = run_child(<<~RUBY, timeout: 180)
      Warning[:experimental] = false
      rs = 4.times.map do |i|
        Ractor.new(i) do |n|
          k = 0
          loop do
            Rperf.label(r: n.to_s, k: (k += 1) % 7) { 200.times {} }
            Rperf.labels
          end
        end
      end
      results = 60.times.map do |i|
        Rperf.start(frequency: 10_000, backend: (i.even? ? :signal : :nanosleep), mode: :wall)
        rperf_work_a(0.005)
        Rperf.stop
      end
      dup = results.count { |r| seqs = r[:threads].map { |t| t[:thread_seq] }; seqs.uniq.size != seqs.size }
      child_report("runs" => results.size, "dup" => dup)
      exit!(0)
    RUBY
    assert_child_ok(run)
    assert_equal({ "runs" => 60, "dup" => 0 }, run.report)
  end

  # The profiler's own threads are named (top -H, ps -L and gdb show their
  # CPU apart from the application's) and are gone after stop: a stopped
  # profiler leaves no thread behind in the host, whatever the backend.
  def test_profiler_threads_are_named_and_gone_after_stop
    run = run_child(<<~RUBY)
      names = -> { Dir["/proc/self/task/*/comm"].map { |f| File.read(f).chomp rescue nil }.compact.sort }
      before = names.()
      out = {}
      %i[holder signal nanosleep].each do |b|
        Rperf.start(frequency: 1000, backend: b, mode: :wall)
        during = names.() - before
        Rperf.stop
        # A joined thread's /proc entry can outlive pthread_join by a moment
        # (the kernel wakes the joiner before it reaps the task): the
        # threads must be gone, not linger, so allow that moment (bounded).
        after = names.() - before
        100.times { break if after.empty?; sleep 0.01; after = names.() - before }
        out[b.to_s] = { "during" => during.uniq.sort, "after" => after }
      end
      child_report(out)
    RUBY
    assert_child_ok(run)
    assert_equal({ "holder" => { "during" => %w[rperf-timer rperf-worker], "after" => [] },
                   "signal" => { "during" => %w[rperf-worker], "after" => [] },
                   "nanosleep" => { "during" => %w[rperf-timer rperf-worker], "after" => [] } },
                 run.report)
  end
end
