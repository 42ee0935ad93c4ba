# frozen_string_literal: true
#
# exec under the profiler: the program a profiled process execs never dies
# of the tick signal (a tick pending across execve would meet the new
# image's default action), with every backend and every exec form; the run
# of the exec'ing process is finished first, as at exit (its output is
# written); a failed exec raises as without the profiler and leaves
# profiling stopped; a tracer sees the same events as without the
# profiler; under the rperf command the program exec'd into keeps the
# profile of its predecessor (same pid, two profiles merged).
require_relative "helper"
require_relative "../../bench/exec_stress"
require "rperf/report"

class TestExec < Test::Unit::TestCase
  include RperfTestHelper

  # bench/exec_stress.rb, 50 runs per backend (the forms in turn): every
  # run exits 6 with nothing on stderr.
  def test_the_exec_program_always_exits_with_its_own_status
    tally = ExecStress.run(Rperf.backends.map(&:to_s), 50, RPERF_BUILD_LIB)
    tally.each do |backend, (good, runs, bad)|
      assert_equal(runs, good, "#{backend}: #{bad.inspect}")
    end
  end

  def test_the_profile_is_written_at_exec
    Dir.mktmpdir("rperf-exec") do |dir|
      out = File.join(dir, "p.collapsed")
      run = run_child(<<~RUBY, env: { "RPERF_ENABLED" => "1", "RPERF_OUTPUT" => out, "RPERF_MODE" => "cpu" })
        def rperf_before_exec = (t = thread_cpu_now; nil while thread_cpu_now - t < 0.05)
        rperf_before_exec
        exec "/bin/sh", "-c", "exit 4"
      RUBY
      assert_equal(4, run.status.exitstatus, run.describe)
      assert_equal("", run.stderr)
      assert_include(File.read(out), "Object#rperf_before_exec")
    end
  end

  # From another Ractor the profile cannot be built: sampling is halted,
  # nothing is written, and the exec'd program runs as without the profiler.
  def test_exec_from_another_ractor
    Dir.mktmpdir("rperf-exec") do |dir|
      out = File.join(dir, "p.collapsed")
      run = run_child(<<~RUBY, env: { "RPERF_ENABLED" => "1", "RPERF_OUTPUT" => out, "RPERF_MODE" => "wall" })
        Warning[:experimental] = false
        ractor_value(Ractor.new { x = 0; 300_000.times { x += 1 }; exec "/bin/sh", "-c", "exit 4" })
      RUBY
      assert_equal(4, run.status.exitstatus, run.describe)
      assert_equal("", run.stderr)
      refute(File.exist?(out))
    end
  end

  # The program's stderr stays the program's: a line about the stopped run
  # only when the run asked for messages (verbose:).
  def test_a_failed_exec_raises_and_profiling_stays_stopped
    each_combo(modes: [:wall]) do |backend, mode|
      run = run_child(<<~RUBY, env: { "RPERF_VERBOSE" => nil })
        Rperf.start(backend: :#{backend}, mode: :#{mode}, verbose: #{backend == :signal})
        error = begin
          exec "/nonexistent/rperf-exec-test"
        rescue SystemCallError => e
          e.class.name
        end
        child_report("error" => error, "running" => Rperf.running?, "stop" => Rperf.stop.inspect)
        Rperf.start(backend: :#{backend}, mode: :#{mode})
        child_report("again" => Rperf.stop.is_a?(Hash))
      RUBY
      assert(run.success?, run.describe)
      first, second = run.reports
      assert_equal({ "error" => "Errno::ENOENT", "running" => false, "stop" => "nil" }, first, backend)
      assert_equal({ "again" => true }, second)
      if backend == :signal
        assert_match(/^rperf: exec failed in process \d+; profiling stopped before it$/, run.stderr)
      else
        assert_equal("", run.stderr, backend)
      end
    end
  end

  # The tracer sees `exec` called and raising, and nothing of the profiler.
  def test_exec_is_invisible_to_tracers
    script = <<~'RUBY'
      Rperf.start(frequency: 10_000, mode: :wall) if ENV["PROFILED"]
      events = []
      tp = TracePoint.new(:call, :c_call, :c_return, :raise) { |t| events << "#{t.event} #{t.defined_class} #{t.method_id}" }
      tp.enable do
        begin
          exec "/nonexistent/rperf-exec-test"
        rescue SystemCallError
          nil
        end
        begin
          Process.exec("/nonexistent/rperf-exec-test")
        rescue SystemCallError
          nil
        end
      end
      child_report("events" => events)
    RUBY
    with = run_child(script, env: { "PROFILED" => "1" })
    without = run_child(script)
    assert(with.success?, with.describe)
    assert(without.success?, without.describe)
    assert_equal(without.report["events"], with.report["events"])
    assert_include(with.report["events"], "c_call Kernel exec")
  end

  def test_no_warning_under_verbose
    run = run_child("nil", ruby_args: ["-w"])
    assert(run.success?, run.describe)
    assert_not_match(/exec/, run.stderr)
  end
end
