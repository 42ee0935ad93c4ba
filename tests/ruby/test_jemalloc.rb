# frozen_string_literal: true
# The jemalloc path: with Debian's libjemalloc preloaded the profiler reports
# (and uses) "jemalloc"; without it "libc".
require_relative "helper"

class TestJemalloc < Test::Unit::TestCase
  include RperfTestHelper

  WORKLOAD = <<~'RUBY'
    out = []
    RPERF_BACKENDS.each do |backend|
      RPERF_MODES.each do |mode|
        r = Rperf.start(frequency: 2000, mode: mode, backend: backend) do
          Rperf.label(job: "j") { rperf_work_a(0.03) }
          Rperf.snapshot
          Rperf.snapshot(clear: true)
          rperf_work_b(0.03)
          Thread.new { rperf_alloc_work(0.03) }.join
        end
        raw = Rperf.start(frequency: 2000, mode: mode, backend: backend, aggregate: false) { rperf_work_a(0.02) }
        out << { "combo" => "#{backend}/#{mode}", "allocator" => r[:allocator], "raw_allocator" => raw[:allocator],
                 "mem" => r[:profiler_memory_bytes],
                 "has_b" => r[:aggregated_samples].any? { |f, *| f.any? { |fr| fr[1] == "Object#rperf_work_b" } },
                 "raw_n" => raw[:raw_samples].size }
      end
    end
    # fork under the allocator as well
    Rperf.start(frequency: 2000)
    pid = fork { r = Rperf.start(frequency: 2000) { cpu_spin(0.02) }; exit!(r.is_a?(Hash) ? 0 : 1) }
    _, st = Process.wait2(pid)
    Rperf.stop
    child_report("runs" => out, "fork_ok" => st.success?, "fork_sig" => st.termsig,
                 "preloaded" => File.read("/proc/self/maps").include?("libjemalloc"))
  RUBY

  def check_runs(run, expected)
    assert_child_ok(run, expected)
    rep = run.report
    assert_not_nil(rep, run.describe)
    assert_equal(RPERF_BACKENDS.size * RPERF_MODES.size, rep["runs"].size, run.describe)
    rep["runs"].each do |r|
      ctx = "#{r.inspect}\n#{run.describe}"
      assert_equal(expected, r["allocator"], ctx)
      assert_equal(expected, r["raw_allocator"], ctx)
      assert_kind_of(Integer, r["mem"], ctx)
      assert_operator(r["mem"], :>, 0, ctx)
      # :nanosleep triggers the main Ractor through Ruby's running_ec, which
      # the workload's earlier Thread.new leaves on that (finished) thread:
      # its jobs may then not run on the main thread (docs/backends.md,
      # "Known limitation of :nanosleep"); the other backends are exact.
      assert_true(r["has_b"], ctx) unless r["combo"].start_with?("nanosleep/")
      assert_operator(r["raw_n"], :>, 0, ctx)
    end
    assert_true(rep["fork_ok"], "forked child under #{expected}: #{rep.inspect}")
    rep
  end

  def test_libc_without_preload
    run = run_child(WORKLOAD, env: { "LD_PRELOAD" => nil })
    rep = check_runs(run, "libc")
    assert_false(rep["preloaded"])
  end

  def test_jemalloc_with_preload
    lib = jemalloc_path
    omit("Debian's libjemalloc.so.2 not found under /usr/lib/*/ (apt-get install libjemalloc2)") unless lib
    run = run_child(WORKLOAD, env: { "LD_PRELOAD" => lib })
    rep = check_runs(run, "jemalloc")
    assert_true(rep["preloaded"], "libjemalloc was really loaded")
  end

  def test_result_file_under_jemalloc
    # Re-run another test file of the suite entirely under jemalloc.
    lib = jemalloc_path
    omit("Debian's libjemalloc.so.2 not found under /usr/lib/*/") unless lib
    file = File.join(__dir__, "test_result.rb")
    run = run_command([RbConfig.ruby, "-I", RPERF_BUILD_LIB, file],
                      env: { "LD_PRELOAD" => lib, "RPERF_TEST_EXPECT_ALLOCATOR" => "jemalloc" },
                      timeout: 300)
    assert(run.success?, "test_result.rb under LD_PRELOAD=#{lib}\n#{run.describe}")
  end
end
