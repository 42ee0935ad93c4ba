# frozen_string_literal: true

# bench/alloc.rb — what allocation sampling costs (a measurement, not a
# test: it asserts nothing; every figure is a ratio of runs made side by
# side in this process).
#
# Part 1, overhead. Workloads (deterministic, one process):
#   gc         250,000 iterations allocating 9 Strings, an Array, a Hash
#   strbuild   a String builder: 400,000 interpolations appended to a buffer
#   hashchurn  200,000 small Hashes built, read and dropped
#   threads4   4 threads running gc at a quarter of its length each
# Each round runs, for every configuration in turn, the workload unprofiled
# (U) and then with the configuration (P); the figures are medians over
# the rounds of each P against the U just before it, after one discarded
# warm-up pair per configuration, so every configuration meets the same
# drifts of the machine. Configurations:
#   hook           an empty NEWOBJ hook (bench/floor_tick.c): with any such
#                  hook Ruby sends every allocation through its slow path
#                  and the hook dispatch — the floor of every allocation
#                  profiler built on Ruby's hook, rperf's included
#   rperf          Rperf.start(mode: :alloc), the default interval
#   rperf/1        alloc_interval: 1 (every allocation sampled)
#   stackprof      StackProf.run(mode: :object, interval: the default)
#   stackprof/1    interval: 1
#   vernier        Vernier.profile(allocation_interval: the default) — it
#                  samples time too (its timer thread at its slowest
#                  setting here, 100 ms)
#   vernier/1      allocation_interval: 1
# stackprof and vernier are the pinned gems script/setup installs into the
# cache (tests/ruby/servers_helper.rb); missing ones are left out.
# Only the workload is timed: each profiler is started before and stopped
# (its result built) after the measured span, as in an application that
# runs profiled. Columns: wall and process CPU overhead of P over U;
# "above hook": wall overhead above the hook's in the same round
# (percentage points, median); GC: GC time of P ÷ U (GC.stat's time, in
# the span); ns/sample: (CPU P − CPU U) / sampled allocations (every
# allocation for the /1 configurations, allocations / interval
# otherwise: GC.stat's counts), which for the sampling configurations
# includes the hook's floor spread over their few samples.
#
# Part 2, the live heap: 300,000 objects kept alive and sampled at every
# allocation (300,000 tracked) or at the default interval; then minor GCs
# (GC.start(full_mark: false)) and major GCs timed, median of 15 each,
# profiled vs unprofiled, interleaved; and the tracker's bytes per tracked
# object (profiler_memory_bytes growth / objects tracked).
#
# Run (script/ruby puts the built extension on the load path):
#   script/ruby bench/alloc.rb                 # 5 rounds
#   script/ruby bench/alloc.rb --yjit          # the same under YJIT
#   script/ruby bench/alloc.rb --rounds=3 --scale=0.5 --workloads=gc,strbuild
# Smoke run (numbers meaningless): --rounds=1 --scale=0.05

require "rperf"
require_relative "floor_tick"
require_relative "../tests/ruby/servers_helper"

