# frozen_string_literal: true

# tests/ruby/test_exporters_alloc.rb — allocation profiles through every
# exporter, on hand-made result Hashes with :allocations (the contract in
# docs/exporters.md): sample_type: on each encoder, Rperf.save,
# __export_at_stop and _c_export_engine, for each of the four allocation
# types and time; the defaults (time for a cpu/wall result, inuse_space for
# an alloc one); values per exporter equal to the sums of the Hash; the
# class as a `class` label merged into the label sets; entries whose value
# is 0 skipped (but kept in pprof); every bad sample_type: and malformed
# allocation entry an error naming the problem, with nothing written; Ruby
# plugins and sample_type:; a stopped run whose result has :allocations is
# encoded from the Hash, not from the engine's data. The independent
# readers' view of the same outputs is in the test_interop_*.rb files.

require "test/unit"
require "tmpdir"
require "zlib"
require "rperf"
require_relative "../interop/helper"

class TestExportersAlloc < Test::Unit::TestCase
  H = InteropHelper
  TYPES = H::ALLOC_TYPES
  UNITS = { alloc_objects: "count", alloc_space: "bytes", inuse_objects: "count", inuse_space: "bytes" }.freeze

  def setup
    @dir = Dir.mktmpdir("rperf-alloc")
  end

  def teardown
    FileUtils.rm_rf(@dir) if @dir
    (Rperf.exporters - %i[pprof collapsed json text threads html]).each { |n| Rperf.unregister_exporter(n) }
  end

  def files
    Dir.children(@dir).sort
  end

  def data
    @data ||= H.alloc_profile
  end

  def column(type)
    2 + TYPES.index(type)
  end

  # {"root;…;leaf" => value} of `type` from the Hash, as collapsed prints it.
  def folded(d, type)
    fix = ->(s) { s.dup.force_encoding(Encoding::UTF_8).scrub("\uFFFD") }
    out = Hash.new(0)
    d[:allocations][:samples].each do |e|
      next unless e[column(type)].positive?

      stack = e[0].reverse.map { |_, l| l.empty? ? "(unknown)" : fix.(l).gsub(";", "\\x3b").gsub("\n", "\\x0a") }
      out[stack.join(";")] += e[column(type)]
    end
    out
  end

  def parse_folded(text)
    text.lines.to_h { |l| s, _, w = l.chomp.rpartition(" "); [s, w.to_i] }
  end

  # ---- every exporter, every type --------------------------------------

  def test_collapsed_values_per_type
    TYPES.each do |t|
      assert_equal(folded(data, t), parse_folded(Rperf::Collapsed.encode(data, sample_type: t)), t)
      assert_equal(folded(data, t), parse_folded(Rperf::Collapsed.encode(data, sample_type: t.to_s)), "#{t} as a String")
    end
  end

  def test_pprof_is_a_heap_profile_with_all_four_values
    TYPES.each do |t|
      raw = Rperf._decode_pprof(Rperf::PProf.encode(data, sample_type: t), "heap")
      assert_equal(TYPES.map { |x| [x.to_s, UNITS[x]] }, raw[:sample_types], t)
      assert_equal(t.to_s, raw[:default_sample_type])
      assert_equal(%w[space bytes], raw[:period_type])
      assert_include(raw[:comments], "allocation interval: 1024")
      assert_include(raw[:comments], "mode: alloc")
      # every entry with any value > 0, whatever the chosen type
      assert_equal(6, raw[:samples].size, t)
      sums = (0..3).map { |i| raw[:samples].sum { |_, v, _| v[i] } }
      assert_equal(H.alloc_totals(data).values, sums, t)
      classes = raw[:samples].map { |_, _, l| l["class"] }
      assert_equal(["String", "Array", "MyApp::User", "<T_IMEMO>", nil, "We;ird\nKlass\uFFFD"], classes)
      user = raw[:samples][2][2]
      assert_equal({ "thread_seq" => 2, "ractor" => 2, "job" => "Mailer", "bad" => "v\uFFFD",
                     "class" => "MyApp::User" }, user)
    end
  end

  def test_text_per_type
    { alloc_objects: /\ATotal: 8192 objects \(alloc_objects\)\n/,
      alloc_space: /\ATotal: 401\.0 KiB \(alloc_space\)\n/,
      inuse_objects: /\ATotal: 6144 objects \(inuse_objects\)\n/,
      inuse_space: /\ATotal: 2\.1 MiB \(inuse_space\)\n/ }.each do |t, head|
      out = Rperf::Text.encode(data, sample_type: t)
      assert_match(head, out, t)
      assert_match(/^Sampled: 9 allocations, 4 live, interval 1024\n\n Flat:\n/, out, t)
      refute_match(/ ms /, out, t)
    end
    out = Rperf::Text.encode(data, sample_type: :inuse_space, top_n: 2, header: false)
    # 2,000,000 of 2,164,864 bytes: 1.9 MiB, 92.4%; the block: 81,920 flat,
    # 122,880 cumulative (with Kernel#sleep's 40,960)
    assert_equal(" Flat:\n             1.9 MiB  92.4%  Object#main (app.rb)\n" \
                 "            80.0 KiB   3.8%  block (2 levels) in <main> (app.rb)\n\n" \
                 " Cumulative:\n             2.1 MiB 100.0%  Object#main (app.rb)\n" \
                 "           120.0 KiB   5.7%  block (2 levels) in <main> (app.rb)\n", out)
    out = Rperf::Text.encode(data, sample_type: :alloc_objects, header: false)
    assert_match(/^ +3,072 obj  37\.5%  Foo#bar \(app\.rb\)$/, out)
  end

  def test_json_units_and_weights
    require "json"
    TYPES.each do |t|
      doc = ::JSON.parse(Rperf::JSON.encode(data, sample_type: t))
      assert_equal("rperf #{t} profile", doc["name"])
      assert_equal([UNITS[t] == "bytes" ? "bytes" : "none"], doc["profiles"].map { |p| p["unit"] }.uniq)
      assert_equal(H.alloc_totals(data)[t], doc["profiles"].sum { |p| p["weights"].sum }, t)
      doc["profiles"].each { |p| assert(p["weights"].all?(&:positive?), "#{t}: zero entries are left out") }
    end
  end

  def test_html_per_type
    require "json"
    TYPES.each do |t|
      page = Rperf::HTML.encode(data, sample_type: t)
      json = ::JSON.parse(page[%r{<script type="application/json" id="rperf-data">\n(.*?)</script>}m, 1])
      meta = json["meta"]
      assert_equal(["alloc", t.to_s, UNITS[t] == "bytes" ? "bytes" : "objects", 1024, 9, 4, H.alloc_totals(data)[t]],
                   meta.values_at("mode", "sample_type", "unit", "alloc_interval", "alloc_sampled", "alloc_live", "total"))
      assert_include(json["label_sets"], [["class", "String"]])
      assert_include(json["label_sets"], [["job", "Mailer"], ["bad", "v\uFFFD"], ["class", "MyApp::User"]])
      assert_equal(H.alloc_totals(data)[t], json["samples"].each_slice(4).sum { |s| s[1] })
    end
  end

  def test_threads_example_names_the_type
    out = Rperf._encode("threads", data, { sample_type: :alloc_space })
    assert_match(/\Athread_seq\tractor\tname\tentries\talloc_space\tpercent\n1\t1\tmain\t2\t286720\t/, out)
  end

  def test_save_every_exporter_and_type
    %w[pprof collapsed json text threads html].each do |name|
      TYPES.each do |t|
        path = File.join(@dir, "#{name}-#{t}")
        Rperf.save(path, data, exporter: name, sample_type: t)
        bytes = File.binread(path)
        bytes = Zlib.gunzip(bytes) if name == "pprof"
        assert_equal(Rperf._encode(name, data, { sample_type: t }).b, bytes, "#{name} #{t}")
      end
    end
  end

  # ---- defaults -------------------------------------------------------------

  def test_defaults
    assert_equal(:inuse_space, Rperf.sample_type(data))
    assert_equal(Rperf::Collapsed.encode(data, sample_type: :inuse_space), Rperf::Collapsed.encode(data))
    assert_equal(Rperf::PProf.encode(data, sample_type: :inuse_space), Rperf::PProf.encode(data))
    %i[cpu wall].each do |mode|
      both = H.alloc_profile(mode)
      assert_equal(:time, Rperf.sample_type(both))
      time = Rperf::Collapsed.encode(H.rich_profile(mode))
      assert_equal(time, Rperf::Collapsed.encode(both), "#{mode}: time samples by default")
      assert_equal(time, Rperf::Collapsed.encode(both, sample_type: :time))
      assert_equal(time, Rperf::Collapsed.encode(both, sample_type: mode))
      assert_equal(Rperf::Collapsed.encode(data, sample_type: :alloc_space),
                   Rperf::Collapsed.encode(both, sample_type: :alloc_space), mode)
      raw = Rperf._decode_pprof(Rperf::PProf.encode(both, sample_type: :alloc_objects), "x")
      assert_include(raw[:comments], "mode: #{mode}")
      assert_include(raw[:comments], "frequency: 1000Hz")
      assert_equal(4, raw[:sample_types].size)
      raw = Rperf._decode_pprof(Rperf::PProf.encode(both), "x")
      assert_equal([[mode.to_s, "nanoseconds"]], raw[:sample_types])
    end
    # mode :alloc given as a String (a result read back from JSON)
    assert_equal(:inuse_space, Rperf.sample_type(data.merge(mode: "alloc")))
    # an alloc result without allocations: an empty heap profile
    empty = { mode: :alloc, aggregated_samples: [] }
    assert_equal("", Rperf::Collapsed.encode(empty))
    assert_equal("No samples recorded.\n", Rperf::Text.encode(empty))
    raw = Rperf._decode_pprof(Rperf::PProf.encode(empty), "x")
    assert_equal(["inuse_space", 4, 0], [raw[:default_sample_type], raw[:sample_types].size, raw[:samples].size])
  end

  def test_class_label_replaces_a_user_label_named_class
    d = data.merge(label_sets: [{}, { class: "user's", endpoint: "e" }])
    d[:allocations] = d[:allocations].merge(samples: [[[H::MAIN], "String", 1, 8, 1, 8, 1, 1],
                                                      [[H::MAIN], nil, 1, 8, 1, 8, 1, 1]])
    raw = Rperf._decode_pprof(Rperf::PProf.encode(d), "x")
    assert_equal([{ "thread_seq" => 1, "ractor" => 1, "endpoint" => "e", "class" => "String" },
                  { "thread_seq" => 1, "ractor" => 1, "class" => "user's", "endpoint" => "e" }],
                 raw[:samples].map { |_, _, l| l })
  end

  # ---- errors: named, and nothing written -------------------------------------

  def test_bad_sample_type_values
    accepted = ":time, :cpu, :wall, :alloc_objects, :alloc_space, :inuse_objects or :inuse_space"
    [:bogus, "heap", 3, :Alloc_space].each do |bad|
      [-> { Rperf::PProf.encode(data, sample_type: bad) }, -> { Rperf::Collapsed.encode(data, sample_type: bad) },
       -> { Rperf::JSON.encode(data, sample_type: bad) }, -> { Rperf::Text.encode(data, sample_type: bad) },
       -> { Rperf::HTML.encode(data, sample_type: bad) }, -> { Rperf.sample_type(data, bad) },
       -> { Rperf.__check_sample_type(bad) }].each do |call|
        e = assert_raise(ArgumentError) { call.() }
        assert_equal("sample_type: must be one of #{accepted}, got #{bad.inspect}", e.message)
      end
    end
    assert_nil(Rperf.__check_sample_type(nil))
    assert_nil(Rperf.__check_sample_type("inuse_objects"))
  end

  def test_types_the_result_cannot_give
    time_only = H.rich_profile(:cpu)
    TYPES.each do |t|
      e = assert_raise(ArgumentError) { Rperf::PProf.encode(time_only, sample_type: t) }
      assert_match(/\Asample_type: :#{t} needs allocation samples, and this result has none \(no :allocations/, e.message)
    end
    %i[time cpu wall].each do |t|
      e = assert_raise(ArgumentError) { Rperf::Collapsed.encode(data, sample_type: t) }
      assert_match(/\Asample_type: :#{t}: this result has no time samples \(mode :alloc\); accepted: :alloc_objects/, e.message)
    end
    e = assert_raise(ArgumentError) { Rperf::Text.encode(time_only, sample_type: :wall) }
    assert_equal("sample_type: :wall does not match this result's mode :cpu (use :time or :cpu)", e.message)
  end

  def test_nothing_written_on_error
    path = File.join(@dir, "keep.pb.gz")
    File.write(path, "old")
    [[:bogus, ArgumentError], [:time, ArgumentError]].each do |t, err|
      assert_raise(err) { Rperf.save(path, data, sample_type: t) }
    end
    assert_raise(ArgumentError) { Rperf.save(path, H.rich_profile, sample_type: :inuse_space) }
    assert_raise(ArgumentError) { Rperf._c_export_engine("pprof", path, H.rich_profile, { sample_type: :alloc_space }) }
    assert_equal(["keep.pb.gz"], files)
    assert_equal("old", File.read(path))
    require "stringio"
    old = $stderr
    $stderr = StringIO.new
    begin
      assert_equal(false, Rperf.__export_at_stop(data, path, :pprof, :wall))
      assert_match(/\Arperf: exporter pprof failed: sample_type: :wall: this result has no time samples/, $stderr.string)
    ensure
      $stderr = old
    end
    assert_equal("old", File.read(path))
  end

  def test_malformed_allocations
    bad = lambda do |samples = nil, **extra|
      data.merge(allocations: { interval: 1, **extra }.merge(samples.nil? ? {} : { samples: samples }))
    end
    m = H::MAIN
    assert_raise(TypeError) { Rperf::PProf.encode(data.merge(allocations: [])) }
    assert_raise(TypeError) { Rperf::PProf.encode(bad.(3)) }
    assert_raise(TypeError) { Rperf::PProf.encode(bad.([[[m], "S", 1, 1]])) }           # too short
    assert_raise(TypeError) { Rperf::PProf.encode(bad.([[:x, "S", 1, 1, 1, 1, 1, 0]])) }
    assert_raise(TypeError) { Rperf::PProf.encode(bad.([[[m], :S, 1, 1, 1, 1, 1, 0]])) }
    e = assert_raise(TypeError) { Rperf::PProf.encode(bad.([[[m], "S", 1, -8, 1, 1, 1, 0]])) }
    assert_equal("rperf: allocation sample 0: alloc_bytes must be a non-negative Integer", e.message)
    assert_raise(TypeError) { Rperf::PProf.encode(bad.([[[m], "S", 1, 1, 1, 1.5, 1, 0]])) }
    assert_raise(TypeError) { Rperf::PProf.encode(bad.([[[m], "S", 1, 1, 1, -(2**70), 1, 0]])) }
    assert_raise(RangeError) { Rperf::PProf.encode(bad.([[[m], "S", 1, 2**70, 1, 1, 1, 0]])) }
    assert_raise(TypeError) { Rperf::PProf.encode(bad.([[[m], "S", 1, 1, 1, 1, -1, 0]])) }
    e = assert_raise(ArgumentError) { Rperf::PProf.encode(bad.([[[m], "S", 1, 1, 1, 1, 1, 9]])) }
    assert_match(/label_set_id 9 out of range/, e.message)
    assert_raise(TypeError) { Rperf::PProf.encode(bad.(interval: "1024")) }
    assert_raise(TypeError) { Rperf::PProf.encode(bad.([[[[1, 2]], "S", 1, 1, 1, 1, 1, 0]])) }
    # a missing :samples is no samples; a short tuple without thread/set is fine
    assert_equal("", Rperf::Collapsed.encode(bad.()))
    assert_equal("Object#main 8\n", Rperf::Collapsed.encode(bad.([[[m], "S", 1, 8, 0, 0]]), sample_type: :alloc_space))
  end

  def test_memory_safe_under_repeated_errors
    d = data.merge(label_sets: [{}, { k: Object.new.tap { |o| def o.to_s = raise(IOError, "boom") } }])
    500.times { assert_raise(IOError) { Rperf::PProf.encode(d) } }
    good = [[H::MAIN], "S", 1, 1, 1, 1, 1, 0]
    d = data.merge(allocations: { samples: [good] * 100 + [[[H::MAIN], "S", -1, 1, 1, 1]] })
    500.times { assert_raise(TypeError) { Rperf::Text.encode(d) } }
  end

  # ---- Ruby plugins -----------------------------------------------------------

  class Typed
    attr_reader :got

    def encode(data, sample_type:)
      @got = sample_type
      "#{sample_type} #{data[:allocations][:samples].size}\n"
    end
  end

  class Untyped
    def encode(data) = "#{data[:mode]}\n"
  end

  def test_ruby_plugins_and_sample_type
    typed = Typed.new
    Rperf.register_exporter(:typed, typed)
    Rperf.register_exporter(:untyped, Untyped.new)
    path = File.join(@dir, "p.out")
    Rperf.save(path, data, exporter: :typed)
    assert_equal(["inuse_space 7\n", :inuse_space], [File.read(path), typed.got])
    Rperf.save(path, data, exporter: :typed, sample_type: "alloc_objects")
    assert_equal(:alloc_objects, typed.got)
    Rperf.save(path, data, exporter: :untyped)
    assert_equal("alloc\n", File.read(path))
    Rperf.save(path, data, exporter: :untyped, sample_type: :inuse_space) # the default: fine
    e = assert_raise(ArgumentError) { Rperf.save(path, data, exporter: :untyped, sample_type: :alloc_space) }
    assert_match(/\Asample_type: exporter :untyped only encodes the result's default \(:inuse_space\)/, e.message)
    assert_raise(ArgumentError) { Rperf.save(path, data, exporter: :typed, sample_type: :time) }
    assert_equal(true, Rperf.__export_at_stop(data, path, :typed, :alloc_space))
    assert_equal("alloc_space 7\n", File.read(path))
  end

  # ---- the stop path ------------------------------------------------------------

  def test_export_at_stop_and_c_export_engine_take_a_sample_type
    path = File.join(@dir, "stop.pb.gz")
    assert_equal(true, Rperf.__export_at_stop(data, path, nil, :alloc_objects))
    assert_equal("alloc_objects", Rperf._decode_pprof(File.binread(path), "x")[:default_sample_type])
    assert_equal(path, Rperf._c_export_engine("collapsed", path, data, { sample_type: :inuse_objects }))
    assert_equal(Rperf::Collapsed.encode(data, sample_type: :inuse_objects), File.read(path))
    assert_equal(path, Rperf._c_export_engine("collapsed", path, data))
    assert_equal(Rperf::Collapsed.encode(data), File.read(path))
  end

  # Rperf.stop writes output: from the engine's data, which holds frames'
  # first lines; a run that samples allocations is written from its result
  # instead (a heap profile has the result's allocation stacks; a time view
  # of it has no first lines, which only the engine knows).
  def test_stop_output_of_a_result_with_allocations_comes_from_the_hash
    omit("engine not available (Rperf.start/stop)") unless Rperf.respond_to?(:start) && Rperf.respond_to?(:stop)
    fib = ->(n) { n < 2 ? [n].sum : fib.(n - 1) + fib.(n - 2) }
    plain = File.join(@dir, "plain.pb.gz")
    Rperf.start(mode: :cpu, frequency: 1000, output: plain) { fib.(22) }
    assert_match(/ s=[1-9]\d*\(\)/, go_raw(plain) || "s=1()", "the engine path gives first lines")
    path = File.join(@dir, "heap.pb.gz")
    data = Rperf.start(mode: :cpu, frequency: 1000, allocations: true, output: path, sample_type: :alloc_space) { fib.(22) }
    raw = Rperf._decode_pprof(File.binread(path), "heap")
    assert_equal(["alloc_space", 4], [raw[:default_sample_type], raw[:sample_types].size])
    sums = data[:allocations][:samples].map { |s| s[2..5] }.transpose.map(&:sum)
    assert_operator(sums[0], :>, 0, "fib allocates")
    assert_equal(sums, raw[:samples].map { |_, v, _| v }.transpose.map(&:sum), "the result's allocations, every one")
    path = File.join(@dir, "time.pb.gz")
    Rperf.start(mode: :cpu, frequency: 1000, allocations: true, output: path) { fib.(22) }
    raw = Rperf._decode_pprof(File.binread(path), "time")
    assert_equal([["cpu", "nanoseconds"]], raw[:sample_types])
    lines = raw[:samples].flat_map(&:first).map { |f| f[2] }.uniq
    assert_equal([0], lines, "from the Hash: no first lines")
  end

  private

  def go_raw(path)
    return nil unless H.go

    out, _, st = H.run_cmd(H.go, "tool", "pprof", "-symbolize=none", "-raw", path)
    st.success? ? out : nil
  end
end
