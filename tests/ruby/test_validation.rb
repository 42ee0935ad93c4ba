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
    assert_rejected({ mode: :foo }, "mode must be :cpu, :wall or :alloc, got :foo")
    assert_rejected({ mode: "cpu" }, 'mode must be :cpu, :wall or :alloc, got "cpu"')
    assert_rejected({ mode: nil }, /mode must be :cpu, :wall or :alloc/)
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

  RT = Rperf::REALTIME_SIGNALS
  RT_TEXT = Regexp.escape("real-time signal number #{RT} (SIGRTMIN..SIGRTMAX)")

  def test_signal_range_from_libc
    # glibc reports SIGRTMIN 34 (32 and 33 are its own) and SIGRTMAX 64;
    # Ruby catches none of them at boot.
    assert_equal(Rperf._c_signal_range[0..1], [RT.min, RT.max])
    assert_operator(RT.min, :>, Signal.list["SYS"], "no classic signal is real-time")
    assert_equal(RT.min + 8, Rperf::DEFAULT_SIGNAL, "default tick signal SIGRTMIN+8")
  end

  def test_signal_out_of_range_does_not_start
    [1000, RT.max + 1, -1, RT.min - 1].each do |sig|
      assert_rejected({ signal: sig }, /\Asignal must be nil, false, 0 \(nanosleep\) or a #{RT_TEXT}, got #{sig}/,
                      /allow_signal: true/)
    end
    assert_block_not_run(signal: RT.max + 1)
  end

  def test_signal_not_real_time_refused
    # SIGSEGV would turn a crash into a handler loop, SIGINT would silence
    # Ctrl-C: classic signals are refused without the explicit opt-in.
    %w[PROF USR1 INT SEGV ALRM CHLD].each do |name|
      sig = Signal.list.fetch(name)
      assert_rejected({ signal: sig },
                      /\Asignal must be .*#{RT_TEXT}, got #{sig} \(SIG#{name}\); another catchable signal needs allow_signal: true\z/)
      assert_rejected({ signal: sig, backend: :signal }, /got #{sig} \(SIG#{name}\)/)
    end
  end

  # Is `sig` caught (a handler installed) at the OS level?
  def os_caught?(sig)
    File.read("/proc/self/status")[/^SigCgt:\s*(\h+)/, 1].to_i(16)[sig - 1] == 1
  end

  def test_allow_signal_opt_in
    # With allow_signal: true a classic signal whose action is the default
    # is taken (SIGPROF: Ruby does not catch it) and restored at stop.
    assert_false(os_caught?(Signal.list["PROF"]))
    r = Rperf.start(frequency: 1000, signal: Signal.list["PROF"], allow_signal: true) { rperf_work_a(0.05) }
    assert_equal(:signal, r[:backend])
    assert_has_label(r, "Object#rperf_work_a", "ticks delivered by SIGPROF")
    assert_false(Rperf.running?)
    assert_false(os_caught?(Signal.list["PROF"]), "the default action is back after stop")
  end

  def test_allow_signal_still_refuses_faults_and_bad_values
    %w[FPE TRAP ABRT SEGV BUS ILL].each do |name|
      sig = Signal.list.fetch(name)
      assert_rejected({ signal: sig, allow_signal: true },
                      /\Asignal #{sig} \(SIG#{name}\) is raised by faults and cannot be the tick signal/, /#{RT_TEXT}/)
    end
    assert_rejected({ signal: 9, allow_signal: true }, "signal 9 (KILL) cannot be caught; use a different signal")
    assert_rejected({ signal: RT.max + 1, allow_signal: true }, /got #{RT.max + 1}/)
    assert_rejected({ signal: 0 - 1, allow_signal: true }, /got -1/)
    assert_rejected({ allow_signal: "yes" }, "allow_signal must be true or false, got \"yes\"")
    assert_rejected({ allow_signal: nil, signal: 40 }, /allow_signal must be true or false, got nil/)
  end

  def test_signal_in_use_refused
    # A signal whose action someone else set is never replaced: an
    # ArgumentError naming it, nothing started, the owner's handler intact.
    sig = RT.min + 5
    hits = Queue.new
    Signal.trap(sig) { hits << :hit }
    begin
      RPERF_BACKENDS.each do |backend|
        assert_rejected({ signal: sig, backend: backend },
                        /\Asignal: #{sig} is in use \(its action is a handler, set by someone else/,
                        /choose a free real-time signal with signal: \(#{RT.min}\.\.#{RT.max}\)/i)
      end
      Process.kill(sig, Process.pid)
      assert_equal(:hit, hits.pop(timeout: 10), "the application's handler still runs")
      Signal.trap(sig, "IGNORE")
      assert_rejected({ signal: sig }, /\Asignal: #{sig} is in use \(its action is SIG_IGN/)
    ensure
      Signal.trap(sig, "DEFAULT")
    end
    r = Rperf.start(frequency: 500, signal: sig) { rperf_work_a(0.02) }
    assert_kind_of(Hash, r, "the same signal is taken once its action is the default again")
  end

  def test_default_signal_in_use_refused
    # The default tick signal (SIGRTMIN+8) is checked too, for both
    # backends; a free signal: makes either backend start.
    sig = Rperf::DEFAULT_SIGNAL
    Signal.trap(sig) {}
    begin
      RPERF_BACKENDS.each do |backend|
        assert_rejected({ backend: backend }, /\Asignal: #{sig} \(rperf's default tick signal, SIGRTMIN\+8\) is in use/)
      end
      assert_rejected({ signal: false }, /signal: #{sig} .* is in use/)
      RPERF_BACKENDS.each do |backend|
        r = Rperf.start(frequency: 500, backend: backend, signal: RT.min + 1) { rperf_work_a(0.02) }
        assert_equal(backend, r[:backend])
      end
    ensure
      Signal.trap(sig, "DEFAULT")
    end
  end

  def test_rperf_signal_environment
    # RPERF_SIGNAL follows the same rules; RPERF_ALLOW_SIGNAL=1 is the opt-in.
    run = lambda do |env|
      Open3.capture3({ "RPERF_ENABLED" => "1", "RPERF_OUTPUT" => File::NULL, "RPERF_FORMAT" => "collapsed" }.merge(env),
                     RbConfig.ruby, "-I", RPERF_BUILD_LIB, "-rrperf", "-e", "p Rperf.running?")
    end
    out, err, st = run.call("RPERF_SIGNAL" => Signal.list["PROF"].to_s)
    assert_equal([1, ""], [st.exitstatus, out], err)
    assert_match(/signal must be .*#{RT_TEXT}, got #{Signal.list['PROF']} \(SIGPROF\)/, err)
    out, err, st = run.call("RPERF_SIGNAL" => Signal.list["PROF"].to_s, "RPERF_ALLOW_SIGNAL" => "1")
    assert_equal([0, "true\n"], [st.exitstatus, out], err)
    out, err, st = run.call("RPERF_SIGNAL" => (RT.min + 2).to_s)
    assert_equal([0, "true\n"], [st.exitstatus, out], err)
  end

  def test_signal_conflicts_with_backend
    assert_rejected({ signal: false, backend: :signal }, /signal/, /backend/)
    assert_rejected({ signal: 0, backend: :signal }, /signal/, /backend/)
  end

  def test_signal_number_with_nanosleep
    # An Integer is the tick signal of either backend (:nanosleep sends it
    # to other Ractors' threads); without backend: it selects :signal.
    r = Rperf.start(frequency: 200, signal: RT.min + 4, backend: :nanosleep) { cpu_spin(0.005) }
    assert_equal(:nanosleep, r[:backend])
    r = Rperf.start(frequency: 200, signal: RT.min + 4) { cpu_spin(0.005) }
    assert_equal(:signal, r[:backend])
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
      { signal: 40, backend: :nanosleep },
      { signal: Rperf::REALTIME_SIGNALS.min },
      { signal: Rperf::REALTIME_SIGNALS.max, allow_signal: true },
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

  # The C entry point checks its arguments too: a caller that bypasses
  # Rperf.start (frequency 0 divided by zero) gets an ArgumentError and
  # nothing starts.
  def test_the_c_start_checks_its_arguments
    good = [1000, 0, true, "holder", 0, 4096, false, 100, false]
    { 0 => 0, 1 => 2, 4 => 65, 5 => 1000, 7 => 0 }.each do |i, bad|
      args = good.dup
      args[i] = bad
      assert_raise(ArgumentError, args.inspect) { Rperf._c_start(*args) }
      assert_false(Rperf.running?)
    end
  end
end
