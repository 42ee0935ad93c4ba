# frozen_string_literal: true

# bench/overhead.rb — what does rperf cost per sample? (a measurement, not a test)
#
# For each workload (fib, deep, threads, gc, ractors) × frequency (1 kHz, 10 kHz) ×
# backend (:signal, :nanosleep) × mode (:cpu, :wall), runs the workload
# unprofiled and profiled in interleaved rounds (U P U P …, after one
# discarded warm-up pair) and reports medians of:
#   - process CPU time (CLOCK_PROCESS_CPUTIME_ID: every thread of the process,
#     so the profiler's worker and timer threads and all signal handling are
#     included) and wall time (CLOCK_MONOTONIC);
#   - CPU ns per sample = (profiled CPU − unprofiled CPU) / sampling_count,
#     computed per round (each profiled run against the unprofiled run just
#     before it), then the median over rounds;
#   - the profiler's own figure sampling_time_ns / sampling_count (time spent
#     inside the sampling job only), samples, triggers, dropped samples (all
#     medians per profiled run); "(min..max)" is the spread of the per-round
#     CPU ns/sample values.
# The measured window is Rperf.start … workload … (end of workload); the cost
# of Rperf.stop (final drain, building the result Hash) is reported apart in
# the "stop ms" column because it depends on the number of distinct stacks,
# not on the number of samples.
#
# Run:
#   script/ruby bench/overhead.rb              # full: 5 rounds (~4–6 min on 2 vCPU)
#   script/ruby bench/overhead.rb --quick      # 3 rounds, half-length workloads (~1.5 min)
# Options (ARGV or ENV):
#   --rounds=N        | RPERF_BENCH_ROUNDS    rounds per configuration (default 5, quick 3)
#   --quick           | RPERF_BENCH_QUICK=1   fewer rounds, workloads scaled by 0.5
#   --scale=F         | RPERF_BENCH_SCALE     workload length factor (default 1.0)
#   --workloads=LIST  | RPERF_BENCH_WORKLOADS e.g. fib,gc or threads4,threads64
#                                             (threadsN = N threads; "threads" = 16;
#                                             ractorsN = N Ractors; "ractors" = 8)
#   --frequencies=LIST| RPERF_BENCH_FREQUENCIES  default 1000,10000
#   --backends=LIST   | RPERF_BENCH_BACKENDS  default signal,nanosleep
#   --modes=LIST      | RPERF_BENCH_MODES     default cpu,wall
#   --markdown        | RPERF_BENCH_MARKDOWN=1  print the table as Markdown too
#
# The workloads are deterministic (fixed inputs) and sized so that one
# unprofiled run takes about 0.3–0.5 s on the reference machine (2 vCPU,
# Ruby 3.3 without YJIT) at scale 1.0.

require "rperf"
require "tmpdir"

