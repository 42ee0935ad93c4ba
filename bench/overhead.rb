# frozen_string_literal: true

# bench/overhead.rb — what does rperf cost per sample and per GVL switch, and
# how exact is wall mode around C calls? (a measurement, not a test: it asserts
# nothing; every figure is a ratio of runs made side by side in this process)
#
# Part 1, the control program (bench/floor.c, built with cc; skipped without
# one): a C loop with no Ruby, run with no ticks and with 10 kHz ticks delivered
# as a POSIX timer signal to the looping thread ("signal", the floor every
# ratio below is divided by), as a timer thread waking to absolute deadlines
# ("thread") and as that thread signalling the loop ("tgkill"). Printed: extra
# CPU ns per tick for the whole process / on the looping thread (medians).
#
# Part 2, one table, every backend side by side. For each workload ×
# frequency × mode (:cpu, :wall), each round runs, for every backend in turn,
# the workload unprofiled (U) then profiled (P), after one discarded warm-up
# pair per backend, so all backends meet the same drifts of the machine.
# Workloads (deterministic, fixed inputs; one process, one Ruby thread unless
# said otherwise):
#   fib       fib(30) six times (naive recursion, stack depth ~30)
#   deep      recurse 150 frames, then fib(22) 160 times (stack depth ~175)
#   gc        250,000 iterations allocating 9 strings, an array, a hash
#   switch    8 threads passing a token round a ring of Queues, 20,000
#             hand-offs (each one a GVL switch)
#   io        8 pairs of threads bouncing a byte through two pipes, 1,500
#             round trips per pair (every read and every write releases and
#             retakes the GVL: 4 switches per round trip)
#   idleN     N threads parked on a Queue (each woken once per run), then
#             the main thread runs fib as above ("idle1000": flat in threads)
#   threads / threadsN   16 (N) threads sharing 64 × fib(25), GVL-bound
#   ractors / ractorsN   8 (N) Ractors sharing 64 × fib(25), in parallel
# All lengths are at scale 1.0 (--scale multiplies them). Columns per backend
# (medians over the rounds of per-round values, each P against the U just
# before it; process CPU = CLOCK_PROCESS_CPUTIME_ID, every thread of the
# process, so timer threads, the worker and signal handling are included):
#   wall       wall-time overhead of P over U (CLOCK_MONOTONIC), the window
#              being Rperf.start + workload (Rperf.stop is outside it)
#   CPU        process CPU overhead of P over U
#   ns/sample  (CPU P − CPU U) / sampling_count of P: all the profiler costs
#   xfloor     ns/sample ÷ the control program's "signal" ns per bare tick
#   ns/switch  (CPU P − CPU U) / GVL switches (switch, io only; it includes
#              the per-sample cost). A switch is one release and retake of
#              the GVL (a SUSPENDED/READY/RESUMED round of Ruby's thread
#              events); the counts were checked against the thread hook's
#              own event counts (switch: 100,010 RESUMED for 100,000
#              hand-offs; io: 240,341 for 8 × 750 × 10 round trips × 4)
#   KiB/thr    profiler_memory_bytes / detected_thread_count of P
#   drop       dropped_samples per profiled run
# Each round also pairs an unprofiled run with one where a bare timer thread
# (bench/floor_tick.c, loaded through Fiddle; skipped without cc) wakes at
# the same frequency and does nothing else ("tick"): on this VM such a
# wake-up costs the process, and even the wall time of a compute loop on the
# other vCPU, a share no profiler built on a timer can go under. A second
# table prints that floor per row (its wall and CPU overhead, and ns/switch
# for switch and io) and each backend's excess over it ("above": what the
# profiler adds to any timer thread at that rate; the median over rounds of
# the difference within each round, so drifts between rounds cancel; wall
# and CPU in percentage points, ns/switch in ns), followed from 6 rounds on
# by a ~95 % confidence interval for that median, [low, high]: the order
# statistics of the rounds' differences that bracket the median with 95 %
# probability whatever the shape of this VM's noise, so a target reads as
# met (high under it), missed (low above it) or not resolved by the run
# (more rounds narrow it, ~1/√rounds). On a quieter machine the tick's
# columns go to ~0 and "above" equals the overhead. For switch and io a
# third pair per round runs the tick plus an empty Ruby thread event hook
# ("hooks"): Ruby 3.3 takes a process-wide rwlock around each thread event
# once any hook is installed, three per switch, a cost every profiler that
# follows the GVL pays; "above hooks" is what rperf's hook code adds.
# idleN gets a third table, by phase (OverheadBench.phase! splits its runs;
# a profiled run takes Rperf.snapshot there, between two clock readings, so
# its cost is in neither phase): "parked ns/sample", the CPU per sample of
# the computation while the N threads are parked (P − U over the samples
# taken then), and that ÷ fib's ns/sample of the same mode and frequency in
# this run (target: within 1.1× of the same run without them); "µs/thread", the first phase's extra CPU (Rperf.start, then each
# thread's one turn) per thread, over U and "above tick". The whole-run
# ns/sample of the main table holds both phases, and the first one's ticks
# mostly find the GVL free (the threads hand it on within microseconds):
# there even the bare tick costs with no sample to show for it.
#
# Part 3, accuracy (wall mode, 1 kHz, every backend, --rounds runs each): a
# comparison of C calls that release the GVL with C calls that keep
# it. Four methods, each a Ruby method around one C call of about the same
# length (--accuracy-ms, default 20 ms, i.e. 20 sampling intervals per call):
#   acc_select      IO.select(nil, nil, nil, t)   releases the GVL
#   acc_sleep       sleep(t)                      releases the GVL
#   acc_hold_count  String#count on a big string  keeps the GVL, no safepoint
#   acc_hold_sum    String#sum on a big string    keeps the GVL, no safepoint
# The two string sizes are calibrated at start so that a holding call takes
# about --accuracy-ms (memory-bound: it drifts with the machine's load); t is
# the mean holding call so far, so both kinds get the same total time (the
# "ref ms" column shows it). A run makes --accuracy=N rounds of the four
# calls, in their 24 orders in turn (every method follows every other one
# equally often over 24 rounds: use a multiple of 24), each call after a
# short varying Ruby gap (≤ ~20 µs) so that the sampling phase varies.
# Reference = wall time measured around each call (summed per method);
# profiled = weight of the samples whose stack contains the method.
# Printed per backend and method: ref ms and profiled ms (mean per run),
# bias µs/call (mean (profiled − ref) / calls: compare with the 1,000 µs
# interval), err (median over runs of |profiled − ref| / ref); then per
# backend the mean error over the releasing and over the holding methods
# (median over runs), the worst method, and releasing ÷ holding (target:
# ≤ 2).
#
# Run (script/ruby puts the built extension on the load path):
#   script/ruby bench/overhead.rb              # full: 5 rounds
#   script/ruby bench/overhead.rb --quick      # 3 rounds, half-length workloads
#   script/ruby bench/overhead.rb --yjit       # the same under YJIT
# The measurement of docs/performance.md (without, then with YJIT;
# ~3–4 min each on 2 quiet vCPUs; under YJIT fib and idle1000's fib run ~6×
# faster, so they get 6× the length to keep as many samples per run):
#   script/ruby bench/overhead.rb --workloads=fib,gc,switch,io,idle1000 --frequencies=1000,10000 --rounds=3 --scale=0.5 --accuracy=96 --markdown
#   script/ruby bench/overhead.rb --workloads=fib,gc,switch,io,idle1000 --frequencies=1000,10000 --rounds=3 --scale=0.5,fib=3,idle1000=3 --accuracy=96 --markdown --yjit
# Smoke run (seconds, numbers meaningless):
#   script/ruby bench/overhead.rb --workloads=fib,switch --frequencies=1000 --rounds=1 --scale=0.05 --accuracy=3 --accuracy-ms=5
# Options (ARGV or ENV); the header of the output repeats the command line:
#   --rounds=N        | RPERF_BENCH_ROUNDS    rounds per configuration and accuracy runs per
#                                             backend (default 5, quick 3)
#   --quick           | RPERF_BENCH_QUICK=1   fewer rounds, workloads scaled by 0.5, accuracy=48
#   --scale=F[,W=F…]  | RPERF_BENCH_SCALE     workload length factor (default 1.0); W=F sets
#                                             it for workload W alone (e.g. 0.5,fib=4: YJIT
#                                             runs fib ~8× faster, gc and switch not at all)
#   --workloads=LIST  | RPERF_BENCH_WORKLOADS default fib,deep,gc,switch,io,idle1000; "none"
#                                             runs only the control program and accuracy
#   --frequencies=LIST| RPERF_BENCH_FREQUENCIES  default 1000,10000
#   --backends=LIST   | RPERF_BENCH_BACKENDS  default Rperf.backends (all)
#   --modes=LIST      | RPERF_BENCH_MODES     default cpu,wall
#   --accuracy=N      | RPERF_BENCH_ACCURACY  rounds of the 4 accuracy calls per run (default
#                                             96, quick 48; 0 skips part 3)
#   --accuracy-ms=MS  | RPERF_BENCH_ACCURACY_MS  length of each accuracy call (default 20)
#   --yjit            | RPERF_BENCH_YJIT=1    run everything (U and P runs alike) under YJIT:
#                                             the bench re-executes itself as `ruby --yjit`
#                                             (the workloads run in this process, not in
#                                             children), checks RubyVM::YJIT.enabled? there
#                                             and aborts if this Ruby has no YJIT.
#                                             `script/ruby --yjit bench/overhead.rb` is the same.
#   --markdown        | RPERF_BENCH_MARKDOWN=1  print the table as Markdown too

