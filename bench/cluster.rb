# frozen_string_literal: true

# bench/cluster.rb — what does profiling a whole Puma cluster from its
# master cost, and what does the merged profile hold? (a measurement, not a
# test; CTest never runs it)
#
# Two Puma clusters run side by side for the whole bench, each in cluster
# mode with preload_app!, 2 workers x 8 threads, on 127.0.0.1 (the pinned
# puma gem script/setup installs, tests/ruby/servers_helper.rb):
#   off  no profiler
#   on   Rperf.start(mode: :wall, frequency: 1000, output:) in the master's
#        before_fork (the default backend): the workers inherit the run and
#        join the master's output when they stop
# Each serves a Rack app with three endpoints:
#   /cpu    a fixed amount of Ruby arithmetic (~2 ms)
#   /io     a 2 ms sleep (the GVL released: what a database call does)
#   /alloc  ~3,000 small objects per request (keeps the GC busy)
# Load comes in windows: per round, each endpoint on each cluster for
# --window seconds (at most --max-requests requests), the order of off/on
# alternating each round so load changes on a shared machine hit both.
# This process is the client: --concurrency threads, one connection per
# request (HTTP/1.0).
#
# Printed:
#   req/s      per endpoint, off and on (medians over rounds) and on/off
#              (median of per-round ratios)
#   memory     per worker, what it reads about itself every 5 s from its
#              fork (a thread started in Puma's on_worker_boot, both
#              clusters; line k is an on-worker's window k): VmRSS; its
#              anonymous memory resident by where it lies (/proc/self/smaps:
#              brk = glibc's main arena, arenas = glibc's other arenas,
#              stacks, other = Ruby's heap pages and mmapped blocks); the
#              bytes glibc's arenas hold (mallinfo2, through Fiddle);
#              Ruby's heap_allocated_pages, heap_live_slots and GC count;
#              with --profiler-memory, profiler_memory_bytes (an on-worker
#              takes Rperf.snapshot for it, which adds a little garbage)
#   RSS verdict  per worker, VmRSS at window 2 and window 22 (--last-window)
#              and the ratio, and on a run of more than 42 windows over its
#              last 20 too (the plateau, after the warm-up), off and on side
#              by side (the target: an on-worker flat within 10 %), with
#              what changed in between; then, after the load, each worker's
#              VmRSS before and after malloc_trim(0): what glibc keeps
#              resident of the memory freed
#   snapshots  what Rperf.snapshot in the on-master holds every 5 s (a
#              thread started in Puma's after_booted hook): samples,
#              process_count and pids, and how many of the running workers
#              it holds (a running worker writes its window every
#              RPERF_WINDOW_SECONDS, 5 s: a snapshot holds it up to a
#              window late)
#   per worker, at the end: the samples of its pid in the merged output
#              (total wall weight, and the part not in [GVL blocked]/[GVL
#              wait]: the time it held the GVL) against its CPU time from
#              /proc/<pid>/stat (utime + stime, read until its stop)
#
# Run: script/ruby bench/cluster.rb [--rounds=5] [--window=4] [--concurrency=8]
#        [--max-requests=20000] [--duration=SECONDS] [--last-window=22]
#        [--profiler-memory] [--save=PATH.json] [--env=VAR=VALUE]
#        [--on-env=VAR=VALUE]
# --duration sets the rounds from a length of load (a round: each endpoint
# on each cluster for --window s, 24 s by default); --save writes every
# worker's lines as JSON; --env sets a variable in both clusters (e.g.
# MALLOC_ARENA_MAX=2), --on-env in the on-cluster only (e.g.
# RPERF_WINDOW_SECONDS). RPERF_CLUSTER_ROUNDS, _WINDOW, _CONCURRENCY,
# _MAX_REQUESTS, _DURATION, _LAST, _PROFILER_MEMORY also set them.
# The defaults (5 rounds, 2 minutes of load, 24 windows) finish in about 2.5
# minutes on 2 cores; the long run of docs/performance.md ("A server's
# workers") is --duration=360 (~7 minutes).

require "json"
require "optparse"
require "socket"
require "tmpdir"
require "fileutils"
require "rperf"
require "rperf/report"
require_relative "../tests/ruby/servers_helper"

