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
  end

  # name => lambda(scale) returning a callable that runs one round.
  WORKLOADS = {
    "fib" => ->(s) { n = [(6 * s).round, 1].max; -> { n.times { Work.fib(30) } } },
    "deep" => ->(s) { r = [(160 * s).round, 1].max; -> { Work.deep(150, r) } },
    "gc" => ->(s) { n = (250_000 * s).round; -> { Work.gc(n) } },
  }.freeze

  def self.workload(name, scale)
    if (m = /\Athreads(\d*)\z/.match(name))
      count = m[1].empty? ? 16 : Integer(m[1])
      units = [(64 * scale).round, count].max
      return -> { Work.threads(count, units) }
    end
    if (m = /\Aractors(\d*)\z/.match(name))
      Warning[:experimental] = false
      count = m[1].empty? ? 8 : Integer(m[1])
      units = [(64 * scale).round, count].max
      return -> { Work.ractors(count, units) }
    end
    WORKLOADS.fetch(name) { abort "unknown workload #{name.inspect} (fib, deep, gc, threads, threadsN, ractors, ractorsN)" }.call(scale)
  end

  # --- options ---------------------------------------------------------------

  def self.options(argv)
    opt = {}
    argv.each do |a|
      case a
      when "--quick" then opt[:quick] = true
      when "--markdown" then opt[:markdown] = true
      when /\A--(rounds|scale|workloads|frequencies|backends|modes)=(.+)\z/ then opt[Regexp.last_match(1).to_sym] = Regexp.last_match(2)
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
      workloads: list.(:workloads, "fib,deep,threads,gc,ractors1,ractors"),
      frequencies: list.(:frequencies, "1000,10000").map { |f| Integer(f) },
      backends: list.(:backends, "signal,nanosleep").map(&:to_sym),
      modes: list.(:modes, "cpu,wall").map(&:to_sym),
      markdown: opt[:markdown] || env.(:markdown) == "1",
    }
  end

  # --- measurement -------------------------------------------------------------

  def self.now_cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID, :nanosecond)
  def self.now_wall = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)

  def self.median(values)
    s = values.sort
    n = s.size
    n.odd? ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2.0
  end

  # One unprofiled run: { cpu:, wall: } in ns.
  def self.run_plain(work)
    GC.start
    c0 = now_cpu
    w0 = now_wall
    work.call
    { cpu: now_cpu - c0, wall: now_wall - w0 }
  end

  # One profiled run: the window covers start + workload; stop is timed apart.
  def self.run_profiled(work, freq, backend, mode)
    GC.start
    c0 = now_cpu
    w0 = now_wall
    Rperf.start(frequency: freq, backend: backend, mode: mode)
    work.call
    cpu = now_cpu - c0
    wall = now_wall - w0
    s0 = now_cpu
    data = Rperf.stop
    { cpu: cpu, wall: wall, stop_cpu: now_cpu - s0,
      samples: data[:sampling_count], triggers: data[:trigger_count],
      dropped: data[:dropped_samples] || 0, sampling_time: data[:sampling_time_ns] }
  end

  # Interleaved rounds for one configuration; returns a row Hash.
  def self.measure(work, freq, backend, mode, rounds)
    run_plain(work) # warm-up pair (discarded)
    run_profiled(work, freq, backend, mode)
    plain = []
    prof = []
    rounds.times do
      plain << run_plain(work)
      prof << run_profiled(work, freq, backend, mode)
    end
    per_sample = plain.zip(prof).map do |u, p|
      p[:samples].positive? ? (p[:cpu] - u[:cpu]).to_f / p[:samples] : Float::NAN
    end
    self_ns = prof.map { |p| p[:samples].positive? ? p[:sampling_time].to_f / p[:samples] : Float::NAN }
    {
      cpu_u: median(plain.map { |r| r[:cpu] }), cpu_p: median(prof.map { |r| r[:cpu] }),
      wall_u: median(plain.map { |r| r[:wall] }), wall_p: median(prof.map { |r| r[:wall] }),
      samples: median(prof.map { |r| r[:samples] }), triggers: median(prof.map { |r| r[:triggers] }),
      dropped: median(prof.map { |r| r[:dropped] }), stop_ms: median(prof.map { |r| r[:stop_cpu] }) / 1e6,
      ns_per_sample: median(per_sample), self_ns: median(self_ns),
      spread: per_sample.minmax,
    }
  end

  # --- output ------------------------------------------------------------------

  COLUMNS = [
    ["workload", 9, :s], ["mode", 4, :s], ["backend", 9, :s], ["Hz", 5, :d],
    ["samples", 7, :d], ["triggers", 8, :d], ["drop", 4, :d],
    ["CPU ms U", 8, :f1], ["CPU ms P", 8, :f1], ["CPU P/U", 7, :f3],
    ["wall ms U", 9, :f1], ["wall ms P", 9, :f1], ["wall P/U", 8, :f3],
    ["CPU ns/sample", 13, :d], ["(min..max)", 15, :s], ["job ns/sample", 13, :d], ["stop ms", 7, :f1],
  ].freeze

  def self.cells(name, mode, backend, freq, r)
    [name, mode, backend, freq, r[:samples].round, r[:triggers].round, r[:dropped],
     r[:cpu_u] / 1e6, r[:cpu_p] / 1e6, r[:cpu_p].to_f / r[:cpu_u],
     r[:wall_u] / 1e6, r[:wall_p] / 1e6, r[:wall_p].to_f / r[:wall_u],
     r[:ns_per_sample].nan? ? 0 : r[:ns_per_sample].round, "#{r[:spread][0].round}..#{r[:spread][1].round}",
     r[:self_ns].nan? ? 0 : r[:self_ns].round, r[:stop_ms]]
  end

  def self.fmt(value, kind)
    case kind
    when :d then value.is_a?(Numeric) ? value.round.to_s : value.to_s
    when :f1 then format("%.1f", value)
    when :f3 then format("%.3f", value)
    else value.to_s
    end
  end

  def self.header
    COLUMNS.map { |(h, w, _)| h.rjust(w) }.join(" ")
  end

  def self.line(values)
    COLUMNS.zip(values).map { |(_, w, k), v| fmt(v, k).rjust(w) }.join(" ")
  end

  def self.markdown(rows)
    out = ["| #{COLUMNS.map(&:first).join(' | ')} |", "|#{COLUMNS.map { |(_, _, k)| k == :s ? '---' : '---:' }.join('|')}|"]
    rows.each { |vals| out << "| #{COLUMNS.zip(vals).map { |(_, _, k), v| fmt(v, k) }.join(' | ')} |" }
    out.join("\n")
  end

  def self.main(argv)
    o = options(argv)
    $stdout.sync = true
    puts "rperf #{Rperf::VERSION} overhead benchmark — Ruby #{RUBY_VERSION}, " \
         "#{`nproc`.strip} CPUs, kernel #{`uname -r`.strip}, YJIT #{defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled? ? 'on' : 'off'}"
    puts "rounds=#{o[:rounds]} scale=#{o[:scale]} (interleaved U/P, medians; U = unprofiled, P = profiled)"
    puts
    puts header
    rows = []
    o[:workloads].each do |name|
      work = workload(name, o[:scale])
      o[:frequencies].each do |freq|
        o[:backends].each do |backend|
          o[:modes].each do |mode|
            r = measure(work, freq, backend, mode, o[:rounds])
            vals = cells(name, mode, backend, freq, r)
            rows << vals
            puts line(vals)
          end
        end
      end
    end
    if o[:markdown]
      puts
      puts markdown(rows)
    end
  end
end

OverheadBench.main(ARGV) if $PROGRAM_NAME == __FILE__