require "rperf"
require "tmpdir"
require_relative "floor_tick"

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
      rs = Array.new(count) { Ractor.new(per) { |k| k.times.sum { Work.fib(25) } } }
      rs.sum { |r| r.respond_to?(:value) ? r.value : r.take }   # Ractor#value from Ruby 4.0
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
    # times each: every read blocks outside the GVL, and every write
    # releases it too (IO#write on a pipe is a blocking region). Returns the
    # number of GVL switches: two reads and two writes per round trip.
    def io(pairs, rounds)
      pipes = Array.new(pairs) { IO.pipe + IO.pipe }
      threads = pipes.flat_map do |a_r, a_w, b_r, b_w|
        [Thread.new { rounds.times { a_r.read(1); b_w.write("x") } },
         Thread.new { rounds.times { a_w.write("x"); b_r.read(1) } }]
      end
      threads.each(&:join)
      pipes.flatten.each(&:close)
      pairs * rounds * 4
    end

    # The accuracy workload (part 3 of the header): two GVL-releasing C calls
    # and two GVL-holding ones (C loops over a big string with no interrupt
    # check), each alone in a Ruby method of its own so that a tick deferred to
    # the end of a holding call is taken at that method's `leave`, still
    # inside it. Lengths come from calibrate_accuracy.
    def acc_select = IO.select(nil, nil, nil, @release_s)
    def acc_sleep = sleep(@release_s)
    def acc_hold_count = @hold_count.count("a")
    def acc_hold_sum = @hold_sum.sum
    def acc_gap(n)
      x = 0
      n.times { |i| x += i }
      x
    end

    ACC_METHODS = %i[acc_select acc_sleep acc_hold_count acc_hold_sum].freeze
    ACC_RELEASING = %i[acc_select acc_sleep].freeze
    ACC_HOLDING = (ACC_METHODS - ACC_RELEASING).freeze
    ACC_ORDERS = ACC_METHODS.permutation.to_a.freeze # 24 rounds: every method after every other equally often
    ACC_DESCRIPTION = { acc_select: "IO.select(nil, nil, nil, t)", acc_sleep: "sleep(t)",
                        acc_hold_count: "String#count (keeps the GVL)",
                        acc_hold_sum: "String#sum (keeps the GVL)" }.freeze
    UNIT = "abcdefgh"

    def now_ns = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)

    # Wall ns of one call of `blk` (median of 5, after one warm-up call).
    def time_call(&blk)
      blk.call
      Array.new(5) do
        t0 = now_ns
        blk.call
        now_ns - t0
      end.sort[2]
    end

    # Size the two holding strings so that one call takes `ms` on this machine
    # now, and the releasing calls to `ms` too. Returns { method => ns/call }.
    # Up to 4 passes per string, until a call is within 10 % of `ms`: a big
    # string is slower per byte than a cached 8 MB one, and other processes
    # on the machine disturb single timings.
    def calibrate_accuracy(ms)
      target = ms * 1e6
      fit = lambda do |&call|
        str = (UNIT * 1_000_000).freeze # 8 MB
        4.times do
          ns = time_call { call.(str) }
          break if (ns - target).abs < target / 10

          str = (UNIT * [(target / ns * str.size / UNIT.size).round, 1].max).freeze
        end
        str
      end
      @hold_count = fit.() { |x| x.count("a") }
      @hold_sum = fit.(&:sum)
      @release_s = ms / 1000.0
      ACC_METHODS.to_h { |m| [m, time_call { send(m) }] }
    end

    # `rounds` rounds of the four calls, in the 24 orders in turn, each
    # call after a short varying Ruby gap. The releasing calls last the mean
    # holding call so far (memory bandwidth, hence a holding call's length,
    # drifts with the machine's load), so both kinds get the same total time.
    # Returns { method => wall ns measured around its calls }.
    def accuracy(rounds)
      spent = Hash.new(0)
      held = 0
      rounds.times do |k|
        ACC_ORDERS[k % ACC_ORDERS.size].each_with_index do |m, i|
          acc_gap(((k * 7919 + i * 104_729) % 97) * 4)
          t0 = now_ns
          send(m)
          spent[m] += now_ns - t0
          next if ACC_RELEASING.include?(m)

          held += 1
          @release_s = ACC_HOLDING.sum { |h| spent[h] } / held / 1e9
        end
      end
      spent
    end
  end

  # name => lambda(scale) returning a callable that runs one round (and
  # returns the number of GVL switches it made, for switch/io).
  WORKLOADS = {
    "fib" => ->(s) { n = [(6 * s).round, 1].max; -> { n.times { Work.fib(30) }; nil } },
    "deep" => ->(s) { r = [(160 * s).round, 1].max; -> { Work.deep(150, r); nil } },
    "gc" => ->(s) { n = (250_000 * s).round; -> { Work.gc(n); nil } },
    "switch" => ->(s) { n = [(20_000 * s).round, 8].max; -> { Work.switch(8, n) } },
    "io" => ->(s) { n = [(1_500 * s).round, 1].max; -> { Work.io(8, n) } },
  }.freeze

  # 1,000 threads parked on a Queue: each wakes once per run (so the profiler
  # meets it), then the main thread computes `fib` as in "fib".
  # The run has two phases, split by OverheadBench.phase!: meeting the
  # threads (each one's turn, with the start of the run before it), then
  # the computation while they are parked, the case that matters for a
  # server with a large idle thread pool.
  def self.idle_workload(count, scale)
    park = Thread::Queue.new
    parked = Thread::Queue.new
    count.times { Thread.new { loop { park.pop; parked << 1 } } }
    n = [(6 * scale).round, 1].max
    lambda do
      count.times { park << 1 }
      count.times { parked.pop }
      phase!
      n.times { Work.fib(30) }
      nil
    end
  end

  # Called by a workload between its two phases (idleN): notes the clocks
  # and, in a profiled run, the samples so far (Rperf.snapshot; its own
  # cost falls between the two readings, in neither phase).
  def self.phase!
    cpu = now_cpu
    samples = Rperf.running? ? Rperf.snapshot[:sampling_count] : 0
    @phase = { cpu: cpu, samples: samples, cpu2: now_cpu }
  end

  # After a run: its phases' CPU (nil if the workload has none). before =
  # from the window's start to the mark; after = from the mark (snapshot
  # excluded) to the end of the workload, `samples` the samples taken then.
  def self.phases(c0, c1, samples_total)
    ph = @phase
    @phase = nil
    return nil unless ph

    { before_cpu: ph[:cpu] - c0, after_cpu: c1 - ph[:cpu2], samples: samples_total && samples_total - ph[:samples] }
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

  # "F[,workload=F…]" -> { nil => default factor, "workload" => factor }.
  def self.scales(spec, factor)
    spec.split(",").to_h do |part|
      name, f = part.include?("=") ? part.split("=", 2) : [nil, part]
      [name&.strip, Float(f) * factor]
    end.then { |h| { nil => 1.0 * factor }.merge(h) }
  end

  def self.options(argv)
    opt = {}
    argv.each do |a|
      case a
      when "--quick" then opt[:quick] = true
      when "--markdown" then opt[:markdown] = true
      when "--yjit" then opt[:yjit] = true
      when /\A--(rounds|scale|workloads|frequencies|backends|modes|accuracy|accuracy-ms)=(.+)\z/
        opt[Regexp.last_match(1).tr("-", "_").to_sym] = Regexp.last_match(2)
      when "-h", "--help" then puts File.read(__FILE__)[/^# bench.*?\n(?=\n)/m]; exit 0
      else abort "unknown argument #{a.inspect} (see --help)"
      end
    end
    env = ->(k) { ENV["RPERF_BENCH_#{k.to_s.upcase}"] }
    quick = opt[:quick] || env.(:quick) == "1"
    list = ->(k, default) { (opt[k] || env.(k) || default).split(",").map(&:strip).reject { |w| w.empty? || w == "none" } }
    {
      quick: quick,
      rounds: Integer(opt[:rounds] || env.(:rounds) || (quick ? 3 : 5)),
      scale: scales(opt[:scale] || env.(:scale) || "1.0", quick ? 0.5 : 1.0),
      workloads: list.(:workloads, "fib,deep,gc,switch,io,idle1000"),
      frequencies: list.(:frequencies, "1000,10000").map { |f| Integer(f) },
      backends: list.(:backends, Rperf.backends.join(",")).map(&:to_sym),
      modes: list.(:modes, "cpu,wall").map(&:to_sym),
      accuracy: Integer(opt[:accuracy] || env.(:accuracy) || (quick ? 48 : 96)),
      accuracy_ms: Float(opt[:accuracy_ms] || env.(:accuracy_ms) || 20),
      markdown: opt[:markdown] || env.(:markdown) == "1",
      yjit: opt[:yjit] || env.(:yjit) == "1",
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
    c1 = now_cpu
    w1 = now_wall
    { cpu: c1 - c0, wall: w1 - w0, switches: switches, phases: phases(c0, c1, 0) }
  end

  # One profiled run: the window covers start + workload; stop is timed apart.
  def self.run_profiled(work, freq, backend, mode)
    GC.start
    c0 = now_cpu
    w0 = now_wall
    Rperf.start(frequency: freq, backend: backend, mode: mode)
    switches = work.call
    c1 = now_cpu
    w1 = now_wall
    data = Rperf.stop
    { cpu: c1 - c0, wall: w1 - w0, stop_cpu: now_cpu - c1, switches: switches,
      phases: phases(c0, c1, data[:sampling_count]),
      samples: data[:sampling_count], triggers: data[:trigger_count],
      dropped: data[:dropped_samples] || 0, sampling_time: data[:sampling_time_ns],
      memory: data[:profiler_memory_bytes], threads: data[:detected_thread_count] }
  end

  # One run with the bare timer thread of bench/floor_tick.c ticking at freq
  # (no profiler): the floor of every figure. With hooks: true, an empty
  # Ruby thread event hook is installed too: the floor of the per-switch
  # figures (Ruby's own cost of dispatching the events rperf follows).
  def self.run_ticked(work, freq, hooks: false)
    return FloorTick.hooks { run_ticked(work, freq) } if hooks

    GC.start
    c0 = now_cpu
    w0 = now_wall
    FloorTick.start(freq)
    switches = work.call
    c1 = now_cpu
    w1 = now_wall
    wakes = FloorTick.stop
    { cpu: c1 - c0, wall: w1 - w0, switches: switches, samples: 0, wakes: wakes, dropped: 0, memory: 0, threads: 1,
      sampling_time: 0, phases: phases(c0, c1, 0) }
  end

  # Interleaved rounds for one (workload, frequency, mode): each round runs,
  # for every backend in turn, an unprofiled run then a profiled one, so all
  # backends meet the same drifts of the machine. With tick: true the bare
  # timer thread gets its pair in each round too, as backend :tick; with
  # hooks: true, the bare timer thread plus an empty thread event hook, as
  # backend :hooks. Returns backend => row.
  def self.measure(work, freq, backends, mode, rounds, tick: false, hooks: false)
    runs = backends.to_h { |b| [b, -> { run_profiled(work, freq, b, mode) }] }
    runs[:tick] = -> { run_ticked(work, freq) } if tick
    runs[:hooks] = -> { run_ticked(work, freq, hooks: true) } if hooks
    runs.each_value { |r| run_plain(work); r.call } # warm-up (discarded)
    pairs = runs.transform_values { [] }
    rounds.times do
      runs.each { |b, r| pairs[b] << [run_plain(work), r.call] }
    end
    pairs.transform_values do |list|
      rounds_of = ->(&f) { list.map { |u, p| f.(u, p) } }
      per = ->(&f) { median(rounds_of.(&f)) }
      cpu = rounds_of.() { |u, p| p[:cpu].to_f / u[:cpu] - 1 }
      wall = rounds_of.() { |u, p| p[:wall].to_f / u[:wall] - 1 }
      switch = rounds_of.() { |u, p| p[:switches] ? (p[:cpu] - u[:cpu]).to_f / p[:switches] : nil }
      # two-phase workloads (idleN): the computation's CPU per sample, and
      # the first phase's extra CPU (start, each thread's turn) per thread
      ph = list.all? { |u, p| u[:phases] && p[:phases] }
      after_sample = rounds_of.() do |u, p|
        n = p[:phases][:samples]
        n&.positive? ? (p[:phases][:after_cpu] - u[:phases][:after_cpu]).to_f / n : nil
      end if ph
      before_thread = rounds_of.() { |u, p| (p[:phases][:before_cpu] - u[:phases][:before_cpu]).to_f } if ph
      {
        cpu: median(cpu),
        wall: median(wall),
        # per-round values, for differences taken within each round
        rounds: { cpu: cpu, wall: wall, ns_per_switch: switch, before_ns: before_thread },
        after_ns_per_sample: ph ? median(after_sample) : nil,
        before_ns: ph ? median(before_thread) : nil,
        ns_per_sample: per.() { |u, p| p[:samples].positive? ? (p[:cpu] - u[:cpu]).to_f / p[:samples] : nil },
        ns_per_switch: median(switch),
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

  # One profiled run of the accuracy workload: { method => { ref:, prof: } }
  # in ns (ref: wall time measured around its calls; prof: weight of the
  # samples whose stack contains the method).
  def self.accuracy_run(rounds, freq, backend)
    spent = nil
    data = Rperf.start(frequency: freq, backend: backend, mode: :wall) { spent = Work.accuracy(rounds) }
    weight = Hash.new(0)
    data[:aggregated_samples].each do |frames, w, _, _|
      labels = frames.map { |(_, label)| label }
      Work::ACC_METHODS.each { |m| weight[m] += w if labels.include?("OverheadBench::Work.#{m}") }
    end
    Work::ACC_METHODS.to_h { |m| [m, { ref: spent[m], prof: weight[m] }] }
  end

  # `runs` runs per backend, interleaved. Returns backend => { per_method:
  # { m => { ref_ms:, prof_ms:, bias_us:, err: } }, releasing:, holding:,
  # worst: } where err and the means are medians over runs of per-run
  # relative errors, ref/prof/bias are means per run.
  def self.measure_accuracy(rounds, freq, backends, runs)
    Work.accuracy([rounds, 5].min) # warm-up, unprofiled (YJIT compiles the loop here)
    list = backends.to_h { |b| [b, []] }
    runs.times { backends.each { |b| list[b] << accuracy_run(rounds, freq, b) } }
    list.transform_values do |rs|
      err = ->(r, m) { (r[m][:prof] - r[m][:ref]).abs.to_f / r[m][:ref] }
      mean_err = ->(ms) { median(rs.map { |r| ms.sum { |m| err.(r, m) } / ms.size }) }
      avg = ->(m, k) { rs.sum { |r| r[m][k] }.to_f / rs.size }
      per_method = Work::ACC_METHODS.to_h do |m|
        [m, { ref_ms: avg.(m, :ref) / 1e6, prof_ms: avg.(m, :prof) / 1e6,
              bias_us: (avg.(m, :prof) - avg.(m, :ref)) / rounds / 1e3, err: median(rs.map { |r| err.(r, m) }) }]
      end
      { per_method: per_method, releasing: mean_err.(Work::ACC_RELEASING), holding: mean_err.(Work::ACC_HOLDING),
        worst: median(rs.map { |r| Work::ACC_METHODS.map { |m| err.(r, m) }.max }) }
    end
  end

  def self.report_accuracy(o)
    per_call = Work.calibrate_accuracy(o[:accuracy_ms])
    acc = measure_accuracy(o[:accuracy], 1000, o[:backends], o[:rounds])
    puts
    puts "Accuracy, wall mode, 1 kHz: #{o[:accuracy]} rounds of the 4 calls per run (24 orders in turn), " \
         "#{o[:rounds]} runs per backend; one call calibrated to #{o[:accuracy_ms]} ms, measured now: " +
         per_call.map { |m, ns| format("%s %.2f ms", m, ns / 1e6) }.join(", ")
    puts "ref / prof ms: wall time around the calls / weight of samples containing the method (mean per run); " \
         "bias µs/call: (prof − ref) / calls, against a 1000 µs interval; err: |prof − ref| / ref (median over runs)"
    head = %w[backend method C\ call ref\ ms prof\ ms bias\ µs/call err]
    rows = acc.flat_map do |b, a|
      a[:per_method].map do |m, r|
        [b.to_s, m.to_s, Work::ACC_DESCRIPTION[m], format("%.1f", r[:ref_ms]), format("%.1f", r[:prof_ms]),
         format("%+.1f", r[:bias_us]), format("%.3f%%", r[:err] * 100)]
      end
    end
    puts table(head, rows, false)
    puts
    puts "Mean relative error per method (median over runs); target: releasing ÷ holding ≤ 2"
    head2 = ["backend", "releasing", "holding", "worst method", "releasing ÷ holding"]
    rows2 = acc.map do |b, a|
      [b.to_s, format("%.3f%%", a[:releasing] * 100), format("%.3f%%", a[:holding] * 100),
       format("%.3f%%", a[:worst] * 100), a[:holding].positive? ? format("%.2f", a[:releasing] / a[:holding]) : "-"]
    end
    puts table(head2, rows2, false)
    return unless o[:markdown]

    puts
    puts table(head, rows, true)
    puts
    puts table(head2, rows2, true)
  end

  # --yjit: the workloads run in this process, so the whole process must run
  # under YJIT, U and P runs alike. Re-execute as `ruby --yjit` with rperf's
  # directory on the load path; in the re-executed process YJIT must be on.
  def self.ensure_yjit(argv)
    unless defined?(RubyVM::YJIT)
      abort "bench/overhead.rb --yjit: this Ruby #{RUBY_VERSION} (#{RbConfig.ruby}) was built without YJIT"
    end
    return if RubyVM::YJIT.enabled?
    abort "bench/overhead.rb --yjit: `ruby --yjit` did not enable YJIT (RubyVM::YJIT.enabled? is false)" if ENV["RPERF_BENCH_YJIT_CHILD"]

    lib = $LOADED_FEATURES.find { |f| f.end_with?("/rperf.rb") }
    $stdout.flush
    exec({ "RPERF_BENCH_YJIT_CHILD" => "1" }, RbConfig.ruby, "--yjit", *(lib ? ["-I", File.dirname(lib)] : []),
         __FILE__, *argv)
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

  # Part 1: the control program. Returns the floor (ns per bare signal tick) or nil.
  def self.report_floor(o)
    exe = build_floor
    puts
    unless exe
      puts "(no C compiler: control program skipped, ratios to the floor not shown)"
      return nil
    end
    # at 10 kHz: enough ticks per run for a per-tick figure above the noise
    fl = measure_floor(exe, FLOOR_HZ, o[:rounds] + 2)
    puts "Control program (bench/floor.c, #{FLOOR_HZ} Hz), extra CPU per bare tick, ns, process / on the looping thread: " +
         fl.map { |h, v| "#{h} #{num(v[:cpu])} / #{num(v[:own])}" }.join(", ")
    puts "  (signal = POSIX timer signal to the looping thread: the floor; thread = a timer thread waking, " \
         "no signal; tgkill = the timer thread signalling the looping thread)"
    fl.dig("signal", :cpu)
  end

  # Part 2: the overhead table, one row per workload × frequency × mode.
  def self.report_overhead(o, floor)
    puts
    puts "wall / CPU: overhead of the profiled run over the unprofiled one; ns/sample: (CPU P − CPU U) / samples, " \
         "xfloor: ÷ the signal floor; ns/switch: (CPU P − CPU U) / GVL switches (switch, io); " \
         "KiB/thr: profiler memory per thread seen"
    head = %w[workload mode Hz] + o[:backends].flat_map { |b| ["#{b} wall", "CPU", "ns/sample", "xfloor", "ns/switch", "KiB/thr", "drop"] }
    rows = []
    floor_rows = []
    results = {}
    puts table(head, [], false).lines.first
    o[:workloads].each do |name|
      work = workload(name, o[:scale].fetch(name, o[:scale][nil]))
      o[:frequencies].each do |freq|
        o[:modes].each do |mode|
          tick = FloorTick.available?
          res = measure(work, freq, o[:backends], mode, o[:rounds], tick: tick,
                                                                      hooks: tick && SWITCHING.include?(name))
          row = [name, mode.to_s, freq.to_s] + o[:backends].flat_map do |b|
            r = res[b]
            [pct(r[:wall]), pct(r[:cpu]), num(r[:ns_per_sample]), ratio(r[:ns_per_sample], floor),
             num(r[:ns_per_switch]), format("%.1f", r[:kib_per_thread]), num(r[:dropped])]
          end
          results[[name, mode, freq]] = res
          rows << row
          puts table(head, rows, false).lines.last
          floor_rows << floor_row(name, mode, freq, o[:backends], res) if tick
        end
      end
    end
    report_floor_rows(o, floor_rows)
    report_parked(o, results)
    return unless o[:markdown]

    puts
    puts table(head, rows, true)
  end

  # idleN in its two phases: the computation while N threads are parked
  # (its CPU per sample, and that ÷ fib's whole-run figure for the same
  # mode and frequency in this run), and the first phase (the start, then
  # each thread's one turn) as extra CPU per thread, over the unprofiled
  # run and over the bare tick. The whole-run figure of the table above
  # holds both, and the first phase's ticks find the GVL free most of the
  # time (the threads hand it on in microseconds): even the bare tick costs
  # there with no sample to show for it.
  def self.report_parked(o, results)
    rows = results.filter_map do |(name, mode, freq), res|
      m = /\Aidle(\d+)\z/.match(name) or next
      count = Integer(m[1])
      fib = results[["fib", mode, freq]]
      [name, mode.to_s, freq.to_s] + o[:backends].flat_map do |b|
        r = res[b]
        f = fib && fib[b][:ns_per_sample]
        above = excess(res, b, :tick, :before_ns)
        [num(r[:after_ns_per_sample]), f ? ratio(r[:after_ns_per_sample], f) : "-",
         r[:before_ns] ? format("%.1f", r[:before_ns] / 1e3 / count) : "-",
         above ? format("%.1f", above / 1e3 / count) : "-"]
      end
    end
    return if rows.empty?

    puts
    puts "Parked threads (idleN) by phase: ns/sample while they are parked and fib computes (÷ fib's " \
         "ns/sample, same mode and Hz, this run); per-thread cost of the first phase (start, then each " \
         "thread's one turn): extra CPU µs per thread over the unprofiled run, and over the bare tick"
    head = %w[workload mode Hz] + o[:backends].flat_map { |b| ["#{b} parked ns/sample", "÷ fib", "µs/thread", "above tick"] }
    puts table(head, rows, false)
    return unless o[:markdown]

    puts
    puts table(head, rows, true)
  end

  # Workloads whose runs return their GVL switch count.
  SWITCHING = %w[switch io].freeze

  # The per-round differences (the backend's value − the floor's), both of
  # the same round: the drifts of the machine between rounds cancel out.
  def self.differences(res, b, floor, key)
    f = res[floor]
    return [] unless f

    res[b][:rounds][key].zip(f[:rounds][key]).filter_map { |v, w| v && w && v - w }
  end

  # Their median over rounds.
  def self.excess(res, b, floor, key)
    vs = differences(res, b, floor, key)
    vs.empty? ? nil : median(vs)
  end

  # A distribution-free ~95 % confidence interval for the median of values
  # (rounds are independent draws of this VM's noise; no assumption about
  # its shape): the order statistics k and n − 1 − k of the sorted values,
  # k = floor((n − 1.96 √n) / 2), from the binomial count of values below
  # the true median. nil under 6 values (the interval would be [min, max]
  # with less than 95 %).
  def self.median_ci(values)
    s = values.sort
    n = s.size
    return nil if n < 6

    k = [((n - 1.96 * Math.sqrt(n)) / 2).floor, 0].max
    [s[k], s[n - 1 - k]]
  end

  # "median [low, high]" of the per-round excess, formatted by fmt.
  def self.excess_ci(res, b, floor, key, &fmt)
    vs = differences(res, b, floor, key)
    return "-" if vs.empty?

    ci = median_ci(vs)
    ci ? "#{fmt.(median(vs))} [#{fmt.(ci[0])}, #{fmt.(ci[1])}]" : fmt.(median(vs))
  end

  def self.points(v) = v.nil? || v.to_f.nan? ? "-" : format("%+.1f", v * 100)

  def self.floor_row(name, mode, freq, backends, res)
    t = res[:tick]
    h = res[:hooks] || {}
    [name, mode.to_s, freq.to_s, pct(t[:wall]), pct(t[:cpu]), num(t[:ns_per_switch]), num(h[:ns_per_switch])] +
      backends.flat_map do |b|
        [excess_ci(res, b, :tick, :wall) { points(_1) }, excess_ci(res, b, :tick, :cpu) { points(_1) },
         excess_ci(res, b, :tick, :ns_per_switch) { num(_1) }, excess_ci(res, b, :hooks, :ns_per_switch) { num(_1) }]
      end
  end

  # Every figure against the in-process floors, their unprofiled/floor pairs
  # interleaved with the backends' in each round: tick = a bare timer
  # thread (bench/floor_tick.c) waking at the same frequency, no profiler;
  # hooks = the same plus an empty Ruby thread event hook (switch, io).
  def self.report_floor_rows(o, rows)
    return if rows.empty?

    puts
    puts "Against the floors: tick = a bare timer thread at the same frequency in this process " \
         "(bench/floor_tick.c), no profiler: its wall and CPU overhead and ns/switch; hooks = the same " \
         "plus an empty Ruby thread event hook: its ns/switch (Ruby's own cost of dispatching the events " \
         "rperf follows). Per backend, above = the median over rounds of the backend's figure − the " \
         "floor's in the same round (wall, CPU: percentage points over tick; ns/switch: ns over tick, " \
         "then over hooks), with its ~95 % confidence interval [low, high] from 6 rounds on " \
         "(distribution-free: order statistics of the rounds' differences)"
    head = ["workload", "mode", "Hz", "tick wall", "CPU", "ns/switch", "hooks ns/switch"] +
           o[:backends].flat_map { |b| ["#{b} wall above", "CPU above", "ns/switch above", "above hooks"] }
    puts table(head, rows, false)
    return unless o[:markdown]

    puts
    puts table(head, rows, true)
  end

  def self.main(argv)
    o = options(argv)
    ensure_yjit(argv) if o[:yjit]
    $stdout.sync = true
    yjit = defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled?
    puts "rperf #{Rperf::VERSION} overhead benchmark — Ruby #{RUBY_VERSION}, " \
         "#{`nproc`.strip} CPUs, kernel #{`uname -r`.strip}, YJIT #{yjit ? 'on' : 'off'}, " \
         "load average #{File.read('/proc/loadavg').split.first(3).join(' ')}"
    puts "command: bench/overhead.rb #{argv.join(' ')}".rstrip
    scale = o[:scale].map { |n, f| n ? "#{n}=#{f}" : f.to_s }.join(",")
    puts "rounds=#{o[:rounds]} scale=#{scale} backends=#{o[:backends].join(',')} (interleaved " \
         "unprofiled/profiled pairs, every backend in each round; medians)"
    report_overhead(o, report_floor(o)) unless o[:workloads].empty?
    report_accuracy(o) if o[:accuracy].positive?
    return unless yjit

    st = RubyVM::YJIT.runtime_stats
    puts
    puts "YJIT on: #{st[:compiled_iseq_count]} iseqs compiled, #{st[:inline_code_size].to_i / 1024} KiB of inline code"
  end
end

OverheadBench.main(ARGV) if $PROGRAM_NAME == __FILE__
