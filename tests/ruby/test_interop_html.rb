# frozen_string_literal: true

# tests/ruby/test_interop_html.rb — the HTML flame graph (format: :html)
# opened from disk in headless Chromium (Debian's chromium driven by
# puppeteer-core through tests/interop/html-check.js): it renders one
# rectangle per call-tree node, click-to-zoom changes the visible set and
# Escape / "Reset zoom" go back up, search highlights and reports the
# matched share, thread and label filters change the totals, the top table
# sorts, hostile frame names (`</script>`, `<!--`, U+2028, invalid UTF-8)
# neither break the page nor run code, and the page makes no request at
# all. The embedded JSON is also parsed here and its call tree checked
# against the samples. Writes a screenshot to <build>/Testing/ and the load
# time at 100k unique stacks to the test log (not asserted). Allocation
# profiles render too: the sample type in the title and header, values in
# bytes (KiB, MiB) or objects, and the class as a label filter. Label:
# interop.

require "test/unit"
require "tmpdir"
require "json"
require "set"
require "rperf"
require "rperf/serve"
require_relative "helper"
require_relative "../interop/helper"

H = InteropHelper
H.require_readers!([
  ["node", !H.node.nil?],
  ["npm puppeteer-core", File.file?(File.join(H::NODE_MODULES, "puppeteer-core", "package.json"))],
  ["chromium (#{H::CHROMIUM})", File.executable?(H::CHROMIUM)],
])

