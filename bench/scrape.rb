# frozen_string_literal: true

# bench/scrape.rb — what does a pprof scrape cost the application? (a
# measurement, not a test: it asserts nothing; every figure is a ratio of
# phases run side by side in this process)
#
# The application: THREADS Ruby threads doing a fixed CPU workload through
# many distinct call stacks (methods generated below, random chains of a
# fixed seed: ~STACKS distinct stacks, so that a window's snapshots and its
# encoding have real work), counting units of work done. Each round runs
# three phases of SECONDS each, in this order:
#   off       no profiler
#   on        Rperf.start(mode: :cpu, frequency: 1000), nobody scraping
#   scraped   the same run, with a scraper asking seconds=2 every 2 s
# The scraper is another process (as Alloy or Parca are): a Ruby loop
# started once and told over a pipe when to scrape; it records each
# answer's status, size and lateness (time to answer minus the 2 s).
# The listener is Rperf.serve on 127.0.0.1 in this process.
#
# Printed, as medians over the rounds: units of work per wall second and
# per CPU second of the whole process (the latter does not move when other
# programs take CPU from the machine), their ratios scraped/on (what the
# scrapes cost) and on/off (what profiling costs); the share of the
# sampled time spent by the listener itself (samples labelled
# rperf=serve); the scrapes' sizes and how late they answered; and what
# one scrape's own work costs (CPU time of the thread doing it: opening
# its window and closing it after 2 s of the workload, against one
# Rperf.snapshot of the same run taken right before; then encoding and
# gzipping its pprof).
#
# Then scrapes that overlap: BURST requests of seconds=BURST_SECONDS sent
# at once by the scraper (as several scrapers of one process do), ROUNDS
# times with the process's main thread sleeping (every other thread
# blocked) and ROUNDS times with THREADS threads that never block (the
# workload above); printed, how long after its N seconds each request was
# answered (median and max over all of them) and its status.
#
# Run: script/ruby bench/scrape.rb [--seconds=10] [--rounds=3] [--threads=2] [--stacks=1000]
#                                  [--burst=4] [--burst-seconds=2] [--only=burst]

require "rperf"
require "rperf/serve"
require "rperf/window"
require "rbconfig"
require "json"
require "etc"

