# frozen_string_literal: true
# Shape and content of the result hash returned by stop (reference §4 plus the
# new keys backend, dropped_samples, profiler_memory_bytes, allocator, threads).
require_relative "helper"

class TestResult < Test::Unit::TestCase
  include RperfTestHelper

  REFERENCE_KEYS = %i[mode frequency trigger_count sampling_count sampling_time_ns
                      detected_thread_count unique_frames unique_stacks start_time_ns
                      duration_ns aggregated_samples].freeze
  NEW_KEYS = %i[backend dropped_samples profiler_memory_bytes allocator threads
                label_sets_overflowed].freeze
  # Keys the engine may add beyond the issue's list (Integer counters).
  OPTIONAL_EXTRA_KEYS = %i[timer_overruns].freeze
  INTEGER_KEYS = %i[frequency trigger_count sampling_count sampling_time_ns detected_thread_count
                    unique_frames unique_stacks start_time_ns duration_ns dropped_samples
                    profiler_memory_bytes].freeze

  def profile(backend, mode, frequency: 1000)
    rt0 = Process.clock_gettime(Process::CLOCK_REALTIME, :nanosecond)
    m0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
    cpu = nil
    result = Rperf.start(frequency: frequency, mode: mode, backend: backend) do
      cpu = rperf_outer(0.15)
    end
    m1 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
    rt1 = Process.clock_gettime(Process::CLOCK_REALTIME, :nanosecond)
    [result, { rt0: rt0, rt1: rt1, elapsed: m1 - m0, cpu: cpu }]
  end

  def test_keys_and_types
    each_combo do |backend, mode|
      result, t = profile(backend, mode)
      ctx = "#{backend}/#{mode}"
      assert_equal((REFERENCE_KEYS + NEW_KEYS).sort, (result.keys - OPTIONAL_EXTRA_KEYS).sort,
                   "exact key set without labels (no :label_sets, no :raw_samples) #{ctx}")
      (result.keys & OPTIONAL_EXTRA_KEYS).each do |k|
        assert_kind_of(Integer, result[k], "#{k} #{ctx}")
        assert_operator(result[k], :>=, 0, "#{k} #{ctx}")
      end
      present = result.keys & REFERENCE_KEYS
      assert_equal(REFERENCE_KEYS, present, "reference keys keep the reference order #{ctx}")

      assert_equal(mode, result[:mode])
      assert_equal(1000, result[:frequency])
      assert_equal(backend, result[:backend])
      assert_kind_of(Symbol, result[:backend])
      INTEGER_KEYS.each { |k| assert_kind_of(Integer, result[k], "#{k} #{ctx}") }
      assert_kind_of(String, result[:allocator])
      assert_include(%w[libc jemalloc], result[:allocator])
      expected_alloc = ENV["RPERF_TEST_EXPECT_ALLOCATOR"]
      assert_equal(expected_alloc, result[:allocator], ctx) if expected_alloc
      assert_kind_of(Array, result[:aggregated_samples])

      assert_operator(result[:profiler_memory_bytes], :>, 0, ctx)
      assert_operator(result[:dropped_samples], :>=, 0, ctx)
      assert_operator(result[:trigger_count], :>, 0, "a 150 ms CPU run at 1 kHz gets ticks #{ctx}")
      assert_operator(result[:sampling_count], :>, 0, ctx)
      assert_operator(result[:sampling_count], :<=, result[:trigger_count],
                      "samples never exceed ticks #{ctx}")
      assert_operator(result[:sampling_time_ns], :>, 0, ctx)
      assert_operator(result[:detected_thread_count], :>=, 1, ctx)
      assert_operator(result[:unique_frames], :>, 0, ctx)
      assert_equal(result[:aggregated_samples].size, result[:unique_stacks], ctx)

      assert_operator(result[:start_time_ns], :>=, t[:rt0], "start_time_ns is CLOCK_REALTIME at start #{ctx}")
      assert_operator(result[:start_time_ns], :<=, t[:rt1], ctx)
      assert_operator(result[:duration_ns], :>, 0, ctx)
      assert_operator(result[:duration_ns], :<=, t[:elapsed], "duration within the measured run #{ctx}")
    end
  end

  # :threads — one entry per thread_seq handed out, in order: Ractor id (main
  # Ractor = 1), the thread's name (the kernel's name of its own native
  # thread: the main thread is "main"; threads sharing native threads under
  # M:N have none), its native thread id.
  def test_threads_table
    each_combo do |backend, mode|
      ctx = "#{backend}/#{mode}"
      worker = nil
      result = Rperf.start(mode: mode, backend: backend) do
        worker = Thread.new do
          Thread.current.name = "rperf-worker"
          rperf_work_a(0.05)
        end
        worker.join
        rperf_work_b(0.05)
      end
      threads = result[:threads]
      assert_kind_of(Array, threads, ctx)
      assert_equal((1..result[:detected_thread_count]).to_a, threads.map { |t| t[:thread_seq] },
                   "one entry per thread_seq, in order #{ctx}")
      threads.each do |t|
        assert_equal(%i[thread_seq ractor_id name native_tid], t.keys, ctx)
        assert_equal(1, t[:ractor_id], "main Ractor #{ctx}")
        assert_kind_of(Integer, t[:native_tid], ctx)
      end
      assert_equal("main", threads[0][:name], "the caller is thread_seq 1 #{ctx}")
      seq = rperf_samples_with(result, "Object#rperf_work_a").map { |s| s[2] }.uniq
      assert_equal(1, seq.size, ctx)
      entry = threads.find { |t| t[:thread_seq] == seq[0] }
      mn = ENV["RUBY_MN_THREADS"] == "1"
      assert_equal(mn ? nil : "rperf-worker", entry[:name], "an exited thread keeps its name #{ctx}")
      assert_not_equal(threads[0][:native_tid], entry[:native_tid], ctx) unless mn
    end
  end

  def test_sample_tuples
    each_combo do |backend, mode|
      result, = profile(backend, mode)
      ctx = "#{backend}/#{mode}"
      assert_not_empty(result[:aggregated_samples], ctx)
      result[:aggregated_samples].each { |s| assert_sample_shape(s, msg: ctx) }
      # without labels every sample has label set 0
      assert_equal([0], result[:aggregated_samples].map { |s| s[3] }.uniq, ctx)
      # unique per (frames, thread_seq, label_set_id)
      keys = result[:aggregated_samples].map { |f, _, ts, ls| [f, ts, ls] }
      assert_equal(keys.size, keys.uniq.size, "aggregated entries are unique per key #{ctx}")
    end
  end

  # A thread per connection repeats the same stacks on thousands of threads:
  # samples with equal frames share one frozen frames Array (the result's
  # size follows the distinct stacks, not the threads), in aggregate and raw
  # mode alike.
  def test_equal_stacks_share_one_frozen_frames_array
    [true, false].each do |aggregate|
      result = Rperf.start(frequency: 1000, mode: :wall, aggregate: aggregate) do
        20.times.map { Thread.new { sleep 0.003; rperf_work_a(0.01) } }.each(&:join)
      end
      samples = result[aggregate ? :aggregated_samples : :raw_samples]
      by_frames = samples.group_by(&:first)
      shared = by_frames.values.select { |group| group.map { |s| s[2] }.uniq.size > 1 }
      assert_not_empty(shared, "the same stack on several threads (aggregate: #{aggregate})")
      shared.each do |group|
        assert(group.all? { |s| s[0].equal?(group[0][0]) },
               "samples with equal frames share one Array (aggregate: #{aggregate})")
      end
      assert(samples.all? { |s| s[0].frozen? }, "frames Arrays are frozen")
      assert_raise(FrozenError) { samples[0][0] << ["x", "y"] }
      assert_equal(by_frames.size, samples.map { |s| s[0].object_id }.uniq.size,
                   "one Array per distinct stack")
    end
  end

  def test_frames_are_leaf_first_with_qualified_labels
    each_combo do |backend, mode|
      result, = profile(backend, mode)
      ctx = "#{backend}/#{mode}"
      stacks = rperf_samples_with(result, "Object#rperf_inner")
      assert_not_empty(stacks, "#{ctx}\n#{rperf_describe(result)}")
      stacks.each do |frames, *|
        labels = rperf_labels_of(frames)
        next if SYNTHETIC_FRAMES.include?(frames[0]) && labels.size == 1

        inner = labels.index("Object#rperf_inner")
        outer = labels.index("Object#rperf_outer")
        assert_not_nil(outer, "caller present below callee #{labels.inspect}")
        assert_operator(inner, :<, outer, "leaf first: callee before caller #{labels.inspect}")
        assert_equal(labels.size - 1, labels.rindex { |l| l == "<main>" } || labels.size - 1,
                     "<main> (if present) is the root-most frame #{labels.inspect}")
      end
      # Most weight sits in cpu_spin, called from rperf_inner.
      spin = rperf_samples_with(result, "Object#cpu_spin")
      assert_not_empty(spin, ctx)
      leafs = spin.map { |f, *| f[0][1] }
      assert(leafs.any? { |l| l == "Object#cpu_spin" || l.start_with?("Process.") || l.include?("clock_gettime") },
             "leaf of a spinning stack is cpu_spin or its clock call: #{leafs.uniq.inspect}")
      spin.each do |frames, *|
        f = frames.find { |fr| fr[1] == "Object#cpu_spin" }
        assert_equal(RPERF_HELPER_PATH, File.expand_path(f[0]), "path of a Ruby method frame")
      end
    end
  end

  def test_c_method_frames
    # Array#each is a C function in Ruby 3.3 (Integer#times is not: it lives
    # in <internal:numeric>).
    big = Array.new(10_000_000, 1)   # before the clock starts: slow under some allocators
    result = Rperf.start(frequency: 1000) do
      deadline = thread_cpu_now + 0.1
      x = 0
      big.each_with_index do |v, i|
        x += v
        break if (i & 0xfff).zero? && thread_cpu_now > deadline
      end
    end
    each_frames = result[:aggregated_samples].flat_map { |f, *| f }.select { |_, l| l == "Array#each" || l == "Enumerable#each_with_index" }
    assert_not_empty(each_frames, rperf_describe(result))
    each_frames.each { |path, _| assert_equal("<C method>", path, "C method frames have path <C method>") }
  end

  def test_weights_bounded_by_elapsed_time
    each_combo do |backend, mode|
      result, t = profile(backend, mode)
      ctx = "#{backend}/#{mode}"
      total = rperf_total_weight(result)
      assert_operator(total, :>, 0, ctx)
      # One thread doing work: total weight cannot exceed elapsed time by much.
      assert_operator(total, :<=, 3 * t[:elapsed],
                      "sum of weights #{total} vs elapsed #{t[:elapsed]} #{ctx}\n#{rperf_describe(result)}")
      # Most of the spun CPU time is attributed to the spinning stack.
      spun = (t[:cpu] * 1e9).to_i
      w = rperf_weight_with(result, "Object#cpu_spin")
      assert_operator(w, :>=, spun / 4, "cpu_spin weight #{w} vs spun #{spun} #{ctx}\n#{rperf_describe(result)}")
      if mode == :cpu
        assert_operator(w, :<=, spun * 3, "cpu_spin weight #{w} vs spun #{spun} #{ctx}")
      end
    end
  end

  def test_deep_stack_truncated_to_512_frames
    RPERF_BACKENDS.each do |backend|
      result = Rperf.start(frequency: 1000, backend: backend) do
        rperf_deep(700) { cpu_spin(0.08) }
      end
      deep = rperf_samples_with(result, "Object#rperf_deep")
      assert_not_empty(deep, backend.to_s)
      deep.each do |frames, *|
        assert_operator(frames.size, :<=, 513, "at most 512 Ruby frames (+1 synthetic)")
      end
      spinning = deep.select { |f, *| f.any? { |fr| fr[1] == "Object#cpu_spin" } }
      assert_not_empty(spinning, backend.to_s)
      frames = spinning.max_by { |f, *| f.size }[0]
      assert_operator(frames.size, :>=, 500, "a deep stack keeps (close to) 512 frames")
      # the leaf side is kept, the root side is dropped
      first_own = frames.find do |f|
        !SYNTHETIC_FRAMES.include?(f) && f[0] != "<C method>" && f[1] != "Object#thread_cpu_now"
      end
      assert_equal("Object#cpu_spin", first_own[1], "leaf side kept: #{frames.first(4).inspect}")
      assert_not_include(rperf_labels_of(frames), "<main>", "root-most frames are the ones dropped")
    end
  end

  def test_moderately_deep_stack_complete
    result = Rperf.start(frequency: 1000) { rperf_deep(150) { cpu_spin(0.08) } }
    stacks = rperf_samples_with(result, "Object#cpu_spin").select { |f, *| f.any? { |fr| fr[1] == "Object#rperf_deep" } }
    assert_not_empty(stacks)
    depth = stacks.map { |f, *| f.count { |fr| fr[1] == "Object#rperf_deep" } }.max
    assert_equal(151, depth, "all 151 recursion frames are kept below 512")
  end

  def test_empty_run
    each_combo do |backend, mode|
      Rperf.start(frequency: 100, mode: mode, backend: backend)
      result = Rperf.stop
      assert_kind_of(Hash, result)
      assert_kind_of(Array, result[:aggregated_samples])
      assert_equal(result[:aggregated_samples].size, result[:unique_stacks])
      result[:aggregated_samples].each { |s| assert_sample_shape(s) }
      assert_operator(result[:sampling_count], :<=, result[:trigger_count],
                      "#{backend}/#{mode}: #{rperf_describe(result)}")
    end
  end

  def test_results_are_independent_between_runs
    r1 = Rperf.start(frequency: 1000) { rperf_work_a(0.08) }
    r2 = Rperf.start(frequency: 1000) { rperf_work_b(0.08) }
    assert_has_label(r1, "Object#rperf_work_a")
    assert_has_label(r2, "Object#rperf_work_b")
    refute_has_label(r2, "Object#rperf_work_a", "a new run starts empty")
    assert_operator(r2[:start_time_ns], :>, r1[:start_time_ns])
  end

  def test_strings_are_usable
    result = Rperf.start(frequency: 1000) { rperf_work_a(0.05) }
    result[:aggregated_samples].each do |frames, *|
      frames.each do |path, label|
        assert_true(path.valid_encoding?, path.inspect)
        assert_true(label.valid_encoding?, label.inspect)
      end
    end
    # The result survives GC and compaction (it is made of ordinary Ruby objects).
    GC.start
    GC.compact if GC.respond_to?(:compact)
    assert_has_label(result, "Object#rperf_work_a")
  end
end
