# frozen_string_literal: true
# Option validation: every invalid option raises ArgumentError naming the
# option (and the accepted values) and nothing is started.
require_relative "helper"

class TestValidation < Test::Unit::TestCase
  include RperfTestHelper

  # Asserts that start(**opts) raises ArgumentError matching every pattern,
  # that nothing is running afterwards, and that a valid start still works.
  def assert_rejected(opts, *patterns)
    err = assert_raise(ArgumentError, "start(#{opts.inspect}) must raise ArgumentError") do
      Rperf.start(**opts)
    end
    patterns.each do |pat|
      if pat.is_a?(String)
        assert_equal(pat, err.message, "message for #{opts.inspect}")
      else
        assert_match(pat, err.message, "message for #{opts.inspect}")
      end
    end
    assert_false(Rperf.running?, "nothing started after start(#{opts.inspect})")
    assert_nil(Rperf.stop, "stop after rejected start(#{opts.inspect})")
    err
  end

  def assert_block_not_run(opts)
    ran = false
    assert_raise(ArgumentError) { Rperf.start(**opts) { ran = true } }
    assert_false(ran, "block must not run for invalid start(#{opts.inspect})")
    assert_false(Rperf.running?)
  end

  def teardown
    # After every rejection a normal run must still work (no leaked state).
    r = Rperf.start(frequency: 100) { cpu_spin(0.005) }
    assert_kind_of(Hash, r, "a valid start works after the rejected ones")
  end

  # ---- frequency -------------------------------------------------------------

  def test_frequency_not_positive_integer
    # The reference message, optionally followed by the accepted range.
    { 0 => "0", -1 => "-1", 100.0 => "100.0", "100" => '"100"', nil => "nil", true => "true" }.each do |bad, shown|
      assert_rejected({ frequency: bad }, /\Afrequency must be a positive integer \(got #{Regexp.escape(shown)}\)/)
    end
  end

  def test_frequency_too_high
    assert_rejected({ frequency: 10_001 }, /\Afrequency must be <= 10000 \(10KHz\), got 10001/)
    assert_rejected({ frequency: 2**64 }, /frequency/)
  end

  def test_frequency_bounds_accepted
    [1, 10_000].each do |hz|
      RPERF_BACKENDS.each do |backend|
        r = Rperf.start(frequency: hz, backend: backend) { cpu_spin(0.01) }
        assert_kind_of(Hash, r, "frequency #{hz} with #{backend}")
        assert_equal(hz, r[:frequency])
      end
    end
  end

  def test_frequency_checked_before_mode
    assert_rejected({ frequency: 0, mode: :foo }, /frequency/)
  end

  def test_invalid_frequency_block_not_run
    assert_block_not_run(frequency: 0)
  end

  # ---- mode ------------------------------------------------------------------

  def test_mode_invalid
    assert_rejected({ mode: :foo }, "mode must be :cpu or :wall, got :foo")
    assert_rejected({ mode: "cpu" }, 'mode must be :cpu or :wall, got "cpu"')
    assert_rejected({ mode: nil }, /mode must be :cpu or :wall/)
    assert_block_not_run(mode: :bar)
  end

  # ---- backend ---------------------------------------------------------------

  def test_backend_unknown_lists_registered
    err = assert_rejected({ backend: :foo }, /backend/, /foo/)
    Rperf.backends.each do |name|
      assert_match(/#{Regexp.escape(name.to_s)}/, err.message, "message lists registered backend #{name}")
    end
    assert_rejected({ backend: 42 }, /backend/)
    assert_block_not_run(backend: :nope)
  end

  # ---- signal ----------------------------------------------------------------

  def test_signal_wrong_type
    assert_rejected({ signal: true }, /signal/, /nil, false, or an Integer/)
    assert_rejected({ signal: "9" }, /signal/, /nil, false, or an Integer/)
    assert_rejected({ signal: "abc" }, /signal/)
    assert_rejected({ signal: 40.0 }, /signal/)
    assert_rejected({ signal: :SIGUSR1 }, /signal/)
  end

  def test_signal_uncatchable
    assert_rejected({ signal: 9 }, "signal 9 (KILL) cannot be caught; use a different signal")
    assert_rejected({ signal: 19 }, "signal 19 (STOP) cannot be caught; use a different signal")
    assert_block_not_run(signal: 9)
  end

  def test_signal_out_of_range_does_not_start
    # No such signal: must not start (ArgumentError preferred; a RuntimeError
    # from the timer set-up is tolerated), and must leave nothing running.
    [1000, 65].each do |sig|
      assert_raise(ArgumentError, RuntimeError) { Rperf.start(signal: sig) }
      assert_false(Rperf.running?, "signal: #{sig}")
    end
  end

  def test_signal_conflicts_with_backend
    assert_rejected({ signal: false, backend: :signal }, /signal/, /backend/)
    assert_rejected({ signal: 40, backend: :nanosleep }, /signal/, /backend/)
  end

  # ---- exporter / format / output -------------------------------------------

  def test_exporter_unknown
    err = assert_rejected({ exporter: :no_such_exporter }, /exporter/, /no_such_exporter/)
    if Rperf.respond_to?(:exporters)
      Rperf.exporters.each do |name|
        assert_match(/#{Regexp.escape(name.to_s)}/, err.message, "message lists exporter #{name}")
      end
    end
    assert_block_not_run(exporter: :no_such_exporter)
  end

  def test_format_unknown
    assert_rejected({ format: :no_such_format }, /format/, /no_such_format/)
    assert_rejected({ format: :no_such_format, output: File.join(Dir.tmpdir, "rperf-never.out") }, /format/)
    refute(File.exist?(File.join(Dir.tmpdir, "rperf-never.out")), "no file written for a rejected start")
  end

  def test_output_wrong_type
    assert_rejected({ output: 42 }, /output/)
    assert_rejected({ output: :sym }, /output/)
  end

  def test_valid_combinations_accepted
    [
      { signal: false, backend: :nanosleep },
      { signal: nil, backend: :nanosleep },
      { signal: nil, backend: :signal },
      { signal: 40, backend: :signal },
      { mode: :wall, aggregate: false },
      { verbose: nil, stat: nil, aggregate: nil },
    ].each do |opts|
      r = Rperf.start(frequency: 200, **opts) { cpu_spin(0.005) }
      assert_kind_of(Hash, r, opts.inspect)
    end
  end

  def test_unknown_keyword
    assert_raise(ArgumentError) { Rperf.start(frequncy: 100) }
    assert_false(Rperf.running?)
  end
end