module ScrapeBench
  OPTS = { seconds: 10.0, rounds: 3, threads: 2, stacks: 1000, burst: 4, burst_seconds: 2, only: nil }
  USAGE = "usage: bench/scrape.rb [--seconds=S] [--rounds=N] [--threads=N] [--stacks=N] [--burst=N] " \
          "[--burst-seconds=N] [--only=burst]"
  ARGV.each do |arg|
    key, value = arg.delete_prefix("--").tr("-", "_").split("=", 2)
    abort USAGE unless OPTS.key?(key&.to_sym) && value
    OPTS[key.to_sym] = case key
                       when "seconds" then Float(value)
                       when "only" then value == "burst" ? :burst : abort("--only takes burst, got #{value.inspect}")
                       else Integer(value)
                       end
  rescue ArgumentError
    abort "#{arg}: not a number; #{USAGE}"
  end

  SCRAPER = <<~'RUBY'
    require "net/http"
    require "json"
    port = Integer(ARGV[0])
    mono = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
    $stdout.sync = true
    on = false
    log = []
    # "burst K N": K requests of seconds=N at once; one line back: each
    # one's status and seconds from its request to its answer
    burst = lambda do |k, n|
      k.times.map do
        Thread.new do
          t = mono.()
          res = Net::HTTP.start("127.0.0.1", port, open_timeout: 30, read_timeout: 60) do |h|
            h.get("/debug/pprof/profile?seconds=#{n}")
          end
          { code: res.code, took: mono.() - t }
        end
      end.map(&:value)
    end
    reader = Thread.new do
      while (line = $stdin.gets)
        case line.chomp
        when "on" then on = true
        when "off" then on = false
        when /\Aburst (\d+) (\d+)\z/ then puts "burst #{JSON.generate(burst.($1.to_i, $2.to_i))}"
        end
      end
      on = nil
    end
    next_at = mono.()
    until on.nil?
      if on && mono.() >= next_at
        t = mono.()
        res = Net::HTTP.start("127.0.0.1", port, open_timeout: 30, read_timeout: 60) do |h|
          h.get("/debug/pprof/profile?seconds=2")
        end
        log << { code: res.code, bytes: res.body.to_s.bytesize, late: mono.() - t - 2 }
        next_at = t + 2 # due every 2 s; at once when late, as a scrape loop does
      else
        next_at = mono.() unless on
        sleep 0.01
      end
    end
    puts JSON.generate(log)
  RUBY

  module_function

  def mono = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # Methods m0..m199, real methods (their frames have their own names);
  # each calls the next method of its chain, the last one works. A unit of
  # work walks one of `stacks` fixed chains (depth 4..12).
  def build_workload(stacks)
    rng = Random.new(42)
    methods = 200
    methods.times do |i|
      singleton_class.module_eval(<<~M, __FILE__, __LINE__ + 1)
        def m#{i}(chain, k)
          return send(chain[k], chain, k + 1) if k < chain.size

          x = 0
          j = 0
          while j < 300
            x += j * #{i}
            j += 1
          end
          x
        end
      M
    end
    @chains = Array.new(stacks) { Array.new(4 + rng.rand(9)) { :"m#{rng.rand(methods)}" } }
  end

  def unit(n)
    chain = @chains[n % @chains.size]
    send(chain[0], chain, 1)
  end

  # [units of work per wall second, per CPU second of the process] over
  # `seconds`, by `threads` threads. The process's CPU includes the
  # listener's and the profiler's threads: per CPU second is what the work
  # costs whatever other programs take from the machine meanwhile.
  def phase(seconds, threads)
    cpu0 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    stop_at = mono + seconds
    counts = Array.new(threads) do |t|
      Thread.new do
        n = t
        n += 1 while mono < stop_at && unit(n)
        n - t
      end
    end.map(&:value)
    cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu0
    [counts.sum / seconds, counts.sum / cpu]
  end

  def serve_share(data)
    sets = (data[:label_sets] || []).each_index.select { |i| data[:label_sets][i] == { rperf: "serve" } }
    total = data[:aggregated_samples].sum { |s| s[1] }
    mine = data[:aggregated_samples].sum { |s| sets.include?(s[3]) ? s[1] : 0 }
    total.positive? ? mine.to_f / total : 0.0
  end

  def median(values)
    s = values.sort
    s.size.odd? ? s[s.size / 2] : (s[s.size / 2 - 1] + s[s.size / 2]) / 2.0
  end

  def run
    build_workload(OPTS[:stacks])
    server = Rperf.serve(port: 0)
    scraper = IO.popen([RbConfig.ruby, "-e", SCRAPER, server.port.to_s], "r+")
    results = { off: [], on: [], scraped: [] }
    shares = []
    stacks = []
    costs = []
    phase(1.0, OPTS[:threads]) # warm-up
    (OPTS[:only] == :burst ? 0 : OPTS[:rounds]).times do |r|
      results[:off] << phase(OPTS[:seconds], OPTS[:threads])
      Rperf.start(mode: :cpu, frequency: 1000)
      results[:on] << phase(OPTS[:seconds], OPTS[:threads])
      scraper.puts("on")
      results[:scraped] << phase(OPTS[:seconds], OPTS[:threads])
      scraper.puts("off")
      sleep 3 # the scrape in progress ends (its 2 s) before the run stops
      costs << scrape_cost
      data = Rperf.stop
      shares << serve_share(data)
      stacks << data[:unique_stacks]
      warn format("round %d: units/s off %.0f  on %.0f  scraped %.0f;  per CPU s off %.0f  on %.0f  scraped %.0f",
                  r + 1, *results.values.map { |v| v.last[0] }, *results.values.map { |v| v.last[1] })
    end
    bursts = [0, OPTS[:threads]].to_h { |busy| [busy, Array.new(OPTS[:rounds]) { burst(scraper, busy) }.flatten] }
    scraper.close_write
    log = JSON.parse(scraper.read, symbolize_names: true)
    scraper.close
    server.stop
    report(results, shares, stacks, log, costs) unless OPTS[:only] == :burst
    report_bursts(bursts)
  end

  # One burst of overlapping scrapes, with `busy` threads that never block
  # (0: the main thread sleeps, nothing else runs): [{code:, took:}, ...].
  def burst(scraper, busy)
    Rperf.start(mode: :cpu, frequency: 1000)
    running = true
    workers = Array.new(busy) do |t|
      Thread.new do
        n = t
        n += 1 while running && unit(n)
      end
    end
    scraper.puts("burst #{OPTS[:burst]} #{OPTS[:burst_seconds]}")
    line = scraper.gets.to_s
    running = false
    workers.each(&:join)
    Rperf.stop
    abort "bench/scrape.rb: the scraper said #{line.inspect}" unless line.start_with?("burst ")
    JSON.parse(line.delete_prefix("burst "), symbolize_names: true)
  end

  def report_bursts(bursts)
    n = OPTS[:burst_seconds]
    puts format("rperf %s, %s, %d CPUs", Rperf::VERSION, RUBY_DESCRIPTION, Etc.nprocessors) if OPTS[:only]
    puts format("%d scrapes of seconds=%d sent at once, %d rounds; answered after their %d s:", OPTS[:burst], n,
                OPTS[:rounds], n)
    bursts.each do |busy, answers|
      late = answers.map { |a| (a[:took] - n) * 1000 }
      codes = answers.map { |a| a[:code] }.tally.map { |c, k| "#{k}x #{c}" }.join(", ")
      who = busy.zero? ? "main thread sleeping, no other thread" : "#{busy} threads that never block"
      puts format("  %-40s %4.0f ms (median) / %4.0f ms (max)  (%s)", "#{who}:", median(late), late.max, codes)
    end
  end

  def thread_cpu = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)

  # [CPU s of one Rperf.snapshot, of one scrape's window (open and close),
  # of its pprof's encoding and gzip] on this thread, with the run going.
  def scrape_cost
    t = thread_cpu
    Rperf.snapshot
    snap = thread_cpu - t
    t = thread_cpu
    w = Rperf::Window.open
    opened = thread_cpu - t
    phase(2.0, OPTS[:threads])
    t = thread_cpu
    data = w.close
    window = opened + thread_cpu - t
    t = thread_cpu
    Rperf.gzip(Rperf._encode("pprof", data, nil))
    [snap, window, thread_cpu - t]
  end

  def report(results, shares, stacks, log, costs)
    wall = results.transform_values { |v| median(v.map(&:first)) }
    cpu = results.transform_values { |v| median(v.map(&:last)) }
    puts format("rperf %s, %s, %d CPUs", Rperf::VERSION, RUBY_DESCRIPTION, Etc.nprocessors)
    puts format("workload: %d threads, %d chains (%d distinct stacks in a run, median); %d rounds of %.0f s per phase",
                OPTS[:threads], OPTS[:stacks], median(stacks), OPTS[:rounds], OPTS[:seconds])
    puts "scrapes: seconds=2 every 2 s from another process; profiling: cpu, 1 kHz"
    puts format("%-22s %10s %10s %10s   %-14s %s", "median", "off", "on", "scraped", "scraped/on", "on/off")
    [["units/s", wall], ["units per CPU s", cpu]].each do |name, m|
      puts format("%-22s %10.0f %10.0f %10.0f   %-14.3f %.3f", name, m[:off], m[:on], m[:scraped],
                  m[:scraped] / m[:on], m[:on] / m[:off])
    end
    puts format("listener's share of the sampled time in scraped phases: %.2f %% (median)", median(shares) * 100)
    codes = log.map { |l| l[:code] }.tally
    late = log.map { |l| l[:late] * 1000 }
    puts format("scrapes: %d (%s), %.0f KiB each on average, answered %.0f ms (median) / %.0f ms (max) after their 2 s",
                log.size, codes.map { |c, n| "#{n}x #{c}" }.join(", "),
                log.sum { |l| l[:bytes] } / 1024.0 / [log.size, 1].max, median(late.empty? ? [0] : late), late.max || 0)
    snap, window, encode = 3.times.map { |i| median(costs.map { |c| c[i] }) * 1000 }
    puts format("one scrape's CPU: window of 2 s (open + close) %.1f ms = %.2f x one snapshot (%.1f ms); " \
                "pprof + gzip %.1f ms", window, window / snap, snap, encode)
  end
end

ScrapeBench.run
