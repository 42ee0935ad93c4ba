# frozen_string_literal: true

# bench/exporters.rb — encode time, output size and memory of each exporter,
# from a Ruby result Hash and from the engine's data. Not a test.
#
#   script/ruby bench/exporters.rb [SIZES…]     e.g. script/ruby bench/exporters.rb 100000
#   RPERF_BENCH_REAL_SECONDS=0 script/ruby bench/exporters.rb   (skip part 2)
#
# 1. Synthetic profiles of 1k, 10k and 100k unique stacks (depth 20–40,
#    5,000 distinct frames, 4 threads, a few label sets), as result Hashes.
#    Each figure is the best of 3 runs of the public encoder (conversion
#    Hash -> C view included; to memory, except "pprof file" = Rperf.save
#    to .pb.gz: gzip level 6 + atomic write). The "threads" example exporter
#    does almost no work, so its time approximates the conversion alone;
#    "engine≈" is the time minus that conversion. The engine's data cannot
#    be filled with synthetic stacks from Ruby (it holds real frames, and the
#    core has no API to inject samples), so part 2 measures the engine path
#    for real. Targets at 100k stacks: pprof <= 0.8 s, text <= 0.6 s,
#    collapsed <= 0.15 s.
# 2. A real profile (10 kHz, cpu mode, random call chains of depth 20–40
#    over 300 methods, RPERF_BENCH_REAL_SECONDS of CPU, default 2): at stop,
#    while the engine still holds its data, each C exporter writes a file
#    from the engine's data (what Rperf.stop does) and from the result Hash.

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
  printf("  %-22s %9s %9s %12s %12s %s\n", "exporter", "seconds", "engine≈", "output", "RSS delta", "")
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
  conversion = nil
  runs.each do |name, fn|
    before = rss_kb
    secs, out = best_of { fn.call }
    conversion ||= secs
    size = out.is_a?(String) ? out.bytesize : out
    target = targets[name]
    note = target && n == 100_000 ? (secs <= target ? "target #{target}s: met" : "target #{target}s: MISSED") : ""
    printf("  %-22s %9.3f %9.3f %10.1fMB %10.1fMB %s\n", name, secs, [secs - conversion, 0].max,
           size / 1e6, (rss_kb - before) / 1024.0, note)
  end
  printf("  peak RSS so far: %.1f MB\n", rss_kb("VmHWM") / 1024.0)
end

# ---- 2. a real profile, from the engine's data and from the Hash ----------

module BenchDeep
  N = 300
  NAMES = (0...N).map { |i| :"m#{i}" }.freeze
  N.times do |i|
    module_eval <<~RUBY, "bench/deep#{i % 30}.rb", i
      def self.m#{i}(depth, seed)
        return leaf(seed) if depth.zero?
        seed = (seed * 1_103_515_245 + 12_345) & 0x7fffffff
        public_send(NAMES[seed % N], depth - 1, seed)
      end
    RUBY
  end

  def self.leaf(seed)
    x = seed
    40.times { x = (x * 31 + 7) & 0xffff }
    x
  end
end

# Times both paths from inside Rperf.stop, where the engine's data is live.
module BenchAtStop
  class << self
    attr_accessor :results, :dir
  end

  def __export_at_stop(data, path, name)
    BenchAtStop.results = %w[pprof collapsed json text].map do |exp|
      file = File.join(BenchAtStop.dir, "real.#{exp}")
      engine, = best_of { Rperf._c_export_engine(exp, file, data) }
      size = File.size(file)
      hash, = best_of { Rperf._encode_file(exp, data, file) }
      [exp, engine, hash, size]
    end
    super
  end
end

seconds = Float(ENV.fetch("RPERF_BENCH_REAL_SECONDS", "2"))
if seconds.positive?
  Rperf.singleton_class.prepend(BenchAtStop)
  BenchAtStop.dir = dir
  rng = Random.new(7)
  data = Rperf.start(frequency: 10_000, mode: :cpu, output: File.join(dir, "stop.collapsed")) do
    t0 = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
    BenchDeep.m0(20 + rng.rand(21), rng.rand(1 << 30)) while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t0 < seconds
  end
  nframes = data[:aggregated_samples].sum { |s| s[0].size }
  puts
  puts "real profile (#{seconds} s CPU at 10 kHz): #{data[:aggregated_samples].size} unique stacks, " \
       "#{nframes} frames, #{data[:unique_frames]} distinct frames; files written at stop"
  printf("  %-22s %12s %12s %12s\n", "exporter", "engine data", "result Hash", "output")
  BenchAtStop.results.each do |exp, engine, hash, size|
    printf("  %-22s %12.4f %12.4f %10.2fMB\n", exp, engine, hash, size / 1e6)
  end
end
FileUtils.rm_rf(dir)
