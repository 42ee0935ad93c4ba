# frozen_string_literal: true
# Many threads; repeated start/stop; threads that existed before start.
require_relative "helper"

def rperf_thread_work(seconds) = cpu_spin(seconds)
def rperf_background_work(seconds) = cpu_spin(seconds)
def rperf_preexisting_work(seconds) = cpu_spin(seconds)

class TestThreads < Test::Unit::TestCase
  include RperfTestHelper

  def test_200_threads
    each_combo do |backend, mode|
      cpu_times = Queue.new
      result = Rperf.start(frequency: 1000, mode: mode, backend: backend) do
        threads = 200.times.map do
          Thread.new { cpu_times << rperf_thread_work(0.002) }
        end
        threads.each(&:join)
      end
      ctx = "#{backend}/#{mode}\n#{rperf_describe(result)}"
      assert_kind_of(Hash, result)
      result[:aggregated_samples].each { |s| assert_sample_shape(s, msg: ctx) }
      work = rperf_samples_with(result, "Object#rperf_thread_work")
      seqs = work.map { |s| s[2] }.uniq
      assert_operator(seqs.size, :>=, 20, "many distinct threads have samples #{ctx}")
      seqs.each { |q| assert_operator(q, :>=, 1, ctx) }
      all_seqs = result[:aggregated_samples].map { |s| s[2] }.uniq - [0]
      assert_operator(result[:detected_thread_count], :>=, all_seqs.size,
                      "detected_thread_count covers every thread_seq seen #{ctx}")
      assert_operator(result[:detected_thread_count], :>=, seqs.size, ctx)
      assert_operator(all_seqs.max, :<=, result[:detected_thread_count], "thread_seq values are 1..count #{ctx}")
      assert_operator(result[:detected_thread_count], :<=, 200 + 5, "no more threads than existed #{ctx}")
      if mode == :cpu
        spent = 0.0
        spent += cpu_times.pop until cpu_times.empty?
        spent_ns = (spent * 1e9).to_i
        w = work.sum { |s| s[1] }
        # Short-lived threads' time is delayed, never lost: it reaches the result.
        assert_operator(w, :>=, spent_ns / 4, "thread work weight #{w} vs CPU #{spent_ns} #{ctx}")
        assert_operator(w, :<=, spent_ns * 3, ctx)
      end
    end
  end

  def test_concurrent_threads_each_get_their_own_weight
    # Two threads spin at the same time (GVL contention). Each thread's CPU
    # work must be charged to that thread's own stack, in every repetition:
    # time may be delayed but never dumped on another stack (e.g. Thread#join).
    # Signal backend only: the nanosleep backend triggers the job from a
    # non-Ruby thread, which Ruby 3.3 delivers to the main Ractor's
    # `running_ec` — possibly a thread waiting for the GVL (docs/backends.md,
    # "Known limitation").
    [:signal].each do |backend|
      10.times do |rep|
        gate = Queue.new
        cpu_main = cpu_other = nil
        result = Rperf.start(frequency: 1000, mode: :cpu, backend: backend) do
          t = Thread.new { gate.pop; cpu_other = rperf_background_work(0.05) }
          gate << :go
          cpu_main = rperf_thread_work(0.05)
          t.join
        end
        ctx = "#{backend} repetition #{rep}\n#{rperf_describe(result)}"
        main_w = rperf_weight_with(result, "Object#rperf_thread_work")
        other_w = rperf_weight_with(result, "Object#rperf_background_work")
        assert_operator(main_w, :>=, (cpu_main * 1e9 / 4).to_i, "main thread's spin is charged to its stack #{ctx}")
        assert_operator(other_w, :>=, (cpu_other * 1e9 / 4).to_i, "other thread's spin is charged to its stack #{ctx}")
      end
    end
  end

  def test_main_thread_is_thread_seq_1
    RPERF_BACKENDS.each do |backend|
      result = Rperf.start(frequency: 1000, backend: backend) do
        rperf_work_a(0.03)
        Thread.new { rperf_thread_work(0.03) }.join
      end
      main = rperf_samples_with(result, "Object#rperf_work_a").map { |s| s[2] }.uniq
      other = rperf_samples_with(result, "Object#rperf_thread_work").map { |s| s[2] }.uniq
      assert_equal([1], main, "the thread that called start is thread_seq 1 (#{backend})")
      assert_equal(1, other.size, backend.to_s)
      assert_not_equal(1, other.first, backend.to_s)
    end
  end

  def test_threads_started_before_start_are_sampled
    each_combo do |backend, mode|
      ready = Queue.new
      go = Queue.new
      t = Thread.new do
        ready << :ready
        go.pop
        rperf_preexisting_work(0.1)
      end
      ready.pop
      Rperf.start(frequency: 1000, mode: mode, backend: backend)
      # blocked for longer than it then runs: in wall mode its run used to
      # weigh nothing for as long as that block (docs/reliability.md)
      sleep 0.15
      go << :go
      t.join
      result = Rperf.stop
      assert_has_label(result, "Object#rperf_preexisting_work", "#{backend}/#{mode}")
      w = rperf_weight_with(result, "Object#rperf_preexisting_work")
      assert_operator(w, :>=, 25_000_000, "#{backend}/#{mode}: most of 0.1 s of CPU\n#{rperf_describe(result)}")
    end
  end

  def test_start_stop_200_times
    RPERF_BACKENDS.each do |backend|
      200.times do |i|
        mode = i.even? ? :cpu : :wall
        Rperf.start(frequency: 10_000, mode: mode, backend: backend, aggregate: i % 3 != 0)
        cpu_spin(0.0005)
        Rperf.snapshot if i % 7 == 0 && i % 3 != 0
        r = Rperf.stop
        assert_kind_of(Hash, r, "iteration #{i} #{backend}")
        assert_false(Rperf.running?)
      end
    end
  end

  def test_start_stop_200_times_with_threads_running
    each_combo(modes: [:cpu]) do |backend, _|
      stop = false
      workers = 4.times.map do |k|
        Thread.new do
          n = 0
          until stop
            k.even? ? rperf_background_work(0.001) : rperf_alloc_work(0.001)
            Rperf.running? ? Rperf.label(worker: k) { Thread.pass } : Thread.pass
            n += 1
          end
          n
        end
      end
      begin
        200.times do |i|
          Rperf.start(frequency: 10_000, mode: i.even? ? :cpu : :wall, backend: backend)
          cpu_spin(0.001)
          r = Rperf.stop
          assert_kind_of(Hash, r, "iteration #{i} #{backend}")
          r[:aggregated_samples].each { |s| assert_operator(s[1], :>, 0) }
        end
      ensure
        stop = true
        workers.each(&:join)
      end
      workers.each { |w| assert_operator(w.value, :>, 0) }
    end
  end

  def test_threads_created_and_dying_during_profiling_and_stop
    # Threads keep being born and dying while stop runs.
    RPERF_BACKENDS.each do |backend|
      stop = false
      spawner = Thread.new do
        until stop
          Array.new(4) { Thread.new { cpu_spin(0.0005) } }.each(&:join)
        end
      end
      begin
        20.times do
          r = Rperf.start(frequency: 5000, backend: backend) { cpu_spin(0.005) }
          assert_kind_of(Hash, r)
        end
      ensure
        stop = true
        spawner.join
      end
    end
  end

  def test_stop_in_other_thread_while_main_spins
    RPERF_BACKENDS.each do |backend|
      Rperf.start(frequency: 2000, backend: backend)
      q = Queue.new
      stopper = Thread.new { q.pop; Rperf.stop }
      rperf_work_a(0.02)
      q << :stop
      r = stopper.value
      assert_kind_of(Hash, r)
      assert_false(Rperf.running?)
      rperf_work_a(0.01) # no samples and no crash after stop
    end
  end

  # M:N for the main Ractor is one answer for the hooks, the engine and the
  # backends, and never 1:1 when Ruby booted M:N: an application that
  # removes RUBY_MN_THREADS from ENV before requiring rperf does not change
  # it (taking 1:1 threads for M:N costs only speed, so setting it in ENV
  # makes it M:N).
  def test_mn_threads_are_known_whatever_env_says_at_require
    script = ->(edit) { "#{edit}; require 'rperf'; print Rperf._c_main_mn" }
    cases = [[{ "RUBY_MN_THREADS" => "1" }, 'ENV.delete("RUBY_MN_THREADS")', "true"],
             [{ "RUBY_MN_THREADS" => "1" }, "nil", "true"],
             [{ "RUBY_MN_THREADS" => nil }, 'ENV["RUBY_MN_THREADS"] = "1"', "true"],
             [{ "RUBY_MN_THREADS" => nil }, "nil", "false"]]
    cases.each do |env, edit, want|
      run = run_command([RbConfig.ruby, "-I", RPERF_BUILD_LIB, "-e", script.call(edit)], env: env)
      assert(run.status.success?, run.describe)
      assert_equal(want, run.stdout, "#{env} #{edit}")
    end
  end
end