module RperfClusterBench
  ENDPOINTS = %w[cpu io alloc].freeze
  CONFIGS = %w[off on].freeze
  RSS_EVERY = 5 # s: RPERF_WINDOW_SECONDS, an on-worker's window
  # the RSS verdict: VmRSS at a worker's window FIRST_WINDOW against
  # LAST_WINDOW (or its last line), 20 windows apart; a longer run's last
  # 20 windows too
  FIRST_WINDOW = 2
  LAST_WINDOW = 22
  BOOT_WAIT = 60
  STOP_WAIT = 90

  # The app's CPU-bound and IO-bound endpoints (bench/soak_cluster.rb
  # serves them too).
  CPU_AND_IO = <<~RUBY
    def self.cpu
      x = 0
      i = 0
      while i < 60_000
        x += i * i % 7
        i += 1
      end
      x
    end

    def self.io = sleep(0.002)
  RUBY

  APP = <<~RUBY
    # The benchmarked app: three endpoints, each in a method of its own.
    module BenchApp
      #{CPU_AND_IO}
      def self.alloc
        keep = []
        1000.times { |i| keep << ["x" * 32, { i => i.to_s }] }
        keep.size
      end

      def self.call(env)
        case env["PATH_INFO"]
        when "/cpu" then cpu
        when "/io" then io
        when "/alloc" then alloc
        end
        [200, { "content-type" => "text/plain" }, [Process.pid.to_s]]
      end
    end
  RUBY

  module_function

  # Each worker's own memory, every RSS_EVERY s from its boot (Puma's
  # on_worker_boot, both clusters), appended as a JSON line to
  # <cluster dir>/worker-<pid>.jsonl: line k is written k * RSS_EVERY s
  # after the fork, when an on-worker writes its k-th window.
  STATS = <<~RUBY
    require "json"
    require "fiddle"

    module BenchStats
      # glibc's mallinfo2() returns a struct of 10 size_t; on x86-64 a
      # struct that large is returned through a pointer the caller passes
      # as the first argument, which Fiddle can do
      MALLINFO2 = RUBY_PLATFORM.start_with?("x86_64-linux") &&
                  Fiddle::Function.new(Fiddle.dlopen(nil)["mallinfo2"], [Fiddle::TYPE_VOIDP], Fiddle::TYPE_VOIDP)

      module_function

      def kib(text, key) = text[/^\#{key}:\\s+(\\d+)/, 1]&.to_i

      # glibc malloc: [bytes in use (uordblks + hblkhd: mmapped chunks),
      # bytes its arenas hold (arena), arenas' free bytes (fordblks)]
      def malloc
        return [nil, nil, nil] unless MALLINFO2

        buf = Fiddle::Pointer.malloc(80, Fiddle::RUBY_FREE)
        MALLINFO2.call(buf)
        arena, _ord, _smb, _hbl, hblkhd, _usm, _fsm, uord, ford, _keep = buf[0, 80].unpack("Q10")
        [uord + hblkhd, arena, ford]
      rescue StandardError, Fiddle::DLError
        [nil, nil, nil]
      end

      # KiB of anonymous memory resident, by where it is: brk (glibc's main
      # arena), arenas (its other arenas' heaps: 64 MiB-aligned mappings),
      # stacks (a mapping above a guard page: thread stacks), other
      # (Ruby's heap pages, mmapped chunks, the profiler's page blocks)
      def maps
        out = Hash.new(0)
        prev_guard = false
        kind = nil
        File.foreach("/proc/self/smaps") do |l|
          if (m = l.match(/\\A(\\h+)-(\\h+) (\\S{4}) \\S+ \\S+ \\d+\\s*(.*)$/))
            start, stop, perms, path = m[1].to_i(16), m[2].to_i(16), m[3], m[4]
            kind = if path == "[heap]" then "brk"
                   elsif path == "[stack]" then "stacks"
                   elsif !path.empty? then nil
                   elsif (start % (64 << 20)).zero? && perms.start_with?("rw") then "arenas"
                   elsif prev_guard && perms.start_with?("rw") then "stacks"
                   else "other"
                   end
            prev_guard = perms == "---p" && path.empty? && stop - start <= 65_536
          elsif kind && l.start_with?("Anonymous:")
            out[kind] += l.split[1].to_i
          end
        end
        out
      rescue SystemCallError
        {}
      end

      def line(age)
        status = File.read("/proc/self/status")
        rollup = File.read("/proc/self/smaps_rollup") rescue ""
        gc = GC.stat
        used, arenas, free = malloc
        snap = ENV["BENCH_PROFILER_MEMORY"] == "1" && defined?(Rperf) && Rperf.running? ? Rperf.snapshot : nil
        { "age" => age.round(1), "rss_kb" => kib(status, "VmRSS"), "anon_kb" => kib(rollup, "Anonymous"),
          "threads" => kib(status, "Threads"),
          "live_slots" => gc[:heap_live_slots], "heap_pages" => gc[:heap_allocated_pages],
          "gc_count" => gc[:count], "major_gc_count" => gc[:major_gc_count],
          "malloc_used" => used, "malloc_arenas" => arenas, "malloc_free" => free,
          "prof_bytes" => snap && snap[:profiler_memory_bytes], "maps" => maps }
      end

      # the end's probe: VmRSS once glibc has given back the free pages of
      # its arenas (what the allocator keeps rather than what is in use)
      def trimmed
        trim = Fiddle::Function.new(Fiddle.dlopen(nil)["malloc_trim"], [Fiddle::TYPE_SIZE_T], Fiddle::TYPE_INT)
        t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        trim.call(0)
        { "trimmed_rss_kb" => kib(File.read("/proc/self/status"), "VmRSS"),
          "trim_ms" => (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t) * 1000 }
      rescue StandardError, Fiddle::DLError
        {}
      end

      def start(dir)
        t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        out = File.join(dir, "worker-\#{Process.pid}.jsonl")
        probe = File.join(dir, "trim")
        Thread.new do
          k = 0
          loop do
            k += 1
            sleep [t0 + k * #{RSS_EVERY} - Process.clock_gettime(Process::CLOCK_MONOTONIC), 0].max
            l = line(Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0)
            l.merge!(trimmed) if File.exist?(probe)
            File.write(out, JSON.dump(l) + "\\n", mode: "a")
            break if File.exist?(probe)
          end
        end
      end
    end
  RUBY

  def now = RperfServers.now

  def options(argv)
    opts = { rounds: 5, window: 4.0, concurrency: 8, max_requests: 20_000, duration: nil, last: LAST_WINDOW,
             env: {}, on_env: {}, profiler_memory: false }
    opts.each_key do |k|
      v = ENV["RPERF_CLUSTER_#{k.upcase}"]
      next unless v && !opts[k].is_a?(Hash)

      opts[k] = case k
                when :window, :duration then Float(v)
                when :profiler_memory then v == "1"
                else Integer(v)
                end
    end
    OptionParser.new do |o|
      o.on("--rounds=N", Integer) { |v| opts[:rounds] = v }
      o.on("--duration=SECONDS", Float) { |v| opts[:duration] = v }
      o.on("--last-window=N", Integer) { |v| opts[:last] = v }
      o.on("--profiler-memory") { opts[:profiler_memory] = true }
      o.on("--save=PATH") { |v| opts[:save] = v }
      o.on("--env=VAR=VALUE") { |v| opts[:env].store(*v.split("=", 2)) }
      o.on("--on-env=VAR=VALUE") { |v| opts[:on_env].store(*v.split("=", 2)) }
      o.on("--window=SECONDS", Float) { |v| opts[:window] = v }
      o.on("--concurrency=N", Integer) { |v| opts[:concurrency] = v }
      o.on("--max-requests=N", Integer) { |v| opts[:max_requests] = v }
    end.parse!(argv)
    # a round: each endpoint on each cluster for --window seconds
    opts[:rounds] = (opts[:duration] / (ENDPOINTS.size * CONFIGS.size * opts[:window])).ceil if opts[:duration]
    opts
  end

  # config/puma.rb of one cluster
  def config(dir, port, profiled)
    <<~RUBY
      require "json"
      require "rperf"
      require_relative "app"

      #{RperfServers::PUMA_NOTIFY_NONBLOCKING}
      workers 2
      threads 8, 8
      bind "tcp://127.0.0.1:#{port}"
      preload_app!
      app BenchApp
      require_relative "stats"
      on_worker_boot { BenchStats.start(#{dir.inspect}) }
      #{profiled ? on_config(dir) : ''}
    RUBY
  end

  def on_config(dir)
    <<~RUBY
      before_fork do
        Rperf.start(mode: :wall, frequency: 1000, output: "#{dir}/cluster.pb.gz") unless Rperf.running?
      end

      # the whole cluster from the root, every #{RSS_EVERY} s (no clear:
      # the output at exit keeps everything)
      after_booted do
        Thread.new do
          t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          loop do
            sleep #{RSS_EVERY}
            snap = Rperf.snapshot or break
            line = { "t" => (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0).round(1),
                     "samples_ms" => snap[:aggregated_samples].sum { |s| s[1] } / 1e6,
                     "sampling_count" => snap[:sampling_count], "process_count" => snap[:process_count],
                     "pids" => (snap[:label_sets] || []).filter_map { |s| s[:pid] }.uniq }
            File.write("#{dir}/snapshots.jsonl", JSON.dump(line) + "\\n", mode: "a")
          end
        end
      end
    RUBY
  end

  # One cluster: its directory, port, server process and workers.
  class Cluster
    attr_reader :name, :dir, :port

    def initialize(name, lib, env = {})
      @name = name
      @dir = Dir.mktmpdir("rperf-cluster-#{name}")
      @port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] } # free now; Puma binds it next
      File.write(File.join(@dir, "app.rb"), APP)
      File.write(File.join(@dir, "stats.rb"), STATS)
      File.write(File.join(@dir, "puma.rb"), RperfClusterBench.config(@dir, @port, name == "on"))
      @server = RperfServers::Server.new(RperfServers.env.merge("TMPDIR" => @dir, **env),
                                         [RbConfig.ruby, "-I", lib, RperfServers.bin("puma"), "-C", "puma.rb"],
                                         chdir: @dir, log: File.join(@dir, "puma.log"))
      @cpu = {}
    end

    def wait_ready
      RperfServers.wait_for(BOOT_WAIT, unless_gone: @server) { workers.size == 2 && get("/io") } or
        abort("#{name}: the cluster did not start\n#{@server.tail}")
    end

    def workers
      (Dir.children("/proc").grep(/\A\d+\z/).map(&:to_i).select { |pid| ppid(pid) == @server.pid }.sort)
        .tap { |pids| (@seen ||= []).concat(pids).uniq! }
    end

    # every worker pid seen so far
    def worker_pids_seen = (@seen || []).sort

    # {pid => windows written into the run's directory} (the master's
    # snapshots take no clear: every window stays there until its stop)
    def windows_written
      Dir.glob(File.join(@dir, "rperf-run-*", "*.w*.pb.gz")).map { |f| File.basename(f).to_i }.tally
    end

    # Each worker's next line is its last, with its VmRSS after
    # malloc_trim(0) (STATS).
    def probe_trim
      File.write(File.join(@dir, "trim"), "")
      pids = workers
      RperfServers.wait_for(RSS_EVERY * 3) { pids.all? { |pid| worker_lines[pid]&.last&.key?("trimmed_rss_kb") } }
    end

    # {pid => [line, ...]} of the workers' own memory lines (STATS)
    def worker_lines
      Dir.glob(File.join(@dir, "worker-*.jsonl")).to_h do |f|
        [File.basename(f)[/\d+/].to_i, File.readlines(f).map { |l| JSON.parse(l) }]
      end
    end

    def ppid(pid)
      File.read("/proc/#{pid}/stat").then { |st| st[st.rindex(")") + 2..].split[1].to_i }
    rescue SystemCallError
      nil
    end

    # Remembers each worker's utime + stime (s) while it lives: the last
    # reading before its stop is its CPU time.
    def read_cpu
      hz = 100.0 # USER_HZ on Linux
      workers.each do |pid|
        f = File.read("/proc/#{pid}/stat").then { |st| st[st.rindex(")") + 2..].split }
        @cpu[pid] = (f[11].to_i + f[12].to_i) / hz
      rescue SystemCallError
        nil
      end
      @cpu
    end

    # -> true when answered 200
    def get(path)
      TCPSocket.open("127.0.0.1", @port) do |s|
        s.timeout = 30
        s.write("GET #{path} HTTP/1.0\r\n\r\n")
        s.read.start_with?("HTTP/1.1 200", "HTTP/1.0 200")
      end
    rescue IOError, SystemCallError
      false
    end

    def stop
      read_cpu
      st = @server.stop(:TERM, seconds: STOP_WAIT)
      @server.kill
      st
    end

    def cleanup
      @server.kill
      FileUtils.remove_entry(@dir)
    end
  end

  # Requests to `path` from `threads` threads for `seconds` (at most
  # `max` requests). -> [requests answered 200, failures, seconds]
  def drive(cluster, path, seconds, threads, max)
    ok = bad = sent = 0
    lock = Mutex.new
    t0 = now
    deadline = t0 + seconds
    Array.new(threads) do
      Thread.new do
        loop do
          go = lock.synchronize { sent < max && now < deadline && (sent += 1) }
          break unless go

          r = cluster.get(path)
          lock.synchronize { r ? ok += 1 : bad += 1 }
        end
      end
    end.each(&:join)
    [ok, bad, now - t0]
  end

  def median(list)
    s = list.compact.sort
    s.empty? ? nil : (s[(s.size - 1) / 2] + s[s.size / 2]) / 2.0
  end

  # Every RSS_EVERY s: each worker's CPU, both clusters (the last reading
  # before a worker's stop is its CPU time).
  def start_sampler(clusters)
    Thread.new do
      loop do
        sleep RSS_EVERY
        clusters.each(&:read_cpu)
      end
    end
  end

  def run(opts, lib)
    clusters = CONFIGS.map do |n|
      env = opts[:env].merge(n == "on" ? opts[:on_env] : {})
      env["BENCH_PROFILER_MEMORY"] = "1" if opts[:profiler_memory]
      Cluster.new(n, lib, env)
    end
    clusters.each(&:wait_ready)
    sampler = start_sampler(clusters)
    rates = Hash.new { |h, k| h[k] = [] } # [config, endpoint] => req/s per round
    failures = 0
    opts[:rounds].times do |r|
      ENDPOINTS.each do |ep|
        order = r.even? ? clusters : clusters.reverse
        order.each do |c|
          ok, bad, secs = drive(c, "/#{ep}", opts[:window], opts[:concurrency], opts[:max_requests])
          failures += bad
          rates[[c.name, ep]] << ok / secs
        end
      end
      warn format("round %d/%d done", r + 1, opts[:rounds])
    end
    sampler.kill
    windows = clusters.find { |c| c.name == "on" }.windows_written
    clusters.each(&:probe_trim)
    save(opts[:save], clusters, windows) if opts[:save]
    statuses = clusters.to_h { |c| [c.name, c.stop] }
    report(opts, clusters, rates, failures, statuses, windows)
  ensure
    clusters&.each(&:cleanup)
  end

  def report(opts, clusters, rates, failures, statuses, windows)
    puts "bench/cluster.rb: Puma #{Gem::Specification.find_all_by_name('puma').first&.version || '8.0.2'}, " \
         "2 workers x 8 threads, preload_app!; on = Rperf.start(mode: :wall, frequency: 1000) in the master"
    puts format("rounds %d x %.1f s per endpoint and cluster, %d client threads; failed requests: %d; " \
                "masters' exits: %s", opts[:rounds], opts[:window], opts[:concurrency], failures,
                statuses.map { |n, s| "#{n} #{s.inspect}" }.join(", "))
    puts
    report_rates(rates, opts[:rounds])
    report_memory(clusters, windows)
    report_rss_verdict(clusters, opts[:last])
    on = clusters.find { |c| c.name == "on" }
    report_snapshots(on)
    report_workers(on)
  end

  def report_rates(rates, rounds)
    puts "requests/s (median over #{rounds} rounds)"
    puts format("  %-6s %10s %10s %8s", "", "off", "on", "on/off")
    ENDPOINTS.each do |ep|
      off = rates[["off", ep]]
      on = rates[["on", ep]]
      ratio = median(off.zip(on).map { |a, b| a.positive? ? b / a : nil })
      puts format("  %-6s %10.0f %10.0f %8.3f", "/#{ep}", median(off), median(on), ratio || 0)
    end
    puts
  end

  MIB = 1024.0 * 1024

  # --save: every worker's lines as JSON
  def save(path, clusters, windows)
    File.write(path, JSON.pretty_generate(clusters.to_h do |c|
      [c.name, c.worker_lines.to_h { |pid, lines| [pid, { "windows" => windows[pid], "lines" => lines }] }]
    end))
  end

  # Per worker, its own lines (every RSS_EVERY s from its fork; thinned to
  # ~25 rows on a long run).
  def report_memory(clusters, windows)
    puts "memory per worker (MiB), from the worker itself every #{RSS_EVERY} s after its fork (line k: " \
         "an on-worker's window k): VmRSS; anon = its anonymous memory (smaps_rollup), resident in brk (glibc's " \
         "main arena), arenas (its other arenas), stacks (threads'), other (Ruby's heap pages, mmapped chunks); " \
         "malloc = what glibc's arenas hold (mallinfo2 arena); pages = Ruby's heap_allocated_pages (64 KiB), " \
         "live = heap_live_slots; prof = profiler_memory_bytes (with --profiler-memory: Rperf.snapshot in the worker)"
    clusters.each do |c|
      c.worker_lines.sort.each_with_index do |(pid, lines), i|
        extra = c.name == "on" ? ", #{windows[pid] || 0} windows written" : ""
        puts "  #{c.name} w#{i} (pid #{pid}#{extra})"
        puts format("    %7s %4s %6s %6s %6s %6s %6s %6s %7s %6s %9s %6s %6s", "t (s)", "k", "RSS", "anon", "brk",
                    "arenas", "stacks", "other", "malloc", "pages", "live (k)", "GCs", "prof")
        step = [(lines.size / 25.0).ceil, 1].max
        lines.each_with_index do |l, k|
          next unless (k % step).zero? || k == lines.size - 1

          m = l["maps"] || {}
          puts format("    %7.1f %4d %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f %7.1f %6d %9.1f %6d %6s", l["age"], k + 1,
                      l["rss_kb"] / 1024.0, l["anon_kb"].to_i / 1024.0,
                      *%w[brk arenas stacks other].map { |x| m[x].to_i / 1024.0 }, l["malloc_arenas"].to_i / MIB,
                      l["heap_pages"], l["live_slots"] / 1000.0, l["gc_count"],
                      l["prof_bytes"] ? format("%.2f", l["prof_bytes"] / MIB) : "-")
        end
      end
    end
    puts
  end

  # The target: a profiled worker's VmRSS flat (within 10 %) over the 20
  # windows from FIRST_WINDOW, side by side with the unprofiled workers'.
  def report_rss_verdict(clusters, last)
    puts "RSS verdict: VmRSS (MiB) of each worker at window #{FIRST_WINDOW} and window #{last}, and on a run " \
         "longer than #{2 * (last - FIRST_WINDOW) + FIRST_WINDOW} windows over its last #{last - FIRST_WINDOW} " \
         "(the plateau); target: an on-worker's ratio within 1.10"
    puts format("  %-6s %9s %7s %7s %6s   %s", "worker", "t (s)", "RSS", "RSS", "ratio",
                "change (MiB): anon, of it in glibc's arenas, Ruby heap pages, prof")
    span = last - FIRST_WINDOW
    clusters.product([FIRST_WINDOW, nil]).each do |c, from|
      c.worker_lines.sort.each_with_index do |(_pid, lines), i|
        lines = lines.reject { |l| l.key?("trimmed_rss_kb") }
        # a longer run: its last `span` windows too, after the warm-up
        next if from.nil? && lines.size < 2 * span + FIRST_WINDOW

        ia = from ? from - 1 : lines.size - 1 - span
        ib = from ? [last, lines.size].min - 1 : lines.size - 1
        a = lines[ia]
        b = lines[ib]
        next puts(format("  %-6s (too few lines: %d)", "#{c.name} w#{i}", lines.size)) unless a && b && ib > ia

        glibc = ->(l) { (l["maps"] || {}).values_at("brk", "arenas").sum(&:to_i) / 1024.0 }
        puts format("  %-6s %9s %7.1f %7.1f %6.3f   anon %+.1f, arenas %+.1f, heap %+.1f, prof %s",
                    "#{c.name} w#{i}", "#{a['age'].round}-#{b['age'].round}", a["rss_kb"] / 1024.0,
                    b["rss_kb"] / 1024.0, b["rss_kb"].fdiv(a["rss_kb"]), (b["anon_kb"].to_i - a["anon_kb"].to_i) / 1024.0,
                    glibc.(b) - glibc.(a), (b["heap_pages"] - a["heap_pages"]) * 65_536 / MIB,
                    a["prof_bytes"] ? format("%+.2f", (b["prof_bytes"] - a["prof_bytes"]) / MIB) : "-")
      end
    end
    puts "  at the end (after the load): VmRSS, and VmRSS once malloc_trim(0) gave glibc's free pages back"
    clusters.each do |c|
      c.worker_lines.sort.each_with_index do |(_pid, lines), i|
        l = lines.last
        next unless l&.key?("trimmed_rss_kb")

        puts format("  %-6s %9s %7.1f %7.1f  (%+.1f)", "#{c.name} w#{i}", l["age"].round, l["rss_kb"] / 1024.0,
                    l["trimmed_rss_kb"] / 1024.0, (l["trimmed_rss_kb"] - l["rss_kb"]) / 1024.0)
      end
    end
    puts
  end

  def report_snapshots(on)
    path = File.join(on.dir, "snapshots.jsonl")
    lines = File.exist?(path) ? File.readlines(path).map { |l| JSON.parse(l) } : []
    running = on.worker_pids_seen
    puts "Rperf.snapshot in the on-master every #{RSS_EVERY} s (no clear: cumulative; workers #{running.inspect})"
    lines.each do |l|
      puts format("  t=%6.1f  samples %10.1f ms  master's sampling_count %6d  process_count %s  " \
                  "running workers in it %d/%d", l["t"], l["samples_ms"], l["sampling_count"],
                  l["process_count"].inspect, (l["pids"] & running).size, running.size)
    end
    puts
  end

  GVL_OFF = ["[GVL blocked]", "[GVL wait]"].freeze

  def report_workers(on)
    out = File.join(on.dir, "cluster.pb.gz")
    unless File.exist?(out)
      puts "no merged output (#{out})"
      return
    end
    data = Rperf::Report.load(out).data
    wall = Hash.new(0)
    held = Hash.new(0)
    data[:aggregated_samples].each do |frames, w, _seq, set|
      pid = data[:label_sets][set][:pid]
      wall[pid] += w
      held[pid] += w unless GVL_OFF.include?(frames[0][1])
    end
    cpu = on.read_cpu
    puts "per worker of the on-cluster: the merged output's samples of its pid (wall mode) against its CPU " \
         "(/proc/<pid>/stat)"
    puts format("  %8s %12s %16s %14s %10s", "pid", "sampled wall", "holding the GVL", "CPU (/proc)", "GVL/CPU")
    (wall.keys.compact | cpu.keys).sort.each do |pid|
      c = cpu[pid]
      puts format("  %8d %10.2f s %14.2f s %12s %10s", pid, wall[pid] / 1e9, held[pid] / 1e9,
                  c ? format("%.2f s", c) : "-", c&.positive? ? format("%.3f", held[pid] / 1e9 / c) : "-")
    end
    puts format("  master (no pid label): %.2f s sampled wall; process_count in the output: %d",
                wall[nil] / 1e9, 1 + wall.keys.compact.size)
  end

  def main(argv)
    missing = RperfServers.skip_reason("puma")
    abort("bench/cluster.rb: #{missing}") if missing
    lib = $LOAD_PATH.find { |d| File.exist?(File.join(d.to_s, "rperf.so")) } or
      abort("bench/cluster.rb: run it with script/ruby (rperf.so on the load path)")
    run(options(argv), lib)
  end
end

RperfClusterBench.main(ARGV) if $PROGRAM_NAME == __FILE__
