# frozen_string_literal: true

# tests/ruby/test_interop_report.rb — `rperf report` / Rperf::Report against
# Go's pprof: our C decoder reads profiles written by Go's profile package
# (`go tool pprof -proto` re-encodes ours: Go's string table order, its own
# ids, packed fields, mappings), and the per-function flat and cum we
# compute equal `go tool pprof -top -unit=ns` on the same file, for the
# fixtures with threads, Ractors, labels, GVL/GC frames and invalid UTF-8
# and, when the engine is available, real profiles. Label: interop.

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
  def go_top(path)
    out, err, st = H.run_cmd(H.go, "tool", "pprof", "-symbolize=none", "-top", "-unit=ns",
                             "-nodefraction=0", "-nodecount=100000", path)
    assert(st.success?, "go tool pprof -top: #{err}")
    rows = {}
    out.each_line do |l|
      next unless l =~ /\A\s*(\d+)(?:ns)?\s+[\d.]+%\s+[\d.]+%\s+(\d+)(?:ns)?\s+[\d.]+%\s+(.*)$/

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
    mine = our_top(b).transform_keys { |label| label == "(unknown)" ? "<unknown>" : label }
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

  def test_real_profiles_reencoded_by_go
    profiles = H.real_profiles
    omit("engine not available") unless profiles
    profiles.each { |mode, data| check("real-#{mode}", data) }
  end
end
