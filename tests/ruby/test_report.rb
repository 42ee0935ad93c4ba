# frozen_string_literal: true

# tests/ruby/test_report.rb — Rperf::Report (ruby/lib/rperf/report.rb), what
# `rperf report` / `rperf diff` print, on files our exporters write: pprof
# (read by our C decoder, Rperf._decode_pprof) and speedscope JSON give the
# same functions, flat and cum as the result Hash they were written from;
# top tables, units, filters (focus, ignore, thread, labels incl. the
# numeric thread_seq / ractor labels), --text through the text exporter,
# diff deltas and order; the run's sampling count through pprof's
# comment; unreadable files give Report::Error naming the
# file (truncated, garbage, empty, invalid JSON, unsupported JSON).
# Go's re-encoding is in test_interop_report.rb; the command line's error
# cases in test_cli.rb.

require_relative "helper"
require_relative "../interop/helper"
require "rperf/report"

class TestReport < Test::Unit::TestCase
  R = Rperf::Report
  H = InteropHelper

  def setup
    @dir = Dir.mktmpdir("rperf-report")
  end

  def teardown
    FileUtils.remove_entry(@dir)
  end

  def save(name, data, exporter = nil)
    path = File.join(@dir, name)
    Rperf.save(path, data, exporter: exporter)
    path
  end

  # {"label (path)" => [flat, cum]} straight from a result Hash.
  def expected_functions(data)
    rows = Hash.new { |h, k| h[k] = [0, 0] }
    data[:aggregated_samples].each do |frames, w, *|
      next if frames.empty?

      key = ->(f) { R.name([f[0], f[1].empty? ? "(unknown)" : f[1]]) }
      rows[key.(frames[0])][0] += w
      frames.map(&key).uniq.each { |k| rows[k][1] += w }
    end
    rows
  end

  def functions(profile)
    rows, total = R.functions(profile)
    [rows.transform_keys { |k| R.name(k) }, total]
  end

  # Invalid UTF-8 is replaced by U+FFFD on the way out (both formats).
  def sanitized(data)
    fix = ->(s) { s.dup.force_encoding(Encoding::UTF_8).scrub("\u{FFFD}") }
    samples = data[:aggregated_samples].map do |frames, *rest|
      [frames.map { |p, l| [fix.(p), fix.(l)] }, *rest]
    end
    data.merge(aggregated_samples: samples)
  end

  def test_pprof_and_json_read_back_what_was_written
    %i[cpu wall].each do |mode|
      data = H.rich_profile(mode)
      want = expected_functions(sanitized(data))
      total = data[:aggregated_samples].sum { |s| s[1] }
      [["rich.pb.gz", :pprof], ["rich.pb", :pprof], ["rich.json", :json]].each do |name, format|
        path = save("#{mode}-#{name}", data, format)
        if name == "rich.pb" # not gzipped: the decoder takes both
          File.binwrite(path, Zlib.gunzip(File.binread(path)))
        end
        prof = R.load(path)
        assert_equal([format, mode.to_s, "nanoseconds"], [prof.format, prof.type, prof.unit], name)
        got, got_total = functions(prof)
        assert_equal(want, got, "#{mode} #{name}")
        assert_equal(total, got_total, "#{mode} #{name}")
        seqs = prof.data[:threads].map { |t| [t[:thread_seq], t[:ractor_id]] }
        assert_equal([[1, 1], [2, 2]], seqs, "#{mode} #{name}: threads and Ractors")
      end
      pprof = R.load(save("#{mode}-meta.pb.gz", data))
      assert_equal(1000, pprof.data[:frequency])
      assert_equal(100_000_000, pprof.data[:duration_ns])
      assert_equal([{}, { endpoint: "GET /users" }, { job: "Mailer", bad: "v\u{FFFD}" }],
                   pprof.data[:label_sets].sort_by(&:size))
    end
  end

  def test_top_table
    data = H.rich_profile(:cpu)
    out = R.top(R.load(save("rich.pb.gz", data)), limit: 3)
    lines = out.lines
    assert_equal("File: #{@dir}/rich.pb.gz\n", lines[0])
    assert_equal("Type: cpu (nanoseconds)\n", lines[1])
    assert_equal("Duration: 100ms, Total samples = 45ms (45.00%)\n", lines[2])
    assert_equal("Showing top 3 of 9 functions, accounting for 41ms (91.11% of 45ms total)\n", lines[3])
    assert_equal(%w[flat flat% sum% cum cum% function], lines[4].split)
    # Foo#bar: flat 20 + 7 ms; cum adds the 10 ms under Integer#times and 3 ms of GC.
    assert_equal(["27ms", "60.00%", "60.00%", "40ms", "88.89%", "Foo#bar", "(app.rb)"], lines[5].split)
    assert_equal(["10ms", "22.22%", "82.22%", "10ms", "22.22%", "Integer#times", "(<internal:numeric>)"],
                 lines[6].split)
    assert_equal(["4ms", "8.89%", "91.11%", "4ms", "8.89%", "Kernel#sleep", "(<C", "method>)"], lines[7].split)
    assert_equal(8, lines.size)
  end

  def test_units
    assert_equal(%w[0 999ns 1us 1.50ms 2s 1.01s 2hrs -3ms],
                 [0, 999, 1000, 1_500_000, 2_000_000_000, 1_010_000_000, 7_200_000_000_000, -3_000_000]
                   .map { |v| R.fmt(v, "nanoseconds") })
    assert_equal(%w[1.50s 2ms], [R.fmt(1500, "milliseconds"), R.fmt(2, "milliseconds")])
    assert_equal(%w[512B 1kB 1.50MB], [R.fmt(512, "bytes"), R.fmt(1024, "bytes"), R.fmt(1_572_864, "bytes")])
    assert_equal(%w[7 1234], [R.fmt(7, "count"), R.fmt(1234, "count")])
  end

  def test_filters
    data = H.rich_profile(:wall)
    prof = R.load(save("rich.pb.gz", data))
    total = ->(p) { R.functions(p)[1] }
    # thread 2: 1 + 4 + 0.001 + 7 + 50 ms
    assert_equal(62_001_000, total.(R.filter(prof, threads: [2])))
    assert_equal(62_001_000, total.(R.filter(prof, labels: { "ractor" => "2" })))
    assert_equal(62_001_000, total.(R.filter(prof, labels: { "thread_seq" => "2" })))
    assert_equal(0, total.(R.filter(prof, threads: [3])))
    # endpoint: the Integer#times sample and the GVL wait one (label set 1)
    assert_equal(12_000_000, total.(R.filter(prof, labels: { "endpoint" => "GET /users" })))
    assert_equal(0, total.(R.filter(prof, labels: { "endpoint" => "GET /users", "thread_seq" => "2" })))
    # focus / ignore match a function's name or its file
    assert_equal(55_001_000, total.(R.filter(prof, focus: /Kernel#sleep|Object#main\z|x\.rb/, ignore: /Foo/)))
    assert_equal(4_000_000, total.(R.filter(prof, focus: /\A<GC>\z/)))
    assert_equal(54_000_000, total.(R.filter(prof, focus: /Kernel#sleep/)))
    assert_equal(1_000, total.(R.filter(prof, focus: /\Ax\.rb\z/)))
    assert_equal(97_001_000 - 4_000_000, total.(R.filter(prof, ignore: /GC/)))
    filtered = R.filter(prof, focus: /sleep/, threads: [2], labels: { "job" => "Mailer" })
    assert_equal(["--focus sleep", "--thread 2", "--label job=Mailer"], filtered.filters)
    assert_match(/^Filters: --focus sleep --thread 2 --label job=Mailer$/, R.top(filtered))
    assert_match(/^No samples match the filters\.$/, R.top(R.filter(prof, threads: [9])))
  end

  def test_text_is_the_text_exporter
    data = H.rich_profile(:cpu)
    prof = R.load(save("rich.json", data))
    assert_equal(Rperf::Text.encode(sanitized(data)).sub(/^Samples: \d+, Frequency: \d+Hz$/, ""),
                 R.export(prof, :text).sub(/^Samples: \d+, Frequency: \d+Hz$/, ""))
    collapsed = R.export(R.load(save("rich.pb.gz", data)), :collapsed)
    assert_equal(Rperf::Collapsed.encode(sanitized(data)).lines.sort, collapsed.lines.sort)
  end

  # A pprof sample is a distinct stack, not a sample taken: the run's
  # sampling count travels as rperf's comment "sampling count: N", so a
  # text report of the file prints the run's Samples (a real run's, many
  # samples on few stacks; and a merge's sum), and a filtered one does
  # not claim it.
  def test_the_sampling_count_survives_pprof
    data = Rperf.start(frequency: 1000, mode: :cpu) { cpu_spin(0.05) }
    assert_operator(data[:sampling_count], :>, data[:aggregated_samples].size, "more samples than stacks")
    prof = R.load(save("run.pb.gz", data))
    assert_equal(data[:sampling_count], prof.data[:sampling_count])
    raw = Rperf._decode_pprof(File.binread(File.join(@dir, "run.pb.gz")), "run.pb.gz")
    assert_include(raw[:comments], "sampling count: #{data[:sampling_count]}")
    assert_match(/^Samples: #{data[:sampling_count]}, Frequency: 1000Hz$/, R.export(prof, :text))
    out, err, st = Open3.capture3(RbConfig.ruby, File.expand_path("../../exe/rperf", __dir__), "report", "--text",
                                  File.join(@dir, "run.pb.gz"))
    assert(st.success?, err)
    assert_match(/^Samples: #{data[:sampling_count]}, Frequency: 1000Hz$/, out)

    other = R.load(save("rich.pb.gz", H.rich_profile(:cpu)))
    assert_equal(50, other.data[:sampling_count])
    assert_equal(data[:sampling_count] + 50, R.merge([[1, prof], [2, other]]).data[:sampling_count])
    assert_nil(R.filter(prof, focus: /cpu_spin/).data[:sampling_count], "the filtered samples are not counted")
  end

  def test_diff
    f = ->(name) { ["d.rb", name] }
    base = { mode: :cpu, frequency: 100, aggregated_samples: [
      [[f.("leaf_a"), f.("main")], 10_000_000, 1, 0],
      [[f.("leaf_b"), f.("main")], 5_000_000, 1, 0],
      [[f.("gone"), f.("main")], 1_000_000, 1, 0],
    ] }
    target = { mode: :cpu, frequency: 100, aggregated_samples: [
      [[f.("leaf_a"), f.("main")], 4_000_000, 1, 0],
      [[f.("leaf_b"), f.("main")], 13_000_000, 1, 0],
      [[f.("new"), f.("main")], 2_000_000, 1, 0],
    ] }
    out = R.diff(R.load(save("base.pb.gz", base)), R.load(save("target.json", target)))
    lines = out.lines
    assert_equal("Base:   #{@dir}/base.pb.gz (cpu, 16ms total)\n", lines[0])
    assert_equal("Target: #{@dir}/target.json (cpu, 19ms total)\n", lines[1])
    assert_equal("Change: +3ms (+18.75%)\n", lines[2])
    assert_match(/\AShowing top 5 of 5 changed functions/, lines[3])
    rows = lines[5..].map(&:split)
    assert_equal([["+8ms", "+8ms", "5ms", "13ms", "leaf_b", "(d.rb)"],
                  ["-6ms", "-6ms", "10ms", "4ms", "leaf_a", "(d.rb)"],
                  ["+2ms", "+2ms", "0", "2ms", "new", "(d.rb)"],
                  ["-1ms", "-1ms", "1ms", "0", "gone", "(d.rb)"],
                  ["0", "+3ms", "0", "0", "main", "(d.rb)"]], rows)
    assert_equal(7, R.diff(R.load(save("b2.pb.gz", base)), R.load(save("t2.pb.gz", target)), limit: 2).lines.size)
    same = R.diff(R.load(save("b3.pb.gz", base)), R.load(save("b3.json", base)))
    assert_match(/^No function changed\.$/, same)
  end

  def test_unreadable_files_name_the_file
    good = File.binread(save("good.pb.gz", H.rich_profile(:cpu)))
    raw = Zlib.gunzip(good)
    cases = {
      "missing.pb.gz" => [nil, /missing\.pb\.gz: no such file/],
      "empty.pb.gz" => ["", /empty\.pb\.gz: not a readable pprof profile: no string table/],
      "garbage.pb.gz" => ["hello, this is not a profile\n" * 3, /garbage\.pb\.gz: not a readable pprof profile: /],
      "truncated.pb.gz" => [good[0, good.size / 2], /truncated\.pb\.gz: .*truncated gzip data/],
      "truncated.pb" => [raw[0, raw.size - 3], /truncated\.pb: not a readable pprof profile: /],
      "bad.json" => ["{\"shared\": ", /bad\.json: not a readable profile: invalid JSON/],
      "other.json" => ["{\"a\": 1}", /other\.json: not a readable speedscope profile: no shared frames/],
      "evented.json" => [{ shared: { frames: [{ name: "a" }] },
                           profiles: [{ type: "evented", events: [] }] }.to_json,
                         /evented\.json: .*profile 0 has type "evented"; only sampled profiles are read/],
      "index.json" => [{ shared: { frames: [{ name: "a" }] },
                         profiles: [{ type: "sampled", samples: [[0, 5]], weights: [1] }] }.to_json,
                       /index\.json: .*sample 0: frame indices must be integers below 1/],
    }
    cases.each do |name, (bytes, message)|
      path = File.join(@dir, name)
      File.binwrite(path, bytes) if bytes
      e = assert_raise(R::Error, name) { R.load(path) }
      assert_kind_of(ArgumentError, e)
      assert_match(message, e.message, name)
    end
    e = assert_raise(R::Error) { R.load(@dir) }
    assert_match(/is a directory/, e.message)
  end

  def test_text_needs_a_time_profile
    prof = R::Profile.new(file: "x.pb.gz", type: "alloc", unit: "count",
                          data: { mode: :cpu, aggregated_samples: [[[["a.rb", "a"]], 3, 0, 0]] })
    e = assert_raise(R::Error) { R.export(prof, :text) }
    assert_match(/x\.pb\.gz: --text needs a time or heap profile; this one counts count \(alloc\): use --top/, e.message)
    assert_match(/^\s+3\s+100\.00%\s+100\.00%\s+3\s+100\.00%\s+a \(a\.rb\)$/, R.top(prof))
    other = R::Profile.new(**prof.to_h, unit: "nanoseconds", file: "y.pb.gz")
    e = assert_raise(R::Error) { R.diff(prof, other) }
    assert_match(/cannot compare x\.pb\.gz \(alloc, count\) with y\.pb\.gz/, e.message)
  end

  # ---- heap profiles ----------------------------------------------------------

  ALLOC_TYPES = H::ALLOC_TYPES

  # {"label (path)" => [flat, cum]} of one allocation type, from the Hash.
  def expected_alloc_functions(data, type)
    col = 2 + ALLOC_TYPES.index(type)
    samples = data[:allocations][:samples].filter_map { |e| [e[0], e[col]] if e[col].positive? }
    expected_functions(sanitized({ aggregated_samples: samples }))
  end

  def test_heap_pprof_reads_back_every_type
    data = H.alloc_profile
    path = save("heap.pb.gz", data)
    totals = H.alloc_totals(data)
    ALLOC_TYPES.each do |t|
      prof = R.load(path, sample_index: t.to_s)
      assert_equal([:pprof, t.to_s, t.to_s.end_with?("_space") ? "bytes" : "count", true],
                   [prof.format, prof.type, prof.unit, prof.alloc?])
      got, total = functions(prof)
      assert_equal(expected_alloc_functions(data, t), got, t)
      assert_equal(totals[t], total, t)
      # the Hash keeps all four values of every entry, and the interval
      assert_equal(6, prof.data[:allocations][:samples].size)
      assert_equal(1024, prof.data[:allocations][:interval])
      assert_equal(:alloc, prof.data[:mode])
    end
    # the file's default type: the one it was written with (inuse_space)
    assert_equal("inuse_space", R.load(path).type)
    assert_equal("alloc_objects", R.load(save("ao.pb.gz", data.merge(x: 1)).then do |p|
      Rperf.save(p, data, sample_type: :alloc_objects)
      p
    end).type)
    e = assert_raise(R::Error) { R.load(path, sample_index: "time") }
    assert_equal("#{path}: no time sample type in this profile (its types: alloc_objects/count, " \
                 "alloc_space/bytes, inuse_objects/count, inuse_space/bytes)", e.message)
    cpu = save("cpu.pb.gz", H.rich_profile)
    assert_equal("cpu", R.load(cpu, sample_index: "time").type)
    e = assert_raise(R::Error) { R.load(cpu, sample_index: "alloc_space") }
    assert_match(/cpu\.pb\.gz: no alloc_space sample type in this profile \(its types: cpu\/nanoseconds\)/, e.message)
  end

  def test_heap_report_top_filter_export_diff
    data = H.alloc_profile
    path = save("heap.pb.gz", data)
    prof = R.load(path, sample_index: "alloc_objects")
    out = R.top(prof)
    assert_match(/^Type: alloc_objects \(count\)$/, out)
    assert_match(/^\s+3072\s+37\.50%\s+37\.50%\s+5120\s+62\.50%\s+Foo#bar \(app\.rb\)$/, out)
    space = R.load(path, sample_index: "inuse_space")
    assert_match(/^Showing top \d+ of \d+ functions, accounting for 2\.06MB \(100\.00% of 2\.06MB total\)$/, R.top(space))
    # --label class=… selects allocations by class; thread and label sets too
    by_class = R.filter(prof, labels: { "class" => "String" })
    assert_equal(3072, functions(by_class)[1])
    assert_equal(1024, functions(R.filter(prof, labels: { "class" => "MyApp::User" }))[1])
    assert_equal(1024 + 1024, functions(R.filter(prof, threads: [2], labels: { "job" => "Mailer" }))[1])
    assert_equal(0, functions(R.filter(prof, labels: { "class" => "Nope" }))[1])
    # every exporter encodes the chosen type; pprof keeps all four values
    assert_match(/\ATotal: 8192 objects \(alloc_objects\)\n/, R.export(prof, :text))
    assert_match(/\ATotal: 2\.1 MiB \(inuse_space\)\n/, R.export(space, :text))
    assert_equal(Rperf::Collapsed.encode(data, sample_type: :alloc_objects), R.export(prof, :collapsed))
    raw = Rperf._decode_pprof(R.export(by_class, :pprof), "x")
    assert_equal(["alloc_objects", [[3072, 122_880, 1024, 40_960]]],
                 [raw[:default_sample_type], raw[:samples].map { |_, v, _| v }])
    assert_match(/"sample_type":"alloc_objects"/, R.export(prof, :html))
    # diff: same type only
    out = R.diff(prof, R.load(path, sample_index: "alloc_objects"))
    assert_match(/^No function changed\.$/, out)
    e = assert_raise(R::Error) { R.diff(prof, R.load(path, sample_index: "inuse_objects")) }
    assert_match(/cannot compare .* \(alloc_objects, count\) with .* \(inuse_objects, count\)/, e.message)
  end

  # The rperf command merges the heap profiles of its processes: every
  # value of every entry kept, a pid label each, written again as a heap
  # profile.
  def test_merge_heap_profiles
    a = R.load(save("a.pb.gz", H.alloc_profile))
    b = R.load(save("b.pb.gz", H.alloc_profile))
    merged = R.merge([[100, a], [200, b]])
    assert_equal(["inuse_space", true, :alloc], [merged.type, merged.alloc?, merged.data[:mode]])
    entries = merged.data[:allocations][:samples]
    assert_equal(12, entries.size)
    sums = (0..3).map { |i| entries.sum { |e| e[2 + i] } }
    assert_equal(H.alloc_totals(H.alloc_profile).values.map { |v| v * 2 }, sums)
    pids = entries.map { |e| merged.data[:label_sets][e[7]][:pid] }
    assert_equal([100] * 6 + [200] * 6, pids)
    assert_equal([1, 2, 3, 4], entries.map { |e| e[6] }.uniq.sort, "thread_seqs of each process kept apart")
    raw = Rperf._decode_pprof(Rperf::PProf.encode(merged.data), "m")
    assert_equal(["inuse_space", 4, 12], [raw[:default_sample_type], raw[:sample_types].size, raw[:samples].size])
    assert_equal([100, 200], raw[:samples].map { |_, _, l| l["pid"] }.uniq)
    e = assert_raise(R::Error) { R.merge([[1, a], [2, R.load(save("t.pb.gz", H.rich_profile))]]) }
    assert_match(/cannot merge/, e.message)
  end

  # Two parts of one process (a window, then its end): the allocations of
  # both add up, the objects in use are the newest part's (each part holds
  # the process's whole live heap at its end).
  def test_merge_heap_parts_of_one_process_keep_the_newest_in_use
    a = R.load(save("w1.pb.gz", H.alloc_profile))
    b = R.load(save("end.pb.gz", H.alloc_profile))
    entries = R.merge([[100, a], [100, b]]).data[:allocations][:samples]
    one = H.alloc_totals(H.alloc_profile).values
    sums = (0..3).map { |i| entries.sum { |e| e[2 + i] } }
    assert_equal([one[0] * 2, one[1] * 2, one[2], one[3]], sums)
  end

  # speedscope JSON holds one type: read back as a heap profile of it.
  def test_alloc_json_reads_back
    data = H.alloc_profile
    path = save("heap.json", data, :json)
    prof = R.load(path)
    assert_equal([:json, "inuse_space", "bytes", true], [prof.format, prof.type, prof.unit, prof.alloc?])
    assert_equal(expected_alloc_functions(data, :inuse_space), functions(prof)[0])
    assert_match(/\ATotal: 2\.1 MiB \(inuse_space\)\n/, R.export(prof, :text))
    Rperf.save(path, data, sample_type: :alloc_objects)
    assert_equal(["alloc_objects", "count"], [R.load(path).type, R.load(path).unit])
    assert_equal("alloc_objects", R.load(path, sample_index: "alloc_objects").type)
    e = assert_raise(R::Error) { R.load(path, sample_index: "inuse_space") }
    assert_match(/heap\.json: no inuse_space sample type in this profile \(its type: alloc_objects\)/, e.message)
  end
end