module OverheadBench
  # --- workloads -------------------------------------------------------------

  module Work
    module_function

    # Naive Fibonacci: recursion depth ~n.
    def fib(n)
      n < 2 ? n : fib(n - 1) + fib(n - 2)
    end

    # Recurse `depth` frames, then do CPU work at the bottom (deep stacks make
    # each sample's rb_profile_frames walk longer).
    def deep(depth, reps)
      return reps.times.sum { fib(22) } if depth.zero?

      deep(depth - 1, reps)
    end

    # `threads` threads share the same total CPU work (fib(25) units); they
    # contend for the GVL, so only one runs at a time.
    def threads(count, units)
      per = [units / count, 1].max
      Array.new(count) { Thread.new { per.times.sum { fib(25) } } }.sum(&:value)
    end

    # `count` Ractors share the same total CPU work (fib(25) units); unlike
    # threads they run in parallel, each holding its own GVL.
    def ractors(count, units)
      per = [units / count, 1].max
      Array.new(count) { Ractor.new(per) { |k| k.times.sum { Work.fib(25) } } }.sum(&:take)
    end

    # Allocation-heavy: short-lived strings, arrays and hashes (mostly minor GCs).
    def gc(n)
      kept = []
      n.times do |i|
        row = Array.new(8) { |k| "s#{i}-#{k}" }
        h = { id: i, row: row }
        kept << h if (i % 500).zero?
      end
      kept.size
    end

    # `count` threads pass one token round a ring of Queues, `handoffs` times
    # in all: every hand-off is one GVL switch (the popper blocks, the pusher
    # wakes the next). Returns the number of GVL hand-offs.
    def switch(count, handoffs)
      queues = Array.new(count) { Thread::Queue.new }
      threads = Array.new(count) do |i|
        Thread.new do
          loop do
            n = queues[i].pop
            queues[(i + 1) % count] << (n.positive? ? n - 1 : -1)   # 0 starts the stop round
            break if n.negative?
          end
        end
      end
      queues[0] << handoffs
      threads.each(&:join)
      handoffs
    end

    # `pairs` pairs of threads bounce one byte through two pipes, `rounds`
    # times each: every read blocks outside the GVL. Returns the number of
    # blocking reads (≈ GVL switches).
    def io(pairs, rounds)
      pipes = Array.new(pairs) { IO.pipe + IO.pipe }
      threads = pipes.flat_map do |a_r, a_w, b_r, b_w|
        [Thread.new { rounds.times { a_r.read(1); b_w.write("x") } },
         Thread.new { rounds.times { a_w.write("x"); b_r.read(1) } }]
      end
      threads.each(&:join)
      pipes.flatten.each(&:close)
      pairs * rounds * 2
    end

    # The accuracy workload: GVL-releasing C calls (IO.select with a timeout,
    # sleep) and GVL-holding ones (String#count / String#sum on a large
    # string: C loops with no interrupt check), each in a method of its own,
    # in a loop with a varying Ruby gap between calls so that the sampling
    # phase varies. Returns { method => wall ns measured around its calls }.
    def acc_select = IO.select(nil, nil, nil, 0.0013)
    def acc_sleep = sleep(0.0017)
    def acc_hold_count = HOLD.count("a")
    def acc_hold_sum = HOLD.sum
    def acc_gap(n)
      x = 0
      n.times { |i| x += i }
      x
    end

    ACC_METHODS = %i[acc_select acc_sleep acc_hold_count acc_hold_sum].freeze
    ACC_RELEASING = %i[acc_select acc_sleep].freeze
    HOLD = ("abcdefgh" * 1_000_000).freeze   # 8 MB: each call ~1.5–3 ms of C holding the GVL

    def accuracy(calls)
      now = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) }
      spent = Hash.new(0)
      calls.times do |k|
        ACC_METHODS.each do |m|
          acc_gap(((k * 7919 + m.size * 104_729) % 97) * 40)
          t0 = now.()
          send(m)
          spent[m] += now.() - t0
        end
      end
      spent
    end
  end

  # name => lambda(scale) returning a callable that runs one round (and
  # returns the number of GVL hand-offs it made, for switch/io).
  WORKLOADS = {
    "fib" => ->(s) { n = [(6 * s).round, 1].max; -> { n.times { Work.fib(30) }; nil } },
    "deep" => ->(s) { r = [(160 * s).round, 1].max; -> { Work.deep(150, r); nil } },
    "gc" => ->(s) { n = (250_000 * s).round; -> { Work.gc(n); nil } },
    "switch" => ->(s) { n = [(20_000 * s).round, 8].max; -> { Work.switch(8, n) } },
    "io" => ->(s) { n = [(1_500 * s).round, 1].max; -> { Work.io(8, n) } },
  }.freeze

  # 1,000 threads parked on a Queue: each wakes once per run (so the profiler
  # meets it), then the main thread computes `fib` as in "fib".
  def self.idle_workload(count, scale)
    park = Thread::Queue.new
    parked = Thread::Queue.new
    count.times { Thread.new { loop { park.pop; parked << 1 } } }
    n = [(6 * scale).round, 1].max
    lambda do
      count.times { park << 1 }
      count.times { parked.pop }
      n.times { Work.fib(30) }
      nil
    end
  end

  def self.workload(name, scale)
    if (m = /\Athreads(\d*)\z/.match(name))
      count = m[1].empty? ? 16 : Integer(m[1])
      units = [(64 * scale).round, count].max
      return -> { Work.threads(count, units); nil }
    end
    if (m = /\Aidle(\d+)\z/.match(name))
      return idle_workload(Integer(m[1]), scale)
    end
    if (m = /\Aractors(\d*)\z/.match(name))
      Warning[:experimental] = false
      count = m[1].empty? ? 8 : Integer(m[1])
      units = [(64 * scale).round, count].max
      return -> { Work.ractors(count, units); nil }
    end
    WORKLOADS.fetch(name) { abort "unknown workload #{name.inspect} (fib, deep, gc, switch, io, threads, threadsN, idleN, ractors, ractorsN)" }.call(scale)
  end

  # --- options ---------------------------------------------------------------

  def self.options(argv)
    opt = {}
    argv.each do |a|
      case a
      when "--quick" then opt[:quick] = true
      when "--markdown" then opt[:markdown] = true
      when /\A--(rounds|scale|workloads|frequencies|backends|modes|accuracy)=(.+)\z/ then opt[Regexp.last_match(1).to_sym] = Regexp.last_match(2)
      when "-h", "--help" then puts File.read(__FILE__)[/\A(#.*\n)+/]; exit 0
      else abort "unknown argument #{a.inspect} (see --help)"
      end
    end
    env = ->(k) { ENV["RPERF_BENCH_#{k.to_s.upcase}"] }
    quick = opt[:quick] || env.(:quick) == "1"
    list = ->(k, default) { (opt[k] || env.(k) || default).split(",").map(&:strip).reject(&:empty?) }
    {
      quick: quick,
      rounds: Integer(opt[:rounds] || env.(:rounds) || (quick ? 3 : 5)),
      scale: Float(opt[:scale] || env.(:scale) || 1.0) * (quick ? 0.5 : 1.0),
      workloads: list.(:workloads, "fib,deep,gc,switch,io,idle1000"),
      frequencies: list.(:frequencies, "1000,10000").map { |f| Integer(f) },
      backends: list.(:backends, Rperf.backends.join(",")).map(&:to_sym),
      modes: list.(:modes, "cpu,wall").map(&:to_sym),
      accuracy: Integer(opt[:accuracy] || env.(:accuracy) || (quick ? 60 : 120)),
      markdown: opt[:markdown] || env.(:markdown) == "1",
    }
  end

  # --- measurement -------------------------------------------------------------

  def self.now_cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID, :nanosecond)
  def self.now_wall = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)

  def self.median(values)
    s = values.compact.sort
    return Float::NAN if s.empty?

    n = s.size
    n.odd? ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2.0
  end

  # One unprofiled run: { cpu:, wall:, switches: } (ns).
  def self.run_plain(work)
    GC.start
    c0 = now_cpu
    w0 = now_wall
    switches = work.call
    { cpu: now_cpu - c0, wall: now_wall - w0, switches: switches }
  end

  # One profiled run: the window covers start + workload; stop is timed apart.
  def self.run_profiled(work, freq, backend, mode)
    GC.start
    c0 = now_cpu
    w0 = now_wall
    Rperf.start(frequency: freq, backend: backend, mode: mode)
    switches = work.call
    cpu = now_cpu - c0
    wall = now_wall - w0
    s0 = now_cpu
    data = Rperf.stop
    { cpu: cpu, wall: wall, stop_cpu: now_cpu - s0, switches: switches,
      samples: data[:sampling_count], triggers: data[:trigger_count],
      dropped: data[:dropped_samples] || 0, sampling_time: data[:sampling_time_ns],
      memory: data[:profiler_memory_bytes], threads: data[:detected_thread_count] }
  end

  # Interleaved rounds for one (workload, frequency, mode): each round runs,
  # for every backend in turn, an unprofiled run then a profiled one, so all
  # backends meet the same drifts of the machine. Returns backend => row.
  def self.measure(work, freq, backends, mode, rounds)
    backends.each { |b| run_plain(work); run_profiled(work, freq, b, mode) } # warm-up (discarded)
    pairs = backends.to_h { |b| [b, []] }
    rounds.times do
      backends.each { |b| pairs[b] << [run_plain(work), run_profiled(work, freq, b, mode)] }
    end
    pairs.transform_values do |list|
      per = ->(&f) { median(list.map { |u, p| f.(u, p) }) }
      {
        cpu: per.() { |u, p| p[:cpu].to_f / u[:cpu] - 1 },
        wall: per.() { |u, p| p[:wall].to_f / u[:wall] - 1 },
        ns_per_sample: per.() { |u, p| p[:samples].positive? ? (p[:cpu] - u[:cpu]).to_f / p[:samples] : nil },
        ns_per_switch: per.() { |u, p| p[:switches] ? (p[:cpu] - u[:cpu]).to_f / p[:switches] : nil },
        job_ns: per.() { |_, p| p[:samples].positive? ? p[:sampling_time].to_f / p[:samples] : nil },
        samples: per.() { |_, p| p[:samples] },
        dropped: per.() { |_, p| p[:dropped] },
        kib_per_thread: per.() { |_, p| p[:memory].to_f / 1024 / [p[:threads], 1].max },
        cpu_u_ms: per.() { |u, _| u[:cpu] / 1e6 },
      }
    end
  end

  # --- the control program (bench/floor.c): one bare timer tick ---------------

  FLOOR_ITERATIONS = 200_000_000
  FLOOR_HZ = 10_000

  def self.build_floor
    src = File.expand_path("floor.c", __dir__)
    exe = File.join(Dir.tmpdir, "rperf-floor-#{Process.pid}")
    system("cc", "-O2", "-o", exe, src, "-lpthread", exception: false) or return nil
    at_exit { File.unlink(exe) if File.exist?(exe) }
    exe
  end

  def self.run_floor(exe, how, freq)
    _, _, cpu, own, wall, ticks = `#{exe} #{how} #{freq} #{FLOOR_ITERATIONS}`.split
    { cpu: Integer(cpu), own: Integer(own), wall: Integer(wall), ticks: Integer(ticks) }
  end

  # Extra CPU per tick for each delivery, interleaved with tick-less runs:
  # { how => { cpu: ns/tick (process), own: ns/tick on the looping thread } }.
  def self.measure_floor(exe, freq, rounds)
    hows = %w[signal thread tgkill]
    per = hows.to_h { |h| [h, { cpu: [], own: [] }] }
    rounds.times do
      hows.each do |h|
        u = run_floor(exe, "none", freq)
        p = run_floor(exe, h, freq)
        next if p[:ticks].zero?

        per[h][:cpu] << (p[:cpu] - u[:cpu]).to_f / p[:ticks]
        per[h][:own] << (p[:own] - u[:own]).to_f / p[:ticks]
      end
    end
    per.transform_values { |v| { cpu: median(v[:cpu]), own: median(v[:own]) } }
  end

  # --- accuracy: wall mode, GVL-releasing vs GVL-holding C calls -------------

  # Mean relative error per method (profiled weight of the samples whose
  # stack contains the method vs the wall time measured around its calls).
  def self.accuracy_errors(calls, freq, backend)
    data = nil
    spent = nil
    data = Rperf.start(frequency: freq, backend: backend, mode: :wall) { spent = Work.accuracy(calls) }
    weight = Hash.new(0)
    data[:aggregated_samples].each do |frames, w, _, _|
      labels = frames.map { |(_, label)| label }
      Work::ACC_METHODS.each { |m| weight[m] += w if labels.include?("OverheadBench::Work.#{m}") }
    end
    Work::ACC_METHODS.to_h { |m| [m, (weight[m] - spent[m]).abs.to_f / spent[m]] }
  end

  def self.measure_accuracy(calls, freq, backends, rounds)
    errs = backends.to_h { |b| [b, []] }
    rounds.times { backends.each { |b| errs[b] << accuracy_errors(calls, freq, b) } }
    errs.transform_values do |list|
      mean = ->(ms, l) { ms.sum { |m| l[m] } / ms.size }
      holding = Work::ACC_METHODS - Work::ACC_RELEASING
      { releasing: median(list.map { |l| mean.(Work::ACC_RELEASING, l) }),
        holding: median(list.map { |l| mean.(holding, l) }),
        worst: median(list.map { |l| l.values.max }) }
    end
  end

  # --- output ------------------------------------------------------------------

  def self.pct(v) = v.nil? || v.to_f.nan? ? "-" : format("%+.1f%%", v * 100)
  def self.num(v) = v.nil? || v.to_f.nan? ? "-" : v.round.to_s
  def self.ratio(v, floor) = v.nil? || v.nan? || floor.nil? || floor.nan? || floor <= 0 ? "-" : format("%.2f", v / floor)

  def self.table(head, rows, markdown)
    widths = head.each_index.map { |i| ([head[i]] + rows.map { |r| r[i] }).map(&:size).max }
    if markdown
      (["| #{head.join(' | ')} |", "|#{head.map { '---:' }.join('|')}|"] + rows.map { |r| "| #{r.join(' | ')} |" }).join("\n")
    else
      ([head] + rows).map { |r| r.each_with_index.map { |c, i| c.rjust(widths[i]) }.join("  ") }.join("\n")
    end
  end

  def self.main(argv)
    o = options(argv)
    $stdout.sync = true
    yjit = defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled?
    puts "rperf #{Rperf::VERSION} overhead benchmark — Ruby #{RUBY_VERSION}, " \
         "#{`nproc`.strip} CPUs, kernel #{`uname -r`.strip}, YJIT #{yjit ? 'on' : 'off'}, " \
         "load average #{File.read('/proc/loadavg').split.first(3).join(' ')}"
    puts "rounds=#{o[:rounds]} scale=#{o[:scale]} (interleaved unprofiled/profiled pairs, every backend " \
         "in each round; medians)"
    exe = build_floor
    floor = nil
    if exe
      # at 10 kHz: enough ticks per run for a per-tick figure above the noise
      fl = measure_floor(exe, FLOOR_HZ, o[:rounds] + 2)
      floor = fl.dig("signal", :cpu)
      puts
      puts "Control program (bench/floor.c, #{FLOOR_HZ} Hz), extra CPU per bare tick, ns, process / on the looping thread: " +
           fl.map { |h, v| "#{h} #{num(v[:cpu])} / #{num(v[:own])}" }.join(", ")
      puts "  (signal = POSIX timer signal to the looping thread: the floor; thread = a timer thread waking, " \
           "no signal; tgkill = the timer thread signalling the looping thread)"
    else
      puts "(no C compiler: control program skipped, ratios to the floor not shown)"
    end
    puts
    puts "wall / CPU: overhead of the profiled run over the unprofiled one; ns/sample: (CPU P − CPU U) / samples, " \
         "xfloor: ÷ the signal floor; ns/switch: (CPU P − CPU U) / GVL hand-offs (switch, io); " \
         "KiB/thr: profiler memory per thread seen"
    head = %w[workload mode Hz] + o[:backends].flat_map { |b| ["#{b} wall", "CPU", "ns/sample", "xfloor", "ns/switch", "KiB/thr", "drop"] }
    rows = []
    puts table(head, [], false).lines.first
    o[:workloads].each do |name|
      work = workload(name, o[:scale])
      o[:frequencies].each do |freq|
        o[:modes].each do |mode|
          res = measure(work, freq, o[:backends], mode, o[:rounds])
          row = [name, mode.to_s, freq.to_s] + o[:backends].flat_map do |b|
            r = res[b]
            [pct(r[:wall]), pct(r[:cpu]), num(r[:ns_per_sample]), ratio(r[:ns_per_sample], floor),
             num(r[:ns_per_switch]), format("%.1f", r[:kib_per_thread]), num(r[:dropped])]
          end
          rows << row
          puts table(head, rows, false).lines.last
        end
      end
    end
    if o[:accuracy].positive?
      acc = measure_accuracy(o[:accuracy], 1000, o[:backends], o[:rounds])
      puts
      puts "Accuracy, wall mode, 1 kHz: mean relative error per method (GVL-releasing: IO.select, sleep; " \
           "GVL-holding: String#count, String#sum), median of #{o[:rounds]} runs"
      acc.each do |b, a|
        puts format("  %-10s releasing %.3f%%  holding %.3f%%  worst method %.3f%%", b, a[:releasing] * 100,
                    a[:holding] * 100, a[:worst] * 100)
      end
    end
    return unless o[:markdown]

    puts
    puts table(head, rows, true)
  end
end

OverheadBench.main(ARGV) if $PROGRAM_NAME == __FILE__
