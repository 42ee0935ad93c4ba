# frozen_string_literal: true
# Public API surface: start/stop/running?, block form, backends, VERSION.
require_relative "helper"

class TestApi < Test::Unit::TestCase
  include RperfTestHelper

  def test_version
    assert_kind_of(String, Rperf::VERSION)
    assert_match(/\A\d+\.\d+\.\d+/, Rperf::VERSION)
  end

  def test_backends_lists_registered_backends
    backends = Rperf.backends
    assert_kind_of(Array, backends)
    assert_include(backends, :signal)
    assert_include(backends, :nanosleep)
    backends.each { |b| assert_kind_of(Symbol, b) }
    assert_equal(backends.uniq, backends, "no duplicate backend names")
  end

  def test_start_returns_nil_and_stop_returns_hash_for_every_combo
    each_combo do |backend, mode|
      assert_nil(Rperf.start(frequency: 1000, mode: mode, backend: backend))
      assert_true(Rperf.running?, "#{backend}/#{mode}")
      rperf_work_a(0.05)
      result = Rperf.stop
      assert_false(Rperf.running?, "#{backend}/#{mode}")
      assert_kind_of(Hash, result, "#{backend}/#{mode}")
      assert_equal(mode, result[:mode])
      assert_equal(1000, result[:frequency])
      assert_equal(backend, result[:backend])
      assert_has_label(result, "Object#rperf_work_a", "#{backend}/#{mode}")
    end
  end

  def test_defaults
    result = Rperf.start { rperf_work_a(0.03) }
    assert_equal(:cpu, result[:mode])
    assert_equal(1000, result[:frequency])
    assert_equal(:holder, result[:backend], "holder is the default backend on Linux")
    assert_include(result.keys, :aggregated_samples)
    assert_not_include(result.keys, :raw_samples, "aggregate: true is the default")
  end

  def test_all_documented_options_are_accepted
    result = Rperf.start(frequency: 500, mode: :wall, backend: :nanosleep, exporter: nil,
                         format: nil, output: nil, aggregate: true, signal: nil,
                         verbose: false, stat: false) do
      rperf_work_a(0.03)
    end
    assert_kind_of(Hash, result)
    assert_equal(500, result[:frequency])
    assert_equal(:wall, result[:mode])
    assert_equal(:nanosleep, result[:backend])
  end

  def test_running_predicate
    assert_false(Rperf.running?)
    Rperf.start(frequency: 100)
    assert_true(Rperf.running?)
    Rperf.stop
    assert_false(Rperf.running?)
  end

  def test_stop_when_not_running_returns_nil
    assert_nil(Rperf.stop)
    Rperf.start(frequency: 100)
    assert_kind_of(Hash, Rperf.stop)
    assert_nil(Rperf.stop, "second stop")
    assert_nil(Rperf.stop, "third stop")
  end

  def test_start_while_running_raises_and_keeps_first_profiler
    RPERF_BACKENDS.each do |backend|
      Rperf.start(frequency: 1000, backend: backend, mode: :cpu)
      RPERF_BACKENDS.each do |other|
        assert_raise_with_message(RuntimeError, "Rperf is already running") do
          Rperf.start(frequency: 200, backend: other, mode: :wall)
        end
      end
      assert_true(Rperf.running?)
      rperf_work_a(0.03)
      result = Rperf.stop
      assert_kind_of(Hash, result)
      assert_equal(:cpu, result[:mode], "the first profiler's settings are kept")
      assert_equal(1000, result[:frequency])
      assert_equal(backend, result[:backend])
    end
  end

  def test_block_form_while_running_raises_without_running_block
    Rperf.start(frequency: 100)
    ran = false
    assert_raise_with_message(RuntimeError, "Rperf is already running") do
      Rperf.start(frequency: 100) { ran = true }
    end
    assert_false(ran, "block must not run when start fails")
    assert_true(Rperf.running?, "the outer profiler keeps running")
  end

  def test_block_form_returns_result_and_stops
    each_combo do |backend, mode|
      inside = nil
      result = Rperf.start(frequency: 1000, mode: mode, backend: backend) do
        inside = Rperf.running?
        rperf_work_a(0.03)
        :block_value
      end
      assert_true(inside, "running inside the block")
      assert_false(Rperf.running?, "stopped after the block")
      assert_kind_of(Hash, result, "block form returns the result hash, not the block value")
      assert_equal(mode, result[:mode])
      assert_equal(backend, result[:backend])
      assert_has_label(result, "Object#rperf_work_a", "#{backend}/#{mode}")
    end
  end

  class BlockError < StandardError; end

  def test_block_form_reraises_after_stopping
    each_combo do |backend, mode|
      err = BlockError.new("boom #{backend} #{mode}")
      raised = assert_raise(BlockError) do
        Rperf.start(frequency: 1000, mode: mode, backend: backend) do
          rperf_work_a(0.01)
          raise err
        end
      end
      assert_same(err, raised, "the block's own exception object propagates")
      assert_false(Rperf.running?, "profiler stopped before re-raising")
      assert_nil(Rperf.stop)
    end
    # and a new run works afterwards
    assert_kind_of(Hash, Rperf.start(frequency: 100) { rperf_work_a(0.01) })
  end

  def test_block_form_reraises_non_standard_errors
    assert_raise(Interrupt) do
      Rperf.start(frequency: 100) { raise Interrupt }
    end
    assert_false(Rperf.running?)
    thrown = catch(:out) do
      Rperf.start(frequency: 100) { throw :out, :thrown }
      :not_thrown
    end
    assert_equal(:thrown, thrown, "throw passes through the block form")
    assert_false(Rperf.running?, "stopped after throw")
  end

  def test_signal_option_selects_backend
    r = Rperf.start(frequency: 500, signal: false) { rperf_work_a(0.02) }
    assert_equal(:nanosleep, r[:backend], "signal: false selects nanosleep")

    r = Rperf.start(frequency: 500, signal: nil) { rperf_work_a(0.02) }
    assert_equal(:holder, r[:backend], "signal: nil keeps the default")

    # A real-time signal number other than the default one.
    r = Rperf.start(frequency: 500, signal: 40) { rperf_work_a(0.05) }
    assert_equal(:signal, r[:backend], "an Integer signal selects the signal backend")
    assert_has_label(r, "Object#rperf_work_a", "with signal: 40")

    r = Rperf.start(frequency: 500, signal: 40, backend: :signal) { rperf_work_a(0.02) }
    assert_equal(:signal, r[:backend])
    r = Rperf.start(frequency: 500, signal: false, backend: :nanosleep) { rperf_work_a(0.02) }
    assert_equal(:nanosleep, r[:backend])
  end

  def test_application_signal_handler_kept
    # A signal the application traps is never taken (start refuses it, see
    # test_validation.rb), its handler keeps working while rperf profiles
    # with another signal, and the signal rperf used can be trapped after
    # stop. Run in a child so a crash (default action of a real-time
    # signal) cannot take the other tests down.
    script = <<~'RUBY'
      sig = 40
      q = Queue.new
      Signal.trap(sig) { q << :hit }
      RPERF_BACKENDS.each do |backend|
        refused = begin
          Rperf.start(signal: sig, backend: backend)
          Rperf.stop
          "started"
        rescue ArgumentError => e
          e.message[/is in use/]
        end
        Rperf.start(frequency: 1000, signal: sig + 1, backend: backend) { cpu_spin(0.03) }
        Process.kill(sig, Process.pid)
        got = q.pop(timeout: 10)
        Signal.trap(sig + 1) { q << :after }
        Process.kill(sig + 1, Process.pid)
        after = q.pop(timeout: 10)
        Signal.trap(sig + 1, "DEFAULT")
        child_report("backend" => backend.to_s, "refused" => refused, "hit" => got.to_s, "after" => after.to_s)
      end
    RUBY
    run = run_child(script)
    assert_child_ok(run)
    assert_equal(RPERF_BACKENDS.map(&:to_s).map { |b| { "backend" => b, "refused" => "is in use", "hit" => "hit", "after" => "after" } },
                 run.reports, run.describe)
  end

  def test_start_from_non_main_thread
    result = Thread.new do
      Rperf.start(frequency: 1000) { rperf_work_a(0.03) }
    end.value
    assert_kind_of(Hash, result)
    assert_has_label(result, "Object#rperf_work_a")
    assert_false(Rperf.running?)
  end

  def test_stop_from_other_thread
    Rperf.start(frequency: 1000)
    rperf_work_a(0.02)
    result = Thread.new { Rperf.stop }.value
    assert_kind_of(Hash, result)
    assert_false(Rperf.running?)
  end
end