class TestInteropHTML < Test::Unit::TestCase
  include RperfTestHelper
  NODE_ENV = { "NODE_PATH" => H::NODE_MODULES }.freeze
  CHECK = File.expand_path("../interop/html-check.js", __dir__)
  EXE = File.expand_path("../../exe/rperf", __dir__)
  LOG_DIR = File.join(ENV.fetch("RPERF_BUILD_DIR", File.expand_path("../../build", __dir__)), "Testing")
  # Every character a page or its JSON could trip over, plus an invalid byte.
  EVIL = "evil</script><!-- <script>alert(1)</script> \u2028\u2029 \"q\" \\ '&amp; ".b + "\xFF end".b
  EVIL_SHOWN = EVIL.dup.force_encoding(Encoding::UTF_8).scrub("\uFFFD")

  def setup
    @dir = Dir.mktmpdir("rperf-html")
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  # ---- helpers --------------------------------------------------------------

  # -> [result Hash per spec], from one browser launch.
  def check(specs)
    spec_path = File.join(@dir, "spec-#{rand(1 << 30)}.json")
    File.write(spec_path, ::JSON.generate(specs))
    out, err, st = H.run_cmd("node", CHECK, spec_path, env: NODE_ENV)
    assert(st.success?, "html-check: #{err[-3000..] || err}")
    results = out.lines.map { |l| ::JSON.parse(l) }
    assert_equal(specs.size, results.size, "html-check: #{out}#{err}")
    results.each do |r|
      assert_equal([], r["problems"], "#{r['file']}: console/page errors")
      assert_equal([], r["requests"], "#{r['file']}: the page must not request anything")
    end
    results
  end

  def save(name, data)
    path = File.join(@dir, "#{name}.html")
    Rperf.save(path, data) # the .html suffix picks the exporter
    path
  end

  # The JSON data island of a page.
  def embedded(path)
    html = File.binread(path).force_encoding(Encoding::UTF_8)
    m = html.match(%r{<script type="application/json" id="rperf-data">\n(.*?)</script>}m)
    assert(m, "data element in #{path}")
    ::JSON.parse(m[1])
  end

  def names_of(frames) = frames.map { |f| f[1] }

  # Weight of the samples (of thread `seq`, label set `ls`) whose stack has
  # a frame for which the block is true.
  def weight(data, seq: nil, ls: nil, &pred)
    data[:aggregated_samples].sum do |frames, w, s, l|
      next 0 if seq && s != seq
      next 0 if ls && l != ls
      next 0 if pred && frames.none?(&pred)
      w
    end
  end

  # Unique root-first prefixes of the stacks = call-tree nodes (root excluded).
  def tree_nodes(data)
    set = Set.new
    data[:aggregated_samples].each do |frames, *|
      path = names_of(frames).reverse
      path.size.times { |i| set << path[0..i] }
    end
    set.size
  end

  def rich
    d = H.rich_profile(:wall)
    d[:aggregated_samples] << [[["x.rb", EVIL], H::MAIN], 5_000_000, 1, 0]
    d.merge(backend: :signal)
  end

  # Every node at least a few pixels wide: 4 x 4 x 3 leaves of 1 ms under main.
  def wide
    samples = []
    4.times { |a| 4.times { |b| 3.times { |c| samples << [[["w.rb", "C#c#{c}"], ["w.rb", "B#b#{b}"], ["w.rb", "A#a#{a}"], H::MAIN], 1_000_000, 1 + (c % 2), 0] } } }
    { mode: :cpu, frequency: 500, aggregated_samples: samples }
  end

  # n unique stacks shaped like a program (few roots, more variety deeper),
  # depth 20–40 over 5,000 frames.
  def big(n)
    rng = Random.new(7)
    frames = (0...5000).map { |i| ["lib/m#{i % 60}.rb", "Mod#{i % 97}::Klass#{i % 31}#meth#{i}"] }
    seen = Set.new
    samples = []
    while samples.size < n
      depth = 20 + rng.rand(21)
      idx = Array.new(depth) { |k| (k * 131 + rng.rand([2 << k, 5000].min)) % 5000 }
      next unless seen.add?(idx)
      samples << [idx.reverse.map { |i| frames[i] }, 1_000 + rng.rand(5_000_000), 1 + (samples.size % 4), samples.size % 3]
    end
    { mode: :cpu, frequency: 1000, duration_ns: 10**10, sampling_count: n, aggregated_samples: samples,
      label_sets: [{}, { endpoint: "a" }, { endpoint: "b" }],
      threads: (1..4).map { |t| { thread_seq: t, ractor_id: t > 2 ? 2 : 1, name: "t#{t}", native_tid: 0 } } }
  end

  # ---- tests ----------------------------------------------------------------

  # The live route, as a user opens it: Chromium fetches
  # /debug/pprof/flamegraph?seconds=1 from Rperf.serve (behind a token)
  # while a thread works, and gets a page of that second that renders,
  # zooms and makes no other request.
  def test_the_flamegraph_route_opens_in_the_browser
    Rperf.start(mode: :cpu, frequency: 1000)
    server = Rperf.serve(port: 0, token: "s3cret")
    working = true
    worker = Thread.new do
      while working
        rperf_work_a(0.002)
        sleep 0.001
      end
    end
    url = "http://127.0.0.1:#{server.port}/debug/pprof/flamegraph?seconds=1"
    r = check([{ url: url, headers: { "Authorization" => "Bearer s3cret" }, zoom: "Object#rperf_work_a" }]).first
    assert_equal("rperf cpu profile", r["title"])
    init = r["steps"]["initial"]
    assert_operator(init["rects"], :>, 1, "the window's stacks are drawn")
    assert_include(init["visible"], "Object#rperf_work_a")
    assert_equal("Object#rperf_work_a", r["steps"]["zoomed"]["zoom"])
    ms = r["header"].filter_map { |x| x[/\ADuration(\d+) ms\z/, 1]&.to_i }.first
    assert_operator(ms.to_i, :>=, 1000, "a window of the second asked: #{r['header']}")
  ensure
    working = false
    worker&.join(10)
    server&.stop
    Rperf.stop if Rperf.running?
  end

  def test_embedded_data_is_safe_json_and_rebuilds_every_stack
    data = rich
    path = save("rich", data)
    html = File.binread(path)
    assert(html.dup.force_encoding(Encoding::UTF_8).valid_encoding?, "the page is valid UTF-8")
    assert_equal(2, html.scan(%r{</script}i).size, "only the page's own two script elements end")
    refute_match(/<!--/, html)
    refute_match(/\u2028|\u2029/, html.dup.force_encoding(Encoding::UTF_8))
    refute_match(%r{https?://}, html, "no URL at all in the page")
    doc = embedded(path)
    assert_equal(%w[wall 1000 100000000 50], [doc["meta"]["mode"], doc["meta"]["frequency"].to_s,
                                             doc["meta"]["duration_ns"].to_s, doc["meta"]["sampling_count"].to_s])
    parent = [nil] + doc["parent"].each_with_index.map { |d, i| i + 1 - d }
    frame = [nil] + doc["frame"]
    assert_equal(tree_nodes(data), parent.size - 1, "one node per unique prefix")
    data[:aggregated_samples].each_with_index do |(frames, w, seq, ls), i|
      node, wt, s, l = doc["samples"][4 * i, 4]
      path_names = []
      while node != 0
        path_names.unshift(doc["frames"][frame[node]][0])
        node = parent[node]
      end
      want = names_of(frames).reverse.map { |n| n.empty? ? "(unknown)" : n.dup.force_encoding(Encoding::UTF_8).scrub("\uFFFD") }
      assert_equal([want, w, seq, ls], [path_names, wt, s, l], "sample #{i}")
    end
    assert_include(doc["frames"].map(&:first), EVIL_SHOWN)
  end

  def test_renders_zooms_searches_filters_offline
    data = rich
    shot = File.join(LOG_DIR, "html-screenshot.png")
    FileUtils.mkdir_p(LOG_DIR)
    r = check([{ file: save("rich", data), screenshot: shot, zoom: "Foo#bar", search: "foo",
                 thread: 2, label: "endpoint=GET /users", sort: "name" }]).first
    puts "screenshot: #{shot}"
    assert_equal("rperf wall profile", r["title"])
    %w[Modewall Frequency1000\ Hz Duration100\ ms Samples50 Backendsignal].each do |h|
      assert(r["header"].any? { |x| x.start_with?(h) }, "header #{h}: #{r['header']}")
    end
    assert_include(r["threads"].map(&:last), "thread 2 \"wor\tker\uFFFD\" (Ractor 2) 60.78%")
    assert_equal(["", "none", "2", "0", "1"], r["labels"].map(&:first))

    init = r["steps"]["initial"]
    assert_equal(weight(data), init["total"])
    assert_equal(tree_nodes(data) + 1, init["nodes"])
    # The two 1 µs stacks are narrower than half a pixel: not drawn.
    assert_equal(init["nodes"] - 2, init["rects"])
    assert_include(init["visible"], EVIL_SHOWN, "hostile names are shown as text")
    assert_include(r["tooltip"], "Foo#bar")

    zoomed = r["steps"]["zoomed"]
    assert_equal("Foo#bar", zoomed["zoom"])
    assert_equal(%w[all Object#main Foo#bar Integer#times [GC\ marking] [GVL\ wait]].sort, zoomed["visible"].sort)
    assert_operator(zoomed["rects"], :<, init["rects"])
    assert_equal("Object#main", r["steps"]["escaped"]["zoom"], "Escape goes one level up")
    assert_equal(["all", init["visible"].sort], [r["steps"]["reset"]["zoom"], r["steps"]["reset"]["visible"].sort])

    search = r["steps"]["search"]
    assert_equal(weight(data) { |f| (f[0] + f[1]).downcase.include?("foo") }, search["matched"])
    assert_equal(1, search["highlighted"])
    assert_match(/\Amatched 41\.18% \(42\.0 ms\)\z/, search["matchedText"])

    assert_equal(weight(data, seq: 2), r["steps"]["thread"]["total"])
    assert_equal(weight(data, ls: 1), r["steps"]["label"]["total"])
    assert_equal(%w[Object#main Foo#bar Integer#times [GVL\ wait]].sort, r["steps"]["label"]["visible"].drop(1).sort)
    names = r["steps"]["sorted"]["table"].map { |row| row[4] }
    assert_equal(names.sort, names, "sorted by function name")
    assert(File.size?(shot), "screenshot written")
  end

  def test_allocation_profiles
    data = H.alloc_profile
    space = File.join(@dir, "alloc-space.html")
    Rperf.save(space, data, sample_type: :inuse_space)
    objects = File.join(@dir, "alloc-objects.html")
    Rperf.save(objects, data, sample_type: :alloc_objects)
    r, o = check([{ file: space, zoom: "Object#main", search: "Foo", label: "class=MyApp::User" },
                  { file: objects, label: "class=String" }])
    assert_equal("rperf inuse_space profile", r["title"])
    %w[Modealloc Sample\ typeinuse_space Allocation\ interval1024 Sampled9\ allocations,\ 4\ live
       Total2.1\ MiB].each do |h|
      assert_include(r["header"], h, r["header"].inspect)
    end
    refute(r["header"].any? { |h| h.start_with?("Frequency") }, "an alloc run has no frequency")
    totals = H.alloc_totals(data)
    assert_equal(totals[:inuse_space], r["steps"]["initial"]["total"])
    assert_equal(81_920, r["steps"]["label"]["total"], "the class filter")
    assert_include(r["labels"].map(&:last), "class=<T_IMEMO>")
    assert_match(/\Amatched \d+\.\d\d% \(40\.0 KiB\)\z/, r["steps"]["search"]["matchedText"])
    top = r["steps"]["initial"]["table"].first # by flat, largest first
    assert_equal(["1.9 MiB", "92.38%", "2.1 MiB", "Object#main"], top.values_at(0, 1, 2, 4))
    assert(r["steps"]["initial"]["table"].flatten.none? { |c| c.end_with?(" ms") }, "no times")

    assert_equal("rperf alloc_objects profile", o["title"])
    assert_include(o["header"], "Total8,192 obj")
    assert_equal(totals[:alloc_objects], o["steps"]["initial"]["total"])
    assert_equal(3072, o["steps"]["label"]["total"])
    assert_include(o["steps"]["initial"]["table"].map { |row| row[0] }, "3,072 obj")
  end

  def test_every_node_is_a_rectangle_and_regex_search
    data = wide
    r = check([{ file: save("wide", data), regex: "^B#b[01]$" }]).first
    init = r["steps"]["initial"]
    assert_equal(tree_nodes(data) + 1, init["nodes"])
    assert_equal(init["nodes"], init["rects"])
    rx = r["steps"]["regex"]
    assert_equal(weight(data) { |f| f[1].match?(/^B#b[01]$/) }, rx["matched"])
    assert_equal(8, rx["highlighted"], "B#b0 and B#b1 under each of the 4 A#a frames")
  end

  def test_empty_deep_and_real_profiles_load
    files = { "empty" => H.empty_profile, "deep" => H.deep_profile(1500) }.map { |n, d| save(n, d) }
    files += H.real_outputs(@dir, ".html", :html) || []
    results = check(files.map { |f| { file: f } })
    assert_equal(1, results[0]["steps"]["initial"]["rects"], "empty: the root bar only")
    assert_equal(1501, results[1]["steps"]["initial"]["rects"], "deep: every frame")
    results.drop(2).each do |r|
      init = r["steps"]["initial"]
      assert_operator(init["total"], :>, 0, r["file"])
      assert_operator(init["rects"], :>=, 3, "#{r['file']}: root, main and more")
    end
  end

  def test_cli_record_format_html
    env = { "RUBYOPT" => nil, "RPERF_ENABLED" => nil }
    work = ["ruby", "-e", "def rperf_html_work = 3_000_000.times { }; rperf_html_work"]
    out, err, st = Open3.capture3(env, RbConfig.ruby, EXE, "record", "--format", "html", "-o", "p.out", *work, chdir: @dir)
    assert_equal(0, st.exitstatus, out + err)
    _, err, st = Open3.capture3(env, RbConfig.ruby, EXE, "record", "-o", "q.html", *work, chdir: @dir)
    assert_equal(0, st.exitstatus, err)
    # --format wins over the suffix; Chromium needs .html to render it as a page.
    assert_match(/\A<!DOCTYPE html>\n/, File.read(File.join(@dir, "p.out")))
    FileUtils.mv(File.join(@dir, "p.out"), File.join(@dir, "p.html"))
    results = check([{ file: File.join(@dir, "p.html"), search: "rperf_html_work" },
                     { file: File.join(@dir, "q.html") }])
    results.each do |r|
      assert_include(r["steps"]["initial"]["visible"], "Object#rperf_html_work", r["file"])
      assert_equal("rperf cpu profile", r["title"])
      assert(r["header"].any? { |h| h.match?(/\ABackend(#{Rperf.backends.join('|')})\z/) }, r["header"].inspect)
    end
    assert_operator(results[0]["steps"]["search"]["matched"], :>, 0)
  end

  def test_load_time_at_100k_unique_stacks
    data = big(100_000)
    t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    path = save("big", data)
    save_s = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
    r = check([{ file: path, screenshot: File.join(LOG_DIR, "html-100k.png"), viewportOnly: true,
                 zoom: "Mod0::Klass0#meth0", search: "meth42", thread: 3 }]).first
    init = r["steps"]["initial"]
    assert_equal(100_000, init["stacks"])
    assert_equal(weight(data, seq: 3), r["steps"]["thread"]["total"])
    puts format("100k unique stacks: %.1f MB page, save %.2f s, nodes %d; Chromium load to first draw %.0f ms " \
                "(navigation %d ms), rectangles %d, filter change %.0f ms, search %.0f ms",
                File.size(path) / 1e6, save_s, init["nodes"], r["loadMs"], r["wallLoadMs"], init["rects"],
                r["steps"]["thread"]["updateMs"], r["steps"]["search"]["updateMs"])
  end
end
