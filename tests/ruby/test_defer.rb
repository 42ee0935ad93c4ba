# frozen_string_literal: true
# Deferred runs: Rperf.start(defer: true) samples only threads inside
# Rperf.profile blocks (and requests and jobs of the middlewares), takes no
# tick while no thread is inside one, and a profile block behaves as a user
# expects with nesting, exceptions, threads, Ractors and fork; without a
# run a block just runs.
require_relative "helper"
require "rperf/middleware"

DEFER_WORK = <<~RUBY
  def rperf_in_block(s) = cpu_spin(s)
  def rperf_out_of_block(s) = cpu_spin(s)
  def rperf_after_inner(s) = cpu_spin(s)
  def rperf_thread_work(s) = cpu_spin(s)
RUBY
eval(DEFER_WORK) # rubocop:disable Security/Eval (the same methods in child Rubies)

class TestDefer < Test::Unit::TestCase
  include RperfTestHelper

  def teardown
    Rperf.stop if Rperf.running?
  end

  def weight(data, name) = rperf_weight_with(data, "Object##{name}")

  def test_only_the_work_inside_blocks_is_sampled
    each_combo do |backend, mode|
      ctx = "#{backend}/#{mode}"
      Rperf.start(defer: true, frequency: 1000, backend: backend, mode: mode)
      rperf_out_of_block(0.05)
      value = Rperf.profile { rperf_in_block(0.05) }
      rperf_out_of_block(0.05)
      data = Rperf.stop
      assert_equal(0.05.class, value.class, "the block's value is returned #{ctx}")
      assert_operator(weight(data, "rperf_in_block"), :>, 0, "#{ctx}\n#{rperf_describe(data)}")
      assert_equal(0, weight(data, "rperf_out_of_block"), "#{ctx}\n#{rperf_describe(data)}")
      # every sample lies inside the block
      data[:aggregated_samples].each do |frames, w|
        assert(frames.any? { |f| f[1] == "Rperf.profile" }, "#{ctx}: #{w} ns outside a block: #{frames.first(4)}")
      end
    end
  end

  # No thread inside a block: the backends take no tick at all.
  def test_no_tick_while_no_thread_is_inside_a_block
    each_combo do |backend, mode|
      Rperf.start(defer: true, frequency: 1000, backend: backend, mode: mode)
      rperf_out_of_block(0.05)
      sleep 0.02
      data = Rperf.stop
      assert_equal(0, data[:trigger_count], "#{backend}/#{mode}")
      assert_equal(0, data[:sampling_count], "#{backend}/#{mode}")
      assert_equal([], data[:aggregated_samples], "#{backend}/#{mode}")
    end
  end

  def test_other_threads_outside_blocks_are_not_sampled
    each_combo do |backend, mode|
      ctx = "#{backend}/#{mode}"
      Rperf.start(defer: true, frequency: 1000, backend: backend, mode: mode)
      stop = false
      spinner = Thread.new { rperf_out_of_block(0.01) until stop }
      inside = Thread.new { Rperf.profile { rperf_in_block(0.05) } }
      inside.join
      stop = true
      spinner.join
      data = Rperf.stop
      assert_operator(weight(data, "rperf_in_block"), :>, 0, "#{ctx}\n#{rperf_describe(data)}")
      assert_equal(0, weight(data, "rperf_out_of_block"), "#{ctx}\n#{rperf_describe(data)}")
    end
  end

  def test_nesting_and_exceptions
    Rperf.start(defer: true, frequency: 1000)
    Rperf.profile(outer: 1) do
      Rperf.profile(inner: 2) { assert_equal({ outer: 1, inner: 2 }, Rperf.labels) }
      assert_equal(1, Rperf._c_profile_depth)
      rperf_after_inner(0.03) # still inside the outer block
    end
    assert_equal(0, Rperf._c_profile_depth)
    assert_equal(0, Rperf._c_profiled_threads)
    error = assert_raise(RuntimeError) do
      Rperf.profile(req: "x") { raise "boom" }
    end
    assert_equal("boom", error.message)
    assert_equal(0, Rperf._c_profile_depth, "left at the exception")
    assert_equal({}, Rperf.labels, "labels restored at the exception")
    assert_equal(0, Rperf._c_profiled_threads)
    rperf_out_of_block(0.03)
    data = Rperf.stop
    assert_operator(weight(data, "rperf_after_inner"), :>, 0, rperf_describe(data))
    assert_equal(0, weight(data, "rperf_out_of_block"), rperf_describe(data))
  end

  # A thread made inside a block does the block's work: it is profiled for
  # its life; one made outside is not.
  def test_a_thread_started_inside_a_block_is_profiled
    Rperf.start(defer: true, frequency: 1000)
    Rperf.profile { Thread.new { rperf_thread_work(0.04) }.join }
    Thread.new { rperf_out_of_block(0.04) }.join
    data = Rperf.stop
    assert_operator(weight(data, "rperf_thread_work"), :>, 0, rperf_describe(data))
    assert_equal(0, weight(data, "rperf_out_of_block"), rperf_describe(data))
  end

  def test_a_block_entered_before_the_start_counts_from_the_start
    data = nil
    Rperf.profile do
      Rperf.start(defer: true, frequency: 1000)
      rperf_in_block(0.03)
      data = Rperf.stop
    end
    assert_operator(weight(data, "rperf_in_block"), :>, 0, rperf_describe(data))
  end

  def test_without_a_run_a_block_just_runs
    assert_false(Rperf.running?)
    assert_equal(42, Rperf.profile(req: "a") { 42 })
    assert_equal(0, Rperf._c_profile_depth)
    error = assert_raise(ArgumentError) { Rperf.profile(req: "a") }
    assert_match(/Rperf\.profile requires a block/, error.message)
  end

  # Not deferred: every thread is sampled; a block only labels.
  def test_a_run_not_deferred_samples_everything_and_blocks_label
    Rperf.start(frequency: 1000)
    rperf_out_of_block(0.03)
    Rperf.profile(req: "a") { rperf_in_block(0.03) }
    data = Rperf.stop
    assert_operator(weight(data, "rperf_out_of_block"), :>, 0, rperf_describe(data))
    id = data[:label_sets].index({ req: "a" })
    assert_not_nil(id, data[:label_sets].inspect)
    in_block = rperf_samples_with(data, "Object#rperf_in_block")
    assert(in_block.all? { |s| s[3] == id }, "in-block samples carry the block's labels")
  end

  def test_defer_is_validated
    error = assert_raise(ArgumentError) { Rperf.start(defer: "yes") }
    assert_match(/defer must be true or false/, error.message)
    assert_false(Rperf.running?)
  end

  def test_the_middleware_samples_only_requests_when_deferred
    app = Rperf::Middleware.new(->(_env) { rperf_in_block(0.03) && [200, {}, ["ok"]] })
    env = { "REQUEST_METHOD" => "GET", "PATH_INFO" => "/users/1" }
    each_combo(backends: [:holder]) do |_backend, mode|
      Rperf.start(defer: true, frequency: 1000, mode: mode)
      rperf_out_of_block(0.03)
      app.call(env.dup)
      rperf_out_of_block(0.03)
      data = Rperf.stop
      assert_operator(weight(data, "rperf_in_block"), :>, 0, "#{mode}\n#{rperf_describe(data)}")
      assert_equal(0, weight(data, "rperf_out_of_block"), "#{mode}\n#{rperf_describe(data)}")
      id = data[:label_sets].index({ endpoint: "GET /users/:id" })
      assert(rperf_samples_with(data, "Object#rperf_in_block").all? { |s| s[3] == id })
    end
  end

  def test_the_job_middlewares_sample_only_jobs_when_deferred
    require "rperf/sidekiq"
    Rperf.start(defer: true, frequency: 1000)
    rperf_out_of_block(0.03)
    Rperf::Sidekiq.new.call(nil, { "class" => "HardJob" }, "default") { rperf_in_block(0.03) }
    data = Rperf.stop
    assert_operator(weight(data, "rperf_in_block"), :>, 0, rperf_describe(data))
    assert_equal(0, weight(data, "rperf_out_of_block"), rperf_describe(data))
    id = data[:label_sets].index({ job: "HardJob", queue: "default" })
    assert(rperf_samples_with(data, "Object#rperf_in_block").all? { |s| s[3] == id })
  end

  def test_environment_start_defers
    run = run_child(DEFER_WORK + <<~RUBY, env: { "RPERF_ENABLED" => "1", "RPERF_DEFER" => "1", "RPERF_OUTPUT" => File::NULL })
      rperf_out_of_block(0.03)
      Rperf.profile { rperf_in_block(0.03) }
      data = Rperf.stop
      child_report("in" => rperf_weight_with(data, "Object#rperf_in_block"),
                   "out" => rperf_weight_with(data, "Object#rperf_out_of_block"))
    RUBY
    assert_child_ok(run)
    assert_operator(run.report["in"], :>, 0, run.describe)
    assert_equal(0, run.report["out"], run.describe)
  end

  # A fork inside a block: the child goes on inside it (its part joins the
  # root's profile with its pid); what it does after the block is not
  # sampled.
  def test_fork_inside_a_block
    run = run_child(DEFER_WORK + <<~'RUBY')
      Rperf.start(defer: true, frequency: 1000)
      pid = Rperf.profile do
        fork do
          rperf_in_block(0.05)
          Rperf._c_profile_leave # the block ends in the child too
          rperf_out_of_block(0.05)
        end
      end
      Process.wait(pid)
      data = Rperf.stop
      ids = data[:label_sets].each_index.select { |i| [pid, pid.to_s].include?(data[:label_sets][i][:pid]) }
      child = data[:aggregated_samples].select { |s| ids.include?(s[3]) }
      child_report("in" => child.select { |s| s[0].any? { |f| f[1] == "Object#rperf_in_block" } }.sum { |s| s[1] },
                   "out" => rperf_weight_with(data, "Object#rperf_out_of_block"),
                   "processes" => data[:process_count])
    RUBY
    assert_child_ok(run)
    assert_equal(2, run.report["processes"], run.describe)
    assert_operator(run.report["in"], :>, 0, run.describe)
    assert_equal(0, run.report["out"], run.describe)
  end

  def test_ractors_inside_and_outside_blocks
    run = run_child(DEFER_WORK + <<~'RUBY', timeout: 180)
      Warning[:experimental] = false
      Rperf.start(defer: true, frequency: 1000)
      inside = Ractor.new { Rperf.profile { rperf_in_block(0.1) }; :done }
      outside = Ractor.new { rperf_out_of_block(0.1); :done }
      [inside, outside].each { |r| ractor_value(r) }
      data = Rperf.stop
      child_report("in" => rperf_weight_with(data, "Object#rperf_in_block"),
                   "out" => rperf_weight_with(data, "Object#rperf_out_of_block"))
    RUBY
    assert_child_ok(run)
    assert_operator(run.report["in"], :>, 0, run.describe)
    assert_equal(0, run.report["out"], run.describe)
  end
end