module AllocBench
  OPTS = { rounds: 5, scale: 1.0, workloads: %w[gc strbuild hashchurn threads4], yjit: false }
  ARGV.each do |a|
    case a
    when /\A--rounds=(\d+)\z/ then OPTS[:rounds] = Integer(Regexp.last_match(1))
    when /\A--scale=([\d.]+)\z/ then OPTS[:scale] = Float(Regexp.last_match(1))
    when /\A--workloads=(.+)\z/ then OPTS[:workloads] = Regexp.last_match(1).split(",")
    when "--yjit" then OPTS[:yjit] = true
    else abort "bench/alloc.rb: unknown argument #{a.inspect}"
    end
  end
  if OPTS[:yjit] && !(defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled?)
    exec(RbConfig.ruby, "--yjit", *$LOAD_PATH.flat_map { |d| ["-I", d] }, __FILE__,
         *ARGV.reject { |a| a == "--yjit" }, "--yjit")
  end

  module_function

  def scaled(n) = [(n * OPTS[:scale]).round, 1].max

  def gc_work(n)
    i = 0
    while i < n
      a = "a#{i}"
      b = "b#{i}"
      c = a + b
      d = c * 2
      e = d.upcase
      f = "#{e}-#{a}"
      g = f.reverse
      h = g.downcase
      k = h[1, 4]
      [a, b, c, d, e, f, g, h, k]
      { a => k }
      i += 1
    end
  end

  WORKLOADS = {
    "gc" => -> { gc_work(scaled(250_000)) },
    "strbuild" => lambda {
      buf = +""
      scaled(400_000).times { |i| buf << "item #{i}, " }
      buf.bytesize
    },
    "hashchurn" => lambda {
      scaled(200_000).times do |i|
        h = { id: i, name: "n#{i}", tags: [i, i + 1] }
        h[:name].size + h[:tags].sum
      end
    },
    "threads4" => -> { 4.times.map { Thread.new { gc_work(scaled(62_500)) } }.each(&:join) }
  }.freeze

  def load_peers
    dir = RperfServers.gem_dir
    Gem.use_paths(nil, [dir, *Gem.path]) if File.directory?(dir)
    peers = {}
    %w[stackprof vernier].each do |name|
      require name
      peers[name] = true
    rescue LoadError => e
      warn "bench/alloc.rb: #{name} left out (#{e.message.lines.first.strip})"
    end
    peers
  end

  def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  def cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
  def allocated = GC.stat(:total_allocated_objects)

  def gc_ms = GC.stat(:time)

  # -> [wall s, cpu s, allocations, GC ms]
  def measure
    a0 = allocated
    g0 = gc_ms
    w0 = now
    c0 = cpu
    yield
    [now - w0, cpu - c0, allocated - a0, gc_ms - g0]
  end

  # name -> [run(&work) -> measure of the work alone, interval]
  def configs(peers)
    iv = Rperf::DEFAULT_ALLOC_INTERVAL
    c = {}
    if FloorTick.available?
      c["hook"] = [->(&b) { FloorTick.newobj { measure(&b) } }, 0]
    end
    rperf = lambda do |interval|
      lambda do |&b|
        Rperf.start(mode: :alloc, alloc_interval: interval)
        m = measure(&b)
        Rperf.stop
        m
      end
    end
    c["rperf"] = [rperf.call(iv), iv]
    c["rperf/1"] = [rperf.call(1), 1]
    if peers["stackprof"]
      stackprof = lambda do |interval|
        lambda do |&b|
          StackProf.start(mode: :object, interval: interval)
          m = measure(&b)
          StackProf.stop
          StackProf.results
          m
        end
      end
      c["stackprof"] = [stackprof.call(iv), iv]
      c["stackprof/1"] = [stackprof.call(1), 1]
    end
    if peers["vernier"]
      vernier = lambda do |interval|
        lambda do |&b|
          Vernier.start_profile(interval: 100_000, allocation_interval: interval)
          m = measure(&b)
          Vernier.stop_profile
          m
        end
      end
      c["vernier"] = [vernier.call(iv), iv]
      c["vernier/1"] = [vernier.call(1), 1]
    end
    c
  end

  def median(a)
    s = a.sort
    s.empty? ? Float::NAN : (s[(s.size - 1) / 2] + s[s.size / 2]) / 2.0
  end

  def part1(cfgs)
    puts "## Overhead (median of #{OPTS[:rounds]} rounds; each P against the U just before it)"
    puts
    puts "| workload | config | wall | CPU | above hook | GC | ns/sample |"
    puts "|---|---|---|---|---|---|---|"
    OPTS[:workloads].each do |wname|
      work = WORKLOADS.fetch(wname)
      rows = Hash.new { |h, k| h[k] = { wall: [], cpu: [], ns: [], gc: [] } }
      hook_wall = []
      (OPTS[:rounds] + 1).times do |round|
        cfgs.each do |name, (run, iv)|
          u = measure { work.call }
          p = run.call { work.call }
          next if round.zero?

          rows[name][:wall] << p[0] / u[0] - 1
          rows[name][:cpu] << p[1] / u[1] - 1
          rows[name][:gc] << p[3].fdiv(u[3]) if u[3].positive?
          samples = iv.zero? ? 0 : p[2].fdiv(iv)
          rows[name][:ns] << (p[1] - u[1]) * 1e9 / samples if samples.positive?
          hook_wall << p[0] / u[0] - 1 if name == "hook"
          rows[name][:above] = (rows[name][:above] || []) << (p[0] / u[0] - 1 - (name == "hook" ? 0 : (hook_wall.last || 0)))
        end
      end
      cfgs.each_key do |name|
        r = rows[name]
        above = name == "hook" || !cfgs.key?("hook") ? "–" : format("%+.1f pp", 100 * median(r[:above]))
        ns = r[:ns].empty? ? "–" : format("%.0f", median(r[:ns]))
        gc = r[:gc].empty? ? "–" : format("%.2fx", median(r[:gc]))
        printf("| %s | %s | %+.1f %% | %+.1f %% | %s | %s | %s |\n", wname, name, 100 * median(r[:wall]),
               100 * median(r[:cpu]), above, gc, ns)
      end
    end
    puts
  end

  def keep_objects(keep, n) = n.times { |i| keep << [i] }

  def gc_times(full)
    Array.new(15) do
      t = now
      GC.start(full_mark: full, immediate_sweep: true)
      now - t
    end
  end

  def part2
    n = scaled(300_000)
    puts "## The live heap: #{n} objects kept, minor and major GC (median of 15, ms)"
    puts
    puts "| tracked | minor GC off | minor GC on | ratio | major GC off | major GC on | ratio | bytes/tracked |"
    puts "|---|---|---|---|---|---|---|---|"
    [1, Rperf::DEFAULT_ALLOC_INTERVAL].each do |iv|
      off_minor = []
      on_minor = []
      off_major = []
      on_major = []
      per_obj = nil
      tracked = 0
      3.times do
        keep = []
        keep_objects(keep, n)
        off_minor << median(gc_times(false))
        off_major << median(gc_times(true))
        keep = nil
        GC.start
        Rperf.start(mode: :alloc, alloc_interval: iv)
        m0 = Rperf.snapshot[:profiler_memory_bytes]
        keep = []
        keep_objects(keep, n)
        on_minor << median(gc_times(false))
        on_major << median(gc_times(true))
        d = Rperf.stop
        tracked = d[:allocations][:live]
        per_obj = (d[:profiler_memory_bytes] - m0).fdiv([tracked, 1].max)
        keep = nil
        GC.start
      end
      printf("| %d (1 in %d) | %.2f | %.2f | %.2fx | %.2f | %.2f | %.2fx | %.0f |\n", tracked, iv,
             1e3 * median(off_minor), 1e3 * median(on_minor), median(on_minor) / median(off_minor),
             1e3 * median(off_major), 1e3 * median(on_major), median(on_major) / median(off_major), per_obj)
    end
    puts
  end

  def main
    peers = load_peers
    puts "# bench/alloc.rb #{ARGV.join(' ')}"
    puts "#{RUBY_DESCRIPTION}; rounds=#{OPTS[:rounds]} scale=#{OPTS[:scale]}"
    puts
    part1(configs(peers))
    part2
  end
end

AllocBench.main
