# frozen_string_literal: true

# tests/ruby/test_exporters.rb — the Ruby side of exporters on hand-built
# result hashes (no profiling needed): module encoders, conversion errors and
# their memory safety, Ruby plugins, Rperf.exporters, Rperf.save suffix
# detection, __resolve_exporter validation, __export_at_stop failure paths.
# Needs only rperf.so's export binding (ruby/export.c) and rperf/exporters.rb.

require "test/unit"
require "tmpdir"
require "zlib"
require "rperf"
require_relative "../interop/helper"

class TestExporters < Test::Unit::TestCase
  def setup
    @dir = Dir.mktmpdir("rperf-exp")
  end

  def teardown
    FileUtils.rm_rf(@dir) if @dir
    (Rperf.exporters - %i[pprof collapsed json text threads]).each { |n| Rperf.unregister_exporter(n) }
  end

  def simple
    { mode: :cpu, frequency: 100,
      aggregated_samples: [[[["a.rb", "A#x"], ["a.rb", "main"]], 5_000_000, 1, 0],
                           [[["a.rb", "main"]], 1_990_000]] }
  end

  def files
    Dir.children(@dir).sort
  end

  # ---- module encoders ----

  def test_exporters_list
    assert_equal(%i[pprof collapsed json text threads], Rperf.exporters.first(5))
  end

  def test_collapsed
    out = Rperf::Collapsed.encode(simple)
    assert_equal("main 1990000\nmain;A#x 5000000\n", out)
    assert_equal(Encoding::UTF_8, out.encoding)
    assert_equal("", Rperf::Collapsed.encode({ aggregated_samples: [] }))
    assert_equal("", Rperf::Collapsed.encode({}))
  end

  def test_text
    out = Rperf::Text.encode(simple)
    assert_equal(<<~TXT, out)
      Total: 7.0ms (cpu)
      Samples: 2, Frequency: 100Hz

       Flat:
                   5.0 ms  71.5%  A#x (a.rb)
                   2.0 ms  28.5%  main (a.rb)

       Cumulative:
                   7.0 ms 100.0%  main (a.rb)
                   5.0 ms  71.5%  A#x (a.rb)
    TXT
    short = Rperf::Text.encode(simple, top_n: 1, header: false)
    assert_equal(" Flat:\n             5.0 ms  71.5%  A#x (a.rb)\n\n Cumulative:\n             7.0 ms 100.0%  main (a.rb)\n", short)
    assert_equal("No samples recorded.\n", Rperf::Text.encode({ mode: :wall }))
    assert_raise(ArgumentError) { Rperf::Text.encode(simple, top_n: -1) }
    assert_raise(ArgumentError) { Rperf::Text.encode(simple, top_n: "3") }
  end

  def test_text_sampling_count_and_wall_string_mode
    d = simple.merge(sampling_count: 99, mode: "wall")
    assert_match(/\ATotal: 7\.0ms \(wall\)\nSamples: 99, Frequency: 100Hz\n/, Rperf::Text.encode(d))
  end

  def test_json_is_speedscope
    require "json"
    doc = ::JSON.parse(Rperf::JSON.encode(InteropHelper.rich_profile))
    assert_equal("https://www.speedscope.app/file-format-schema.json", doc["$schema"])
    assert_equal(["thread 1 \"main\" ractor 1", "thread 2 \"wor\\tker\uFFFD\" ractor 2"].map { |s| s.sub("\\t", "\t") },
                 doc["profiles"].map { |pr| pr["name"] })
    nframes = doc["shared"]["frames"].size
    doc["profiles"].each do |pr|
      assert_equal(pr["samples"].size, pr["weights"].size)
      assert(pr["samples"].flatten.all? { |i| i >= 0 && i < nframes })
      assert_equal(pr["weights"].sum, pr["endValue"])
    end
    names = doc["shared"]["frames"].map { |f| f["name"] }
    assert_include(names, "[GC marking]")
    assert_include(names, "bad\uFFFD;na me\nx")
    assert_include(names, "(unknown)")
  end

  def test_pprof_bytes
    pb = Rperf::PProf.encode(InteropHelper.rich_profile)
    assert_equal(Encoding::ASCII_8BIT, pb.encoding)
    assert_equal(0x0a, pb.getbyte(0))
    assert_include(pb, "thread_seq".b)
    assert_include(pb, "GET /users".b)
    assert_include(pb, "ruby: #{RUBY_DESCRIPTION}".b)
    assert_not_include(pb, "\xFF".b) # sanitised
    gz = Rperf.gzip(pb)
    assert_equal(pb, Zlib.gunzip(gz))
    assert_equal([0x1f, 0x8b], gz.bytes.first(2))
  end

  def test_pprof_without_optional_keys
    pb = Rperf::PProf.encode({ frequency: 0, aggregated_samples: [[[["a", "b"]], 1]] })
    assert_equal(0x0a, pb.getbyte(0))
  end

  def test_frames_with_line_numbers
    d = { mode: :cpu, frequency: 1, aggregated_samples: [[[["a.rb", "A#x", 42]], 10, 1, 0]] }
    assert_include(Rperf::JSON.encode(d), '"line":42')
  end

  def test_c_exporter_by_name
    out = Rperf._encode("threads", InteropHelper.rich_profile, nil)
    assert_match(/\Athread_seq\tractor\tname\tentries\tweight_ns\tpercent\n1\t1\tmain\t3\t33000000\t/, out)
  end

  # ---- conversion errors: raise cleanly, no leak, no crash ----

  def test_malformed_input_raises
    assert_raise(TypeError) { Rperf::Collapsed.encode(nil) }
    assert_raise(TypeError) { Rperf::Collapsed.encode({ aggregated_samples: 3 }) }
    assert_raise(TypeError) { Rperf::Collapsed.encode({ aggregated_samples: [[1, 2]] }) }
    assert_raise(TypeError) { Rperf::Collapsed.encode({ aggregated_samples: [[[["a", :b]], 2]] }) }
    assert_raise(TypeError) { Rperf::Collapsed.encode({ aggregated_samples: [[[["a", "b"]], "2"]] }) }
    assert_raise(TypeError) { Rperf::Collapsed.encode({ aggregated_samples: [[[["a", "b"]], 2, -1]] }) }
    assert_raise(ArgumentError) { Rperf::Collapsed.encode({ mode: :bogus }) }
    assert_raise(ArgumentError) do
      Rperf::PProf.encode({ label_sets: [{}], aggregated_samples: [[[["a", "b"]], 2, 1, 5]] })
    end
    assert_raise(RangeError) { Rperf::PProf.encode({ aggregated_samples: [[[["a", "b"]], 2**70]] }) }
    assert_raise(ArgumentError) { Rperf._encode("nope", simple, nil) }
  end

  def test_label_to_s_raising_does_not_leak
    boom = Object.new
    def boom.to_s = raise(IOError, "to_s exploded")
    d = simple.merge(label_sets: [{}, { k: boom }])
    before = memory_kb
    2000.times { assert_raise(IOError) { Rperf::PProf.encode(d) } }
    # 2000 conversions that each allocate >= 64 KiB of arena: a leak would
    # show as >= 128 MB. Allow generous noise.
    assert_operator(memory_kb - before, :<, 64 * 1024) if before
  end

  def test_skips_nonpositive_weights_and_missing_label_sets
    d = { aggregated_samples: [[[["a", "x"]], 0], [[["a", "y"]], -5], [[["a", "z"]], 3, 1, 4]] }
    assert_equal("z 3\n", Rperf::Collapsed.encode(d))
  end

  def test_labels_symbols_and_values
    d = simple.merge(label_sets: [{}, { endpoint: :index, n: 3, gone: nil }])
    d[:aggregated_samples] = [[[["a.rb", "main"]], 10, 1, 1]]
    pb = Rperf::PProf.encode(d)
    assert_include(pb, "endpoint".b)
    assert_include(pb, "index".b)
    assert_not_include(pb, "gone".b)
  end

  # ---- Ruby plugins ----

  class Upcase
    def encode(data) = Rperf::Collapsed.encode(data).upcase
    def extension = ".up"
  end

  def test_register_and_use_ruby_exporter
    assert_equal(:upcase, Rperf.register_exporter(:upcase, Upcase.new))
    assert_include(Rperf.exporters, :upcase)
    path = File.join(@dir, "x.up")
    Rperf.save(path, simple) # suffix from #extension
    assert_equal("MAIN 1990000\nMAIN;A#X 5000000\n", File.read(path))
    Rperf.save(File.join(@dir, "y.data"), simple, exporter: "upcase")
    assert_equal("MAIN 1990000\nMAIN;A#X 5000000\n", File.read(File.join(@dir, "y.data")))
    assert_equal(%w[x.up y.data], files)
  end

  def test_register_validation
    assert_raise(ArgumentError) { Rperf.register_exporter(:pprof, Upcase.new) }
    assert_raise(ArgumentError) { Rperf.register_exporter(:noenc, Object.new) }
    assert_raise(ArgumentError) { Rperf.register_exporter("Bad Name", Upcase.new) }
    assert_raise(ArgumentError) { Rperf.register_exporter(3, Upcase.new) }
    Rperf.register_exporter(:once, Upcase.new)
    assert_raise(ArgumentError) { Rperf.register_exporter(:once, Upcase.new) }
    assert_not_nil(Rperf.unregister_exporter(:once))
    assert_nil(Rperf.unregister_exporter(:once))
    assert_nil(Rperf.unregister_exporter(:pprof))
    assert_include(Rperf.exporters, :pprof)
  end

  # ---- save and suffix detection ----

  def test_save_suffix_detection
    {
      "a.pb.gz" => :pprof, "a.pprof" => :pprof, "rperf.data" => :pprof, "noext" => :pprof,
      "a.collapsed" => :collapsed, "a.folded" => :collapsed, "a.json" => :json, "a.txt" => :text,
      "a.threads.tsv" => :threads,
    }.each do |name, want|
      assert_equal(want, Rperf.__resolve_exporter(nil, nil, File.join(@dir, name)), name)
    end
    Rperf.save(File.join(@dir, "p.pb.gz"), simple)
    assert_equal(Rperf::PProf.encode(simple), Zlib.gunzip(File.binread(File.join(@dir, "p.pb.gz"))))
    Rperf.save(File.join(@dir, "p.pprof"), simple)
    assert_equal([0x1f, 0x8b], File.binread(File.join(@dir, "p.pprof")).bytes.first(2))
    Rperf.save(File.join(@dir, "c.folded"), simple)
    assert_equal(Rperf::Collapsed.encode(simple), File.read(File.join(@dir, "c.folded")))
    Rperf.save(File.join(@dir, "t.json"), simple)
    assert_equal(Rperf::JSON.encode(simple), File.read(File.join(@dir, "t.json")))
    Rperf.save(File.join(@dir, "r.txt"), simple)
    assert_equal(Rperf::Text.encode(simple), File.read(File.join(@dir, "r.txt")))
    Rperf.save(File.join(@dir, "forced.txt"), simple, format: :collapsed)
    assert_equal(Rperf::Collapsed.encode(simple), File.read(File.join(@dir, "forced.txt")))
    Rperf.save(Pathname(File.join(@dir, "pn.collapsed")), simple) if defined?(Pathname)
    assert_equal(%w[c.folded forced.txt p.pb.gz p.pprof r.txt t.json], files - ["pn.collapsed"])
  end

  def test_save_overwrites_atomically
    path = File.join(@dir, "o.txt")
    File.write(path, "old")
    Rperf.save(path, simple)
    assert_equal(Rperf::Text.encode(simple), File.read(path))
    assert_equal(["o.txt"], files)
  end

  # ---- __resolve_exporter ----

  def test_resolve_exporter
    assert_nil(Rperf.__resolve_exporter(nil, nil, nil))
    assert_equal(:text, Rperf.__resolve_exporter(:text, nil, nil))
    assert_equal(:collapsed, Rperf.__resolve_exporter(nil, "collapsed", "x.pb.gz"))
    assert_equal(:json, Rperf.__resolve_exporter(:json, :json, "x.txt"))
    e = assert_raise(ArgumentError) { Rperf.__resolve_exporter(:nope, nil, "x") }
    assert_match(/\Aexporter: unknown exporter :nope \(registered: :pprof, :collapsed, :json, :text, :threads/, e.message)
    e = assert_raise(ArgumentError) { Rperf.__resolve_exporter(nil, :nope, "x") }
    assert_match(/\Aformat: unknown exporter :nope/, e.message)
    e = assert_raise(ArgumentError) { Rperf.__resolve_exporter(:pprof, :text, nil) }
    assert_match(/exporter: and format: disagree/, e.message)
    assert_raise(ArgumentError) { Rperf.__resolve_exporter(42, nil, nil) }
    assert_raise(ArgumentError) { Rperf.__resolve_exporter(nil, nil, 42) }
  end

  # ---- __export_at_stop failure paths ----

  class Raising
    def encode(_data) = raise("plugin broke")
  end

  class NotAString
    def encode(_data) = 42
  end

  def capture_stderr
    old = $stderr
    $stderr = StringIO.new
    yield
    $stderr.string
  ensure
    $stderr = old
  end

  def test_export_at_stop_success
    path = File.join(@dir, "ok.collapsed")
    assert_equal(true, Rperf.__export_at_stop(simple, path, nil))
    assert_equal(Rperf::Collapsed.encode(simple), File.read(path))
    assert_equal(true, Rperf.__export_at_stop(simple, File.join(@dir, "ok2"), :text))
  end

  def test_export_at_stop_ruby_exporter_raises
    require "stringio"
    Rperf.register_exporter(:raising, Raising.new)
    Rperf.register_exporter(:nonstring, NotAString.new)
    path = File.join(@dir, "never.out")
    err = capture_stderr { assert_equal(false, Rperf.__export_at_stop(simple, path, :raising)) }
    assert_match(/\Arperf: exporter raising failed: plugin broke/, err)
    err = capture_stderr { assert_equal(false, Rperf.__export_at_stop(simple, path, :nonstring)) }
    assert_match(/\Arperf: exporter nonstring failed: .*expected a String/, err)
    assert_equal([], files)
    assert_raise(RuntimeError) { Rperf.save(path, simple, exporter: :raising) }
    assert_equal([], files)
  end

  def test_export_at_stop_unwritable_path
    require "stringio"
    path = File.join(@dir, "missing", "deeper", "x.pb.gz")
    err = capture_stderr { assert_equal(false, Rperf.__export_at_stop(simple, path, nil)) }
    assert_match(/\Arperf: exporter pprof failed: .*missing/, err)
    Rperf.register_exporter(:upcase, Upcase.new)
    err = capture_stderr { assert_equal(false, Rperf.__export_at_stop(simple, path, :upcase)) }
    assert_match(/\Arperf: exporter upcase failed: .*No such file or directory/, err)
    assert_raise(Errno::ENOENT) { Rperf.save(path, simple) }
    assert_equal([], files)
  end

  # Without a stopped run's data in the engine, _c_export_engine encodes
  # the Hash it is given, exactly as _encode_file does.
  def test_c_export_engine_without_engine_data
    %w[collapsed pprof json text threads].each do |name|
      a = File.join(@dir, "engine.#{name}")
      b = File.join(@dir, "hash.#{name}")
      data = InteropHelper.rich_profile
      assert_equal(a, Rperf._c_export_engine(name, a, data))
      Rperf._encode_file(name, data, b)
      assert_equal(File.binread(b), File.binread(a), name)
    end
    assert_raise(TypeError) { Rperf._c_export_engine("collapsed", 42, simple) }
    assert_raise(TypeError) { Rperf._c_export_engine("collapsed", File.join(@dir, "x"), 42) }
    assert_raise(ArgumentError) { Rperf._c_export_engine("nope", File.join(@dir, "x"), simple) }
    assert_equal(10, files.size)
  end

  def test_export_at_stop_bad_data
    require "stringio"
    err = capture_stderr { assert_equal(false, Rperf.__export_at_stop({ aggregated_samples: 1 }, File.join(@dir, "b.txt"), nil)) }
    assert_match(/\Arperf: exporter text failed: /, err)
    assert_equal([], files)
  end

  private

  def memory_kb
    File.read("/proc/self/status")[/^VmRSS:\s+(\d+)/, 1]&.to_i
  rescue StandardError
    nil
  end
end
