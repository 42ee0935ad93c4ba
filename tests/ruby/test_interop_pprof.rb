# frozen_string_literal: true

# tests/ruby/test_interop_pprof.rb — pprof output read by independent strict
# readers (validators reference §1): pprof-strict (Debian's Go `profile`
# package: parse + CheckValid) and `go tool pprof -raw`, on cpu and wall
# profiles with threads, Ractors, labels, GVL/GC frames, invalid UTF-8, an
# empty profile, a 1,500-frame stack, heap profiles (each of the four
# allocation sample types as the default; go tool pprof -top
# -sample_index=<type> gives our totals per function for each), and — when
# the engine is available — real profiles. A cross-check compares pprof's
# view of the stacks with our collapsed output. Label: interop.

require "test/unit"
require "tmpdir"
require "rperf"
require_relative "../interop/helper"

H = InteropHelper
H.require_readers!([["pprof-strict (#{H::PPROF_STRICT})", File.executable?(H::PPROF_STRICT)],
                    ["go (golang-go)", !H.go.nil?]])

class TestInteropPprof < Test::Unit::TestCase
  def setup
    @dir = Dir.mktmpdir("rperf-pprof")
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  def save(name, data)
    path = File.join(@dir, name)
    Rperf.save(path, data, exporter: :pprof)
    path
  end

  # Run both strict readers; return pprof-strict's summary and the -raw dump.
  def strict_read(path)
    out, err, st = H.run_cmd(H::PPROF_STRICT, path)
    assert(st.success?, "pprof-strict rejected #{File.basename(path)}: #{err}")
    raw, rerr, rst = H.run_cmd(H.go, "tool", "pprof", "-symbolize=none", "-raw", path)
    assert(rst.success?, "go tool pprof -raw rejected #{File.basename(path)}: #{rerr}")
    [out, raw]
  end

  def test_rich_cpu_and_wall
    %i[cpu wall].each do |mode|
      data = H.rich_profile(mode)
      out, raw = strict_read(save("rich-#{mode}.pb.gz", data))
      n = mode == :wall ? 9 : 7
      assert_match(/OK types=\[#{mode}\/nanoseconds\] samples=#{n} .*mappings=0 period=1000000$/, out)
      assert_match(/^PeriodType: #{mode} nanoseconds$/, raw)
      assert_match(/^Comment: rperf #{Regexp.escape(Rperf::VERSION)}$/, raw)
      assert_match(/^Comment: mode: #{mode}$/, raw)
      assert_match(/^Comment: frequency: 1000Hz$/, raw)
      assert_match(/ractor:\[1\] thread_seq:\[1\]/, raw) # the main Ractor is labelled too
      assert_match(/ractor:\[2\] thread_seq:\[2\]/, raw)
      assert_match(/endpoint:\[GET \/users\]/, raw)
      assert_match(/job:\[Mailer\]/, raw)
      assert_match(/Foo#bar app\.rb/, raw)
      assert_match(/\[GC marking\] <GC>/, raw)
      assert_match(/\[GVL blocked\] <GVL>/, raw) if mode == :wall
      assert(raw.valid_encoding? || raw.force_encoding("UTF-8").valid_encoding?)
    end
  end

  # One numeric `ractor` label per sample from data[:threads] (Ractor ids,
  # main Ractor = 1); none when the thread's Ractor is unknown (ractor_id 0,
  # or a thread_seq missing from :threads), and no labels at all for
  # thread_seq 0. Read back sample by sample through pprof's own parser.
  def test_ractor_labels_from_threads_table
    f = ["a.rb", "A#x"]
    m = ["a.rb", "main"]
    data = {
      mode: :cpu, frequency: 100,
      aggregated_samples: [[[f, m], 1000, 1, 0], [[f, m], 2000, 2, 0], [[m], 3000, 3, 0],
                           [[f], 4000, 4, 0], [[m], 5000, 0, 0], [[f, m], 6000, 5, 0]],
      threads: [{ thread_seq: 1, ractor_id: 1, name: "main", native_tid: 4242 },
                { thread_seq: 2, ractor_id: 3, name: nil, native_tid: nil },
                { thread_seq: 3, ractor_id: 0, name: "unknown ractor", native_tid: nil },
                { thread_seq: 5, ractor_id: 2**32 - 1, name: "r", native_tid: 1 }],
    }
    out, raw = strict_read(save("ractors.pb.gz", data))
    assert_match(/samples=6 /, out)
    labels = raw[/^Samples:\n.*?\n(.*?)^Locations/m, 1].scan(/^\s+(\d+): [\d ]+\n(?:\s+([^\n]*:\[[^\n]*)\n)?/)
                                                  .to_h { |w, l| [w.to_i, l.to_s.strip] }
    assert_equal({ 1000 => "ractor:[1] thread_seq:[1]", 2000 => "ractor:[3] thread_seq:[2]",
                   3000 => "thread_seq:[3]", 4000 => "thread_seq:[4]", 5000 => "",
                   6000 => "ractor:[4294967295] thread_seq:[5]" }, labels)
  end

  def test_empty_profile
    out, = strict_read(save("empty.pb.gz", H.empty_profile))
    assert_match(/OK types=\[wall\/nanoseconds\] samples=0 .*period=10000000$/, out)
  end

  def test_deep_stack
    out, raw = strict_read(save("deep.pb.gz", H.deep_profile(1500)))
    assert_match(/samples=2 locations=1500 functions=1500/, out)
    assert_match(/Deep#m1499 deep\.rb/, raw)
  end

  def test_uncompressed_encode_is_accepted_too
    path = File.join(@dir, "raw.pb")
    File.binwrite(path, Rperf::PProf.encode(H.rich_profile))
    strict_read(path)
  end

  # pprof's own reading of the stacks equals our collapsed output.
  def test_cross_check_with_collapsed
    data = H.many_profile(400)
    _, raw = strict_read(save("many.pb.gz", data))
    locs = {}
    raw[/^Locations\n(.*?)^Mappings/m, 1].each_line do |l|
      # "     1: 0x0 M=1 Mod3#meth3 lib3.rb:0 s=0()"
      id, rest = l.strip.split(": ", 2)
      locs[id.to_i] = rest.split(" ")[2]
    end
    folded = Hash.new(0)
    raw[/^Samples:\n.*?\n(.*?)^Locations/m, 1].each_line do |l|
      next unless l =~ /^\s*(\d+): ([\d ]+)$/
      w = Regexp.last_match(1).to_i
      stack = Regexp.last_match(2).split.map { |i| locs.fetch(i.to_i) }.reverse.join(";")
      folded[stack] += w
    end
    ours = Rperf::Collapsed.encode(data).lines.to_h { |l| s, w = l.chomp.rpartition(" ").values_at(0, 2); [s, w.to_i] }
    assert_equal(ours, folded)
  end

  # go tool pprof -top -sample_index=<type>, exact: {name => [flat, cum]}.
  def go_top(path, index)
    out, err, st = H.run_cmd(H.go, "tool", "pprof", "-symbolize=none", "-top", "-sample_index=#{index}", "-unit=B",
                             "-nodefraction=0", "-nodecount=100000", path)
    assert(st.success?, "go tool pprof -top -sample_index=#{index}: #{err}")
    out.each_line.filter_map do |l|
      next unless l =~ /\A\s*(\d+)B?\s+[\d.]+%\s+[\d.]+%\s+(\d+)B?\s+[\d.]+%\s+(.*)$/

      [Regexp.last_match(3), [Regexp.last_match(1).to_i, Regexp.last_match(2).to_i]]
    end.to_h
  end

  # {name => [flat, cum]} of one allocation type, from the Hash (names
  # without a newline: pprof prints those over two lines).
  def alloc_functions(data, type)
    col = 2 + H::ALLOC_TYPES.index(type)
    rows = Hash.new { |h, k| h[k] = [0, 0] }
    data[:allocations][:samples].each do |frames, *vals|
      w = vals[col - 1]
      next unless w.positive?

      names = frames.map { |_, l| l.dup.force_encoding(Encoding::UTF_8).scrub("\uFFFD") }
      rows[names[0]][0] += w
      names.uniq.each { |n| rows[n][1] += w }
    end
    rows.reject { |n, _| n.include?("\n") }
  end

  # What one of go tool pprof's scaled time values ("5.34s", "5343.79ms",
  # "750us", "0") is in nanoseconds, and the rounding of its last digit.
  TIME_LABEL_NS = { "ns" => 1, "us" => 1e3, "µs" => 1e3, "μs" => 1e3, "ms" => 1e6, "s" => 1e9, "hrs" => 3.6e12 }.freeze

  def label_ns(label)
    return [0, 0] if label == "0"

    m = label.match(/\A(\d+(?:\.(\d+))?)(#{TIME_LABEL_NS.keys.join('|')})\z/)
    assert(m, "#{label.inspect}: a time scaled to its unit")
    factor = TIME_LABEL_NS.fetch(m[3])
    [m[1].to_f * factor, factor * 0.5 * 10**-(m[2]&.size || 0)]
  end

  # go tool pprof scales our time values to a unit (ms, s) as it does Go's
  # own CPU profiles (sample type cpu/nanoseconds, period type
  # cpu/nanoseconds): -top prints "5.34s", not 5343787825ns; every
  # value, read back, is our total.
  def test_top_scales_time_units
    %i[cpu wall].each do |mode|
      samples = [[[H::FOO, H::MAIN], 5_343_787_825, 1, 0], [[H::TIMES, H::MAIN], 20_000_000, 1, 0],
                 [[H::CMETH, H::MAIN], 750_000, 2, 0]]
      data = { mode: mode, frequency: 1000, start_time_ns: 1_700_000_000_000_000_000, duration_ns: 6_000_000_000,
               aggregated_samples: samples }
      path = save("units-#{mode}.pb.gz", data)
      out, err, st = H.run_cmd(H.go, "tool", "pprof", "-symbolize=none", "-top", path)
      assert(st.success?, "go tool pprof -top: #{err}")
      assert_match(/^Type: #{mode}$/, out)
      assert_match(/^Duration: 6s, Total samples = 5\.36s /, out, "the header in seconds")
      assert_match(/^ +5\.34s +99\.61% +99\.61% +5\.34s +99\.61%  Foo#bar$/, out, "a value of seconds")
      refute_match(/\d{4,}ns\b/, out, "no value left in nanoseconds")

      out, err, st = H.run_cmd(H.go, "tool", "pprof", "-symbolize=none", "-top", "-nodefraction=0", path)
      assert(st.success?, "go tool pprof -top -nodefraction=0: #{err}")
      rows = out.each_line.filter_map do |l|
        next unless l =~ /\A\s*(\S+)\s+[\d.]+%\s+[\d.]+%\s+(\S+)\s+[\d.]+%\s+(.*)$/

        [Regexp.last_match(3), [Regexp.last_match(1), Regexp.last_match(2)]]
      end.to_h
      expected = { "Foo#bar" => [5_343_787_825, 5_343_787_825], "Integer#times" => [20_000_000, 20_000_000],
                   "Kernel#sleep" => [750_000, 750_000], "Object#main" => [0, 5_364_537_825] }
      assert_equal(expected.keys.sort, rows.keys.sort, out)
      expected.each do |name, values|
        values.zip(rows[name]).each do |ns, label|
          got, rounding = label_ns(label)
          assert_in_delta(ns, got, rounding, "#{mode}: #{name} #{label}")
        end
      end
    end
  end

  def test_heap_profiles_every_type
    [H.alloc_profile, H.alloc_profile(:cpu)].each do |data|
      H::ALLOC_TYPES.each do |t|
        path = File.join(@dir, "heap-#{data[:mode]}-#{t}.pb.gz")
        Rperf.save(path, data, exporter: :pprof, sample_type: t)
        out, raw = strict_read(path)
        types = Regexp.escape("alloc_objects/count alloc_space/bytes inuse_objects/count inuse_space/bytes")
        # period: the mean bytes between two sampled allocations, 1024 x 410,624 / 8,192
        assert_match(/OK types=\[#{types}\] samples=6 locations=6 functions=6 mappings=0 period=51328$/, out)
        assert_match(/^PeriodType: space bytes$/, raw)
        header = H::ALLOC_TYPES.map { |x| "#{x}/#{x.to_s.end_with?('_space') ? 'bytes' : 'count'}#{'[dflt]' if x == t}" }
        assert_match(/^#{Regexp.escape(header.join(' '))}$/, raw, "#{t} is the default type")
        assert_match(/^Comment: mode: #{data[:mode]}$/, raw)
        assert_match(/^Comment: allocation interval: 1024$/, raw)
        assert_match(/class:\[MyApp::User\] job:\[Mailer\]|job:\[Mailer\].*class:\[MyApp::User\]/, raw)
        assert_match(/^ +ractor:\[2\] thread_seq:\[2\]$/, raw)
        H::ALLOC_TYPES.each do |index|
          assert_equal(alloc_functions(data, index), go_top(path, index).reject { |n, _| n.start_with?("bad") },
                       "#{data[:mode]}: default #{t}, -sample_index=#{index}")
        end
      end
    end
    # a cpu run with allocations still writes its time profile by default
    out, = strict_read(save("cpu-and-allocs.pb.gz", H.alloc_profile(:cpu)))
    assert_match(%r{OK types=\[cpu/nanoseconds\] samples=7 }, out)
  end

  def test_real_profiles
    profiles = H.real_profiles
    omit("engine not available yet (Rperf.start/stop): real-profile interop not run") unless profiles
    profiles.each do |mode, data|
      out, = strict_read(save("real-#{mode}.pb.gz", data))
      assert_match(/OK types=\[#{mode}\/nanoseconds\]/, out)
    end
  end

  # Written at stop from the engine's data: also valid, and functions carry
  # the first line of their method (which a result Hash does not have).
  def test_real_profiles_written_at_stop
    paths = H.real_outputs(@dir, ".pb.gz", :pprof)
    omit("engine not available yet (Rperf.start/stop)") unless paths
    paths.zip(%w[cpu wall]).each do |path, mode|
      out, raw = strict_read(path)
      assert_match(/OK types=\[#{mode}\/nanoseconds\]/, out)
      assert_match(/^ +ractor:\[1\] thread_seq:\[\d+\]$/, raw, "threads of the main Ractor")
      assert_match(%r{ InteropHelper\.real_workload \S*helper\.rb:([1-9]\d*) s=\1\(\)$}, raw,
                   "real_workload with its first line")
    end
  end
end
