# frozen_string_literal: true

# tests/ruby/test_interop_report.rb — `rperf report` / Rperf::Report against
# Go's pprof: our C decoder reads profiles written by Go's profile package
# (`go tool pprof -proto` re-encodes ours: Go's string table order, its own
# ids, packed fields, mappings), and the per-function flat and cum we
# compute equal `go tool pprof -top -unit=ns` on the same file, for the
# fixtures with threads, Ractors, labels, GVL/GC frames and invalid UTF-8
# and, when the engine is available, real profiles; heap profiles, ours
# re-encoded by Go and one written by Go's runtime (runtime/pprof), read
# per sample type (`--sample-index`) with the totals and per-function
# values of `go tool pprof -top -sample_index=<type>`. Label: interop.

require "test/unit"
require "tmpdir"
require "rperf"
require "rperf/report"
require_relative "../interop/helper"

H = InteropHelper
H.require_readers!([["go (golang-go)", !H.go.nil?]])

class TestInteropReport < Test::Unit::TestCase
  R = Rperf::Report

  def setup
    @dir = Dir.mktmpdir("rperf-report-go")
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  # Our file, and Go's re-encoding of it.
  def ours_and_gos(name, data)
    ours = File.join(@dir, "#{name}.pb.gz")
    Rperf.save(ours, data, exporter: :pprof)
    gos = File.join(@dir, "#{name}-go.pb.gz")
    out, err, st = H.run_cmd(H.go, "tool", "pprof", "-proto", "-symbolize=none", ours)
    assert(st.success?, "go tool pprof -proto: #{err}")
    File.binwrite(gos, out)
    [ours, gos]
  end

  # go tool pprof -top in exact nanoseconds: {name => [flat, cum]}.
  PCT = /[\d.]+(?:e[-+]\d+)?%/

  def go_top(path)
    out, err, st = H.run_cmd(H.go, "tool", "pprof", "-symbolize=none", "-top", "-unit=ns",
                             "-nodefraction=0", "-nodecount=100000", path)
    assert(st.success?, "go tool pprof -top: #{err}")
    rows = {}
    out.each_line do |l|
      # percentages as Go prints them: 71.46%, 6.1e-06%
      next unless l =~ /\A\s*(\d+)(?:ns)?\s+#{PCT}\s+#{PCT}\s+(\d+)(?:ns)?\s+#{PCT}\s+(.*)$/

      rows[Regexp.last_match(3)] = [Regexp.last_match(1).to_i, Regexp.last_match(2).to_i]
    end
    rows
  end

  def our_top(profile)
    rows, = R.functions(profile)
    rows.to_h { |(_, label), v| [label, v] }
  end

  def check(name, data)
    ours, gos = ours_and_gos(name, data)
    a = R.load(ours)
    b = R.load(gos)
    assert_equal(R.functions(a), R.functions(b), "#{name}: Go's re-encoding reads back the same")
    assert_equal(a.data[:threads], b.data[:threads], name)
    sets = ->(p) { p.data[:label_sets].map { |h| h.sort.to_h }.sort_by(&:to_s) } # Go sorts keys
    assert_equal(sets.(a), sets.(b), name)
    assert_equal([a.type, a.unit, a.data[:frequency], a.data[:duration_ns]],
                 [b.type, b.unit, b.data[:frequency], b.data[:duration_ns]], name)
    go = go_top(gos)
    # Go prints an empty name as <unknown>, and a name with a newline over two lines.
    # go tool pprof -top leaves out a function whose samples all weigh 0
    mine = our_top(b).transform_keys { |label| label == "(unknown)" ? "<unknown>" : label }
                     .reject { |_, (flat, cum)| flat.zero? && cum.zero? }
    multi = mine.keys.select { |label| label.include?("\n") }
    mine = mine.reject { |label, _| multi.include?(label) }
    go = go.reject { |label, _| multi.any? { |m| m.start_with?(label) } }
    assert_equal(mine.keys.sort, go.keys.sort, "#{name}: the same functions")
    mine.each { |label, v| assert_equal(go[label], v, "#{name}: #{label} flat/cum as go tool pprof -top") }
    # Filters on Go's file: labels survive as Go writes them.
    total = ->(p) { R.functions(p)[1] }
    assert_equal(total.(R.filter(a, threads: [2])), total.(R.filter(b, threads: [2])), name)
    assert_equal(total.(R.filter(a, labels: { "ractor" => "1" })), total.(R.filter(b, labels: { "ractor" => "1" })),
                 name)
    # And the command line reads it too.
    out, err, st = H.run_cmd(RbConfig.ruby, File.expand_path("../../exe/rperf", __dir__), "diff", ours, gos)
    assert(st.success?, err)
    assert_match(/^No function changed\.$/, out)
  end

  def test_fixtures_reencoded_by_go
    %i[cpu wall].each { |mode| check("rich-#{mode}", H.rich_profile(mode)) }
    check("many", H.many_profile)
    check("deep", H.deep_profile)
  end

  # go tool pprof -top -sample_index=<type>: {name => [flat, cum]}.
  def go_top_index(path, index)
    out, err, st = H.run_cmd(H.go, "tool", "pprof", "-symbolize=none", "-top", "-sample_index=#{index}", "-unit=B",
                             "-nodefraction=0", "-nodecount=100000", path)
    assert(st.success?, "go tool pprof -top: #{err}")
    out.each_line.filter_map do |l|
      next unless l =~ /\A\s*(\d+)B?\s+#{PCT}\s+#{PCT}\s+(\d+)B?\s+#{PCT}\s+(.*)$/

      [Regexp.last_match(3), [Regexp.last_match(1).to_i, Regexp.last_match(2).to_i]]
    end.each_with_object({}) do |(label, (flat, cum)), rows|
      # Go marks a function inlined into its caller "name (inline)"; our
      # reader names each inlined frame as the function itself
      label = label.delete_suffix(" (inline)")
      old = rows[label]
      rows[label] = old ? [old[0] + flat, [old[1], cum].max] : [flat, cum]
    end
  end

  def heap_checks(path, name)
    H::ALLOC_TYPES.each do |t|
      prof = R.load(path, sample_index: t.to_s)
      assert_equal([t.to_s, true], [prof.type, prof.alloc?], name)
      mine = our_top(prof).transform_keys { |label| label == "(unknown)" ? "<unknown>" : label }
                          .reject { |label, _| label.include?("\n") }
      go = go_top_index(path, t).reject { |label, _| mine.none? { |m, _| m == label } && label.start_with?("bad") }
      assert_equal(go, mine, "#{name}: #{t} as go tool pprof -top -sample_index=#{t}")
      out, err, st = H.run_cmd(RbConfig.ruby, File.expand_path("../../exe/rperf", __dir__), "report",
                               "--sample-index", t.to_s, path)
      assert(st.success?, err)
      assert_match(/^Type: #{t} \((bytes|count)\)$/, out)
    end
  end

  def test_heap_fixture_reencoded_by_go
    data = H.alloc_profile
    ours, gos = ours_and_gos("heap", data)
    H::ALLOC_TYPES.each do |t|
      a = R.load(ours, sample_index: t.to_s)
      b = R.load(gos, sample_index: t.to_s)
      assert_equal(R.functions(a), R.functions(b), "#{t}: Go's re-encoding reads back the same")
      assert_equal(a.data[:allocations][:samples].map { |e| e[1..5] }.sort_by(&:to_s),
                   b.data[:allocations][:samples].map { |e| e[1..5] }.sort_by(&:to_s), t)
    end
    heap_checks(ours, "ours")
    heap_checks(gos, "Go's re-encoding")
  end

  GO_HEAP = <<~GO
    package main

    import (
    	"os"
    	"runtime"
    	"runtime/pprof"
    )

    var keep [][]byte
    var sink []byte

    //go:noinline
    func allocKept() {
    	for i := 0; i < 1000; i++ {
    		keep = append(keep, make([]byte, 4096))
    	}
    }

    //go:noinline
    func allocFreed() {
    	for i := 0; i < 500; i++ {
    		sink = make([]byte, 8192)
    	}
    	sink = nil
    }

    func main() {
    	runtime.MemProfileRate = 1
    	allocKept()
    	allocFreed()
    	runtime.GC()
    	f, err := os.Create(os.Args[1])
    	if err != nil {
    		panic(err)
    	}
    	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
    		panic(err)
    	}
    	f.Close()
    }
  GO

  # A heap profile from Go's runtime (no default_sample_type: the last,
  # inuse_space, is shown by default, as pprof does).
  def test_go_runtime_heap_profile
    src = File.join(@dir, "main.go")
    File.write(src, GO_HEAP)
    path = File.join(@dir, "go-heap.pb.gz")
    env = { "GO111MODULE" => "off", "GOPATH" => File.join(@dir, "gopath"), "GOFLAGS" => "" }
    _, err, st = H.run_cmd(H.go, "run", src, path, env: env)
    assert(st.success?, "go run: #{err}")
    assert_equal("inuse_space", R.load(path).type)
    heap_checks(path, "Go's runtime")
    kept = R.load(path, sample_index: "inuse_space")
    assert_operator(our_top(kept)["main.allocKept"][0], :>=, 1000 * 4096)
    freed = R.load(path, sample_index: "alloc_space")
    assert_operator(our_top(freed)["main.allocFreed"][0], :>=, 500 * 8192)
    assert_operator(our_top(kept).fetch("main.allocFreed", [0])[0], :<, 8192, "freed: not one buffer in use")
    # and any exporter writes it again: pprof keeps every value
    raw = Rperf._decode_pprof(R.export(freed, :pprof), "again")
    assert_equal(["alloc_space", 4], [raw[:default_sample_type], raw[:sample_types].size])
    assert_match(/\ATotal: [\d.]+ MiB \(alloc_space\)\n/, R.export(freed, :text))
  end

  def test_real_profiles_reencoded_by_go
    profiles = H.real_profiles
    omit("engine not available") unless profiles
    profiles.each { |mode, data| check("real-#{mode}", data) }
  end
end
