# frozen_string_literal: true
# output:/verbose:/stat: at stop. Formats themselves are tested elsewhere
# (test_exporters*); here only: a file is written at stop when the exporter
# exists, never a fake file, never at snapshot; a C exporter at stop encodes
# from the engine's data, with the same result as from the returned Hash;
# and the stderr reports appear.
require "zlib"
require_relative "helper"

class TestOutput < Test::Unit::TestCase
  include RperfTestHelper

  def exporter_available?(name)
    if Rperf.respond_to?(:exporters)
      Rperf.exporters.map(&:to_sym).include?(name)
    else
      { pprof: :PProf, collapsed: :Collapsed, text: :Text }[name].then { |c| c && Rperf.const_defined?(c) }
    end
  end

  # Starts with output:, runs work, stops. Returns [result, error] where error
  # is the ArgumentError raised by start if the exporter is not available.
  def profile_to(path, **opts)
    result = Rperf.start(frequency: 1000, output: path, **opts) { rperf_work_a(0.03) }
    [result, nil]
  rescue ArgumentError => e
    [nil, e]
  end

  def test_default_exporter_writes_pprof_at_stop
    Dir.mktmpdir do |dir|
      path = File.join(dir, "profile.pb.gz")
      result, err = profile_to(path)
      if exporter_available?(:pprof)
        assert_nil(err, "output: accepted when the pprof exporter exists")
        assert_kind_of(Hash, result)
        assert_true(File.exist?(path), "output written at stop")
        bytes = File.binread(path)
        assert_equal("\x1f\x8b".b, bytes[0, 2], "pprof output is gzip")
        assert_equal(0x0a, Zlib.gunzip(bytes).getbyte(0), "decompressed pprof starts with field 1")
      else
        assert_false(File.exist?(path), "no exporter yet: no (fake) file written")
        assert_match(/export|format|output/, err.message) if err
      end
    end
  end

  def test_output_without_block_written_at_stop_only
    Dir.mktmpdir do |dir|
      path = File.join(dir, "rperf.data")
      begin
        Rperf.start(frequency: 1000, output: path)
      rescue ArgumentError => e
        omit("output: rejected (exporter not available): #{e.message}") unless exporter_available?(:pprof)
        raise
      end
      rperf_work_a(0.02)
      assert_false(File.exist?(path), "nothing written before stop")
      Rperf.snapshot
      assert_false(File.exist?(path), "snapshot does not write output")
      result = Rperf.stop
      assert_kind_of(Hash, result, "stop still returns the result when writing output")
      assert_equal(exporter_available?(:pprof), File.exist?(path), "written iff the exporter exists")
    end
  end

  def test_collapsed_output_when_available
    omit("collapsed exporter not available yet") unless exporter_available?(:collapsed)
    Dir.mktmpdir do |dir|
      path = File.join(dir, "out.collapsed")
      result, err = profile_to(path)
      assert_nil(err)
      assert_kind_of(Hash, result)
      text = File.read(path)
      lines = text.lines.map(&:chomp)
      assert_not_empty(lines)
      lines.each { |l| assert_match(/\A.+ \d+\z/, l) }
      assert(lines.any? { |l| l.include?("Object#rperf_work_a") })
    end
  end

  # At stop a C exporter's view is built from the engine's data (before it is
  # released), not from the result Hash: the bytes are the same as encoding
  # the returned Hash, except that the engine also knows each method's first
  # line (speedscope frames get a "line").
  def test_output_from_engine_data_matches_the_result
    Dir.mktmpdir do |dir|
      col = File.join(dir, "a.collapsed")
      data = Rperf.start(frequency: 1000, output: col) { rperf_work_a(0.03) }
      assert_equal(Rperf::Collapsed.encode(data), File.read(col, encoding: "UTF-8"))
      txt = File.join(dir, "a.txt")
      data = Rperf.start(frequency: 1000, mode: :wall, output: txt) { rperf_work_a(0.02); sleep 0.005 }
      assert_equal(Rperf::Text.encode(data), File.read(txt, encoding: "UTF-8"))

      json = File.join(dir, "a.json")
      data = Rperf.start(frequency: 1000, output: json) { rperf_outer(0.03) }
      from_stop = JSON.parse(File.read(json))
      from_hash = JSON.parse(Rperf::JSON.encode(data))
      frames = from_stop["shared"]["frames"]
      outer = frames.find { |f| f["name"] == "Object#rperf_outer" }
      assert_not_nil(outer, frames.inspect)
      assert_equal(File.foreach(File.expand_path("helper.rb", __dir__)).find_index { |l| l.start_with?("def rperf_outer") } + 1,
                   outer["line"], "first line of rperf_outer")
      frames.each { |f| f.delete("line") }
      assert_equal(from_hash, from_stop)
    end
  end

  # aggregate: false: the result's aggregated samples are built in Ruby, so
  # the exporter encodes the Hash.
  def test_output_in_raw_mode_encodes_the_result
    Dir.mktmpdir do |dir|
      col = File.join(dir, "raw.collapsed")
      data = Rperf.start(frequency: 1000, aggregate: false, output: col) { rperf_work_a(0.02) }
      assert_not_empty(data[:raw_samples])
      assert_equal(Rperf::Collapsed.encode(data), File.read(col, encoding: "UTF-8"))
      json = File.join(dir, "raw.json")
      Rperf.start(frequency: 1000, aggregate: false, output: json) { rperf_work_a(0.02) }
      assert(JSON.parse(File.read(json))["shared"]["frames"].none? { |f| f.key?("line") })
    end
  end

  # The engine's data is used only for the result it belongs to: another
  # Hash handed to Rperf._c_export_engine while a stop holds the engine's
  # data (here from a Ruby exporter running at stop) is encoded as given.
  def test_engine_data_is_used_only_for_its_own_result
    Dir.mktmpdir do |dir|
      other = { mode: :cpu, frequency: 10, aggregated_samples: [[[["o.rb", "Other#x"]], 7, 1, 0]] }
      written = File.join(dir, "other.collapsed")
      probe = Object.new
      probe.define_singleton_method(:encode) do |_data|
        Rperf._c_export_engine("collapsed", written, other)
        "probe\n"
      end
      Rperf.register_exporter(:probe_engine, probe)
      begin
        Rperf.start(frequency: 1000, exporter: :probe_engine, output: File.join(dir, "p.out")) { rperf_work_a(0.02) }
      ensure
        Rperf.unregister_exporter(:probe_engine)
      end
      assert_equal("probe\n", File.read(File.join(dir, "p.out")))
      assert_equal("Other#x 7\n", File.read(written))
    end
  end

  def test_no_output_writes_nothing
    Dir.mktmpdir do |dir|
      Dir.chdir(dir) do
        Rperf.start(frequency: 1000) { rperf_work_a(0.01) }
        assert_empty(Dir.children(dir), "no output: no file written")
      end
    end
  end

  def test_verbose_report_on_stderr
    run = run_child(<<~'RUBY')
      r = Rperf.start(frequency: 1000, verbose: true) { rperf_work_a(0.05) }
      child_report("ok" => r.is_a?(Hash))
    RUBY
    assert_child_ok(run)
    assert_true(run.report["ok"], run.describe)
    assert_match(/^\[rperf\] mode=cpu frequency=1000Hz\b/, run.stderr, run.describe)
    assert_match(/^\[rperf\] sampling: \d+ calls, /, run.stderr, run.describe)
    assert_match(/Object#rperf_work_a|Object#cpu_spin/, run.stderr, "top frames listed\n#{run.describe}")
  end

  def test_verbose_env
    run = run_child('Rperf.start(frequency: 1000, mode: :wall) { rperf_work_a(0.02) }',
                    env: { "RPERF_VERBOSE" => "1" })
    assert_child_ok(run)
    assert_match(/^\[rperf\] mode=wall frequency=1000Hz\b/, run.stderr, run.describe)
  end

  def test_quiet_by_default
    run = run_child('Rperf.start(frequency: 1000) { rperf_work_a(0.02) }; Rperf.start(frequency: 100); Rperf.stop',
                    env: { "RPERF_VERBOSE" => nil })
    assert_child_ok(run)
    assert_equal("", run.stderr, "nothing printed without verbose/stat")
    assert_equal("", run.stdout)
  end

  def test_stat_report_on_stderr
    run = run_child(<<~'RUBY', env: { "RPERF_STAT_COMMAND" => "my command" })
      r = Rperf.start(frequency: 1000, mode: :wall, stat: true) { rperf_work_a(0.05); sleep 0.01 }
      child_report("ok" => r.is_a?(Hash))
    RUBY
    assert_child_ok(run)
    assert_true(run.report["ok"], run.describe)
    # Every part of the reference's stat report (§9).
    expected = {
      "header" => /^ Performance stats for 'my command':$/,
      "user" => /^ +[\d,]+\.\d ms +user$/,
      "sys" => /^ +[\d,]+\.\d ms +sys$/,
      "real" => /^ +[\d,]+\.\d ms +real$/,
      "breakdown" => /CPU execution/,
      "GVL blocked line (wall mode, slept)" => /\[Ruby\] GVL blocked \(I\/O, sleep\)/,
      "threads" => /\[Ruby\] detected threads/,
      "GC time" => /\[Ruby\] GC time \(\d+ count: \d+ minor, \d+ major\)/,
      "allocated" => /\[Ruby\] allocated objects/,
      "freed" => /\[Ruby\] freed objects/,
      "maxrss" => /\[OS\] peak memory \(maxrss\)/,
      "context switches" => /\[OS\] context switches \(\d+ voluntary, \d+ involuntary\)/,
      "footer" => %r{\d+ samples / \d+ triggers, [\d.]+% profiler overhead},
    }
    missing = expected.reject { |_, re| run.stderr.match?(re) }.keys
    assert_empty(missing, "stat report lines missing\n#{run.describe}")
  end
end
