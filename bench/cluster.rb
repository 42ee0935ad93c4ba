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
#   RSS        VmRSS of each worker (/proc/<pid>/status) every 5 s
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
#                                   [--max-requests=20000]
# (RPERF_CLUSTER_ROUNDS, _WINDOW, _CONCURRENCY, _MAX_REQUESTS also set them.)
# The defaults finish in about 2 minutes on 2 cores.

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
  RSS_EVERY = 5 # s
  BOOT_WAIT = 60
  STOP_WAIT = 90

  APP = <<~RUBY
    # The benchmarked app: three endpoints, each in a method of its own.
    module BenchApp
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

  def now = RperfServers.now

  def options(argv)
    opts = { rounds: 5, window: 4.0, concurrency: 8, max_requests: 20_000 }
    opts.each_key do |k|
      v = ENV["RPERF_CLUSTER_#{k.upcase}"]
      opts[k] = k == :window ? Float(v) : Integer(v) if v
    end
    OptionParser.new do |o|
      o.on("--rounds=N", Integer) { |v| opts[:rounds] = v }
      o.on("--window=SECONDS", Float) { |v| opts[:window] = v }
      o.on("--concurrency=N", Integer) { |v| opts[:concurrency] = v }
      o.on("--max-requests=N", Integer) { |v| opts[:max_requests] = v }
    end.parse!(argv)
    opts
  end

  # config/puma.rb of one cluster
  def config(dir, port, profiled)
    <<~RUBY
      require "json"
      require "rperf"
      require_relative "app"

      # Puma 8.0.2 on Ruby 3.3 can hang a worker at its stop (its TERM
      # trap's blocking write to the notify pipe races IO#close of it;
      # seen without any profiler) and then SIGKILLs it, losing its
      # profile: the write is made non-blocking here, as in
      # tests/ruby/test_puma_cluster.rb.
      require "puma/server"
      Puma::Server.prepend(Module.new do
        def notify_safely(message)
          @notify.write_nonblock(message)
        rescue IOError, NoMethodError, SystemCallError
          nil
        end
      end)

      workers 2
      threads 8, 8
      bind "tcp://127.0.0.1:#{port}"
      preload_app!
      app BenchApp
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

    def initialize(name, lib)
      @name = name
      @dir = Dir.mktmpdir("rperf-cluster-#{name}")
      @port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] } # free now; Puma binds it next
      File.write(File.join(@dir, "app.rb"), APP)
      File.write(File.join(@dir, "puma.rb"), RperfClusterBench.config(@dir, @port, name == "on"))
      @server = RperfServers::Server.new(RperfServers.env.merge("TMPDIR" => @dir),
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

    def ppid(pid)
      File.read("/proc/#{pid}/stat").then { |st| st[st.rindex(")") + 2..].split[1].to_i }
    rescue SystemCallError
      nil
    end

    # KiB of VmRSS per worker
    def rss
      workers.to_h do |pid|
        [pid, File.read("/proc/#{pid}/status")[/^VmRSS:\s+(\d+)/, 1].to_i]
      rescue SystemCallError
        [pid, nil]
      end
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

  # Every RSS_EVERY s: each worker's RSS and CPU, both clusters.
  def start_sampler(clusters, rows)
    t0 = now
    Thread.new do
      loop do
        sleep RSS_EVERY
        rows << [(now - t0).round(1), clusters.to_h { |c| c.read_cpu; [c.name, c.rss] }]
      end
    end
  end

  def run(opts, lib)
    clusters = CONFIGS.map { |n| Cluster.new(n, lib) }
    clusters.each(&:wait_ready)
    rows = []
    sampler = start_sampler(clusters, rows)
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
    statuses = clusters.to_h { |c| [c.name, c.stop] }
    report(opts, clusters, rates, rows, failures, statuses)
  ensure
    clusters&.each(&:cleanup)
  end

  def report(opts, clusters, rates, rows, failures, statuses)
    puts "bench/cluster.rb: Puma #{Gem::Specification.find_all_by_name('puma').first&.version || '8.0.2'}, " \
         "2 workers x 8 threads, preload_app!; on = Rperf.start(mode: :wall, frequency: 1000) in the master"
    puts format("rounds %d x %.1f s per endpoint and cluster, %d client threads; failed requests: %d; " \
                "masters' exits: %s", opts[:rounds], opts[:window], opts[:concurrency], failures,
                statuses.map { |n, s| "#{n} #{s.inspect}" }.join(", "))
    puts
    report_rates(rates, opts[:rounds])
    report_rss(clusters, rows)
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

  def report_rss(clusters, rows)
    puts "RSS per worker (MiB), every #{RSS_EVERY} s"
    pids = clusters.to_h { |c| [c.name, rows.flat_map { |_t, h| h[c.name].keys }.uniq.sort] }
    head = clusters.flat_map { |c| pids[c.name].each_with_index.map { |_p, i| "#{c.name} w#{i}" } }
    puts format("  %6s %s", "t (s)", head.map { |h| format("%9s", h) }.join)
    rows.each do |t, h|
      cells = clusters.flat_map { |c| pids[c.name].map { |p| h[c.name][p] } }
      puts format("  %6.1f %s", t, cells.map { |v| v ? format("%9.1f", v / 1024.0) : format("%9s", "-") }.join)
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
