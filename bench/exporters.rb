# frozen_string_literal: true

# bench/exporters.rb — encode time, output size and memory of each exporter
# on synthetic profiles of 1k, 10k and 100k unique stacks (depth 20–40,
# 5,000 distinct frames, 4 threads, a few label sets). Not a test.
#
#   script/ruby bench/exporters.rb [SIZES…]     e.g. script/ruby bench/exporters.rb 100000
#
# Each figure is the best of 3 runs of the public encoder on a Ruby result
# Hash (conversion Hash -> C view included). The "threads" example exporter
# does almost no work, so its time approximates the conversion alone; the
# difference to it is the C encoding proper (what engine data, which needs
# no conversion, will cost). "pprof file" = Rperf.save to .pb.gz (gzip level
# 6 + atomic write). Targets at 100k stacks: pprof <= 0.8 s, text <= 0.6 s,
# collapsed <= 0.15 s.

require "rperf"
require "tmpdir"

def rss_kb(key = "VmRSS")
  File.read("/proc/self/status")[/^#{key}:\s+(\d+)/, 1].to_i
rescue StandardError
  0
end

def build_profile(stacks, seed: 1)
  rng = Random.new(seed)
  frames = (0...5000).map do |i|
    [-"lib/app/file#{i % 300}.rb", -"App::Mod#{i % 97}::Klass#{i % 41}#method_#{i}"]
  end
  samples = Array.new(stacks) do |i|
    depth = 20 + rng.rand(21)
    [Array.new(depth) { frames[rng.rand(5000)] }, 1_000 + rng.rand(50_000_000), 1 + (i % 4), i % 5]
  end
  {
    mode: :cpu, frequency: 1000, sampling_count: stacks * 3,
    start_time_ns: 1_700_000_000_000_000_000, duration_ns: 60_000_000_000,
    aggregated_samples: samples,
    label_sets: [{}, { endpoint: "GET /a" }, { endpoint: "GET /b" }, { job: "X" }, { job: "Y" }],
    threads: (1..4).map { |t| { thread_seq: t, ractor_id: 1, name: "t#{t}", native_tid: 1000 + t } },
  }
end

def best_of(n = 3)
  times = Array.new(n) do
    GC.start
    t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    out = yield
    [Process.clock_gettime(Process::CLOCK_MONOTONIC) - t, out]
  end
  times.min_by(&:first)
end

sizes = ARGV.empty? ? [1_000, 10_000, 100_000] : ARGV.map(&:to_i)
targets = { "pprof" => 0.8, "text" => 0.6, "collapsed" => 0.15 }
dir = Dir.mktmpdir("rperf-bench")
puts "ruby #{RUBY_VERSION}, rperf #{Rperf::VERSION}"
sizes.each do |n|
  data = build_profile(n)
  nframes = data[:aggregated_samples].sum { |s| s[0].size }
  puts
  puts "#{n} unique stacks, #{nframes} frames (RSS #{rss_kb / 1024} MB after building the Hash)"
  printf("  %-22s %9s %12s %12s %s\n", "exporter", "seconds", "output", "RSS delta", "")
  runs = {
    "threads (≈conversion)" => -> { Rperf._encode("threads", data, nil) },
    "pprof" => -> { Rperf::PProf.encode(data) },
    "pprof file (.pb.gz)" => lambda {
      path = File.join(dir, "p.pb.gz")
      Rperf.save(path, data)
      File.size(path)
    },
    "collapsed" => -> { Rperf::Collapsed.encode(data) },
    "json" => -> { Rperf::JSON.encode(data) },
    "text" => -> { Rperf::Text.encode(data) },
  }
  runs.each do |name, fn|
    before = rss_kb
    secs, out = best_of { fn.call }
    size = out.is_a?(String) ? out.bytesize : out
    target = targets[name]
    note = target && n == 100_000 ? (secs <= target ? "target #{target}s: met" : "target #{target}s: MISSED") : ""
    printf("  %-22s %9.3f %10.1fMB %10.1fMB %s\n", name, secs, size / 1e6, (rss_kb - before) / 1024.0, note)
  end
  printf("  peak RSS so far: %.1f MB\n", rss_kb("VmHWM") / 1024.0)
end
FileUtils.rm_rf(dir)
