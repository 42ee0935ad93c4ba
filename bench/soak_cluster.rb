# frozen_string_literal: true

# bench/soak_cluster.rb — a Puma cluster left profiled: does the run's
# directory stay small, the master's memory flat and its exit merge short,
# however long it ran? (a measurement, not a test; CTest never runs it)
#
# One Puma cluster (the pinned gem script/setup installs,
# tests/ruby/servers_helper.rb): cluster mode, preload_app!, 2 workers x 8
# threads on 127.0.0.1, its app behind Rperf::Middleware. The master starts
# the run in before_fork (Rperf.start(mode:, frequency: 1000, output:),
# --allocations adds allocations: true) and a listener (Rperf.serve), so
# the workers inherit the run and write a window every
# RPERF_WINDOW_SECONDS (--window-seconds) into the run's directory in
# TMPDIR. This process is the load and the scraper:
#   requests  --concurrency threads throughout, one connection per request
#             (HTTP/1.0) to /cpu (~2 ms of Ruby), /io (a 2 ms sleep) and
#             /items/<n> (a few hundred objects), in turn
#   scrapes   every --scrape-every s (15) a GET /debug/pprof/profile?
#             seconds=--scrape-seconds (14) to the master's listener, as
#             Grafana Alloy's pyroscope.scrape asks by default
# After --duration s (120) the master gets TERM; Puma stops the workers
# (each writes its last part) and runs after_stopped in its TERM trap,
# where the bench's config calls Rperf.stop and times it: the merge of
# every worker's parts and the output's write, what the exit would do.
#
# Printed:
#   every --every s (10): the run directory's part files and bytes, the
#     master's VmRSS, the scrapes answered so far
#   the stop in after_stopped: its time, the part files it found, the
#     output's size and process_count
#   per worker pid: the weight of its samples summed over the scrapes,
#     against the output's (the scrapes cover --scrape-seconds of every
#     --scrape-every, and none of the first and last seconds)
#
# Run: script/ruby bench/soak_cluster.rb [--duration=120] [--window-seconds=5]
#        [--allocations] [--mode=wall] [--concurrency=2] [--every=10]
#        [--scrape-every=15] [--scrape-seconds=14]

# the cluster bench's requires, its servers' set-up and its app's
# endpoints (bench/cluster.rb runs nothing when required)
require_relative "cluster"

module RperfSoakCluster
  APP = <<~RUBY
    module SoakApp
      #{RperfClusterBench::CPU_AND_IO}
      def self.items(n)
        Array.new(300) { |i| "item-\#{n}-\#{i}" }.size
      end

      def self.call(env)
        case env["PATH_INFO"]
        when "/cpu" then cpu
        when "/io" then io
        when %r{\\A/items/(\\d+)\\z} then items(Regexp.last_match(1).to_i)
        end
        [200, { "content-type" => "text/plain" }, [Process.pid.to_s]]
      end
    end
  RUBY

  module_function

  def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  def options(argv)
    opts = { duration: 120.0, window_seconds: 5.0, allocations: false, mode: "wall", concurrency: 2, every: 10.0,
             scrape_every: 15.0, scrape_seconds: 14 }
    OptionParser.new do |o|
      o.on("--duration=SECONDS", Float) { |v| opts[:duration] = v }
      o.on("--window-seconds=SECONDS", Float) { |v| opts[:window_seconds] = v }
      o.on("--allocations") { opts[:allocations] = true }
      o.on("--mode=MODE", %w[cpu wall]) { |v| opts[:mode] = v }
      o.on("--concurrency=N", Integer) { |v| opts[:concurrency] = v }
      o.on("--every=SECONDS", Float) { |v| opts[:every] = v }
      o.on("--scrape-every=SECONDS", Float) { |v| opts[:scrape_every] = v }
      o.on("--scrape-seconds=N", Integer) { |v| opts[:scrape_seconds] = v }
    end.parse!(argv)
    opts
  end

  def config(dir, port, serve_port, opts)
    <<~RUBY
      require "json"
      require "rperf"
      require "rperf/middleware"
      require "rperf/serve"
      require_relative "app"

      #{RperfServers::PUMA_NOTIFY_NONBLOCKING}
      workers 2
      threads 8, 8
      bind "tcp://127.0.0.1:#{port}"
      preload_app!
      app Rperf::Middleware.new(SoakApp)

      before_fork do
        unless Rperf.running?
          Rperf.start(mode: :#{opts[:mode]}, frequency: 1000, allocations: #{opts[:allocations]},
                      output: "#{dir}/cluster.pb.gz")
          Rperf.serve(port: #{serve_port})
        end
      end

      # in the master's TERM trap, every worker stopped: the stop (merge
      # and output) the exit would make
      after_stopped do
        run_dir = Dir.glob("#{dir}/rperf-run-*").first
        files = run_dir ? Dir.children(run_dir).count { |n| n.end_with?(".pb.gz") } : 0
        t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        data = Rperf.stop
        s = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
        File.write("#{dir}/stop.json", JSON.dump("stop_s" => s, "files" => files,
                                                  "process_count" => data && data[:process_count]))
      end
    RUBY
  end

  def free_port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }

  def get(port, path, timeout: 30)
    TCPSocket.open("127.0.0.1", port) do |s|
      s.timeout = timeout
      s.write("GET #{path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
      head, body = s.read.split("\r\n\r\n", 2)
      head.to_s.start_with?("HTTP/1.1 200", "HTTP/1.0 200") ? body : nil
    end
  rescue IOError, SystemCallError
    nil
  end

  def rss_kib(pid)
    File.read("/proc/#{pid}/status")[/^VmRSS:\s+(\d+)/, 1]&.to_i
  rescue SystemCallError
    nil
  end

  # [part files, bytes] in the run's directory
  def run_dir_state(dir)
    run = Dir.glob(File.join(dir, "rperf-run-*")).first
    return [0, 0] unless run

    files = Dir.children(run).map { |n| File.join(run, n) }
    [files.count { |f| f.end_with?(".pb.gz") }, files.sum { |f| File.size?(f).to_i }]
  rescue SystemCallError
    [0, 0]
  end

  # {pid => weight} of a profile's samples (the master's: nil)
  def by_pid(data)
    data[:aggregated_samples].each_with_object(Hash.new(0)) do |(_frames, w, _seq, set), h|
      h[data[:label_sets][set][:pid]] += w
    end
  end

  def run(opts)
    dir = Dir.mktmpdir("rperf-soak-cluster")
    port = free_port
    serve_port = free_port
    File.write(File.join(dir, "app.rb"), APP)
    File.write(File.join(dir, "puma.rb"), config(dir, port, serve_port, opts))
    lib = $LOAD_PATH.find { |d| File.exist?(File.join(d.to_s, "rperf.so")) }
    env = RperfServers.env.merge("TMPDIR" => dir, "RPERF_WINDOW_SECONDS" => opts[:window_seconds].to_s)
    puma = RperfServers::Server.new(env, [RbConfig.ruby, "-I", lib, RperfServers.bin("puma"), "-C", "puma.rb"],
                                    chdir: dir, log: File.join(dir, "puma.log"))
    RperfServers.wait_for(60, unless_gone: puma) { get(port, "/io") && get(serve_port, "/debug/pprof/") } or
      abort("the cluster did not start\n#{puma.tail}")

    puts "bench/soak_cluster.rb: Puma #{Gem::Specification.find_all_by_name('puma').first&.version || '8.0.2'}, " \
         "2 workers x 8 threads, preload_app!, Rperf::Middleware; Rperf.start(mode: :#{opts[:mode]}, " \
         "frequency: 1000#{opts[:allocations] ? ', allocations: true' : ''}) and Rperf.serve in the master; " \
         "RPERF_WINDOW_SECONDS=#{opts[:window_seconds]}; #{opts[:concurrency]} client threads; a scrape of " \
         "#{opts[:scrape_seconds]} s every #{opts[:scrape_every]} s; #{opts[:duration]} s"
    t0 = now
    deadline = t0 + opts[:duration]
    requests = 0
    lock = Mutex.new
    clients = Array.new(opts[:concurrency]) do |c|
      Thread.new do
        k = c
        while now < deadline
          path = ["/cpu", "/io", "/items/#{k}"][k % 3]
          ok = get(port, path)
          lock.synchronize { requests += 1 } if ok
          k += 1
        end
      end
    end
    scrapes = []
    scraper = Thread.new do
      at = t0 + 1
      while at + opts[:scrape_seconds] < deadline
        sleep [at - now, 0].max
        body = get(serve_port, "/debug/pprof/profile?seconds=#{opts[:scrape_seconds]}", timeout: opts[:scrape_seconds] + 30)
        lock.synchronize { scrapes << body }
        at += opts[:scrape_every]
      end
    end
    puts format("  %7s %7s %9s %11s %8s %9s", "t (s)", "files", "KiB", "master RSS", "scrapes", "requests")
    most = [0, 0]
    rss = []
    loop do
      t = now - t0
      files, bytes = run_dir_state(dir)
      most = [[most[0], files].max, [most[1], bytes].max]
      rss << rss_kib(puma.pid)
      puts format("  %7.0f %7d %9.1f %8.1f MiB %8d %9d", t, files, bytes / 1024.0, rss.last.to_i / 1024.0,
                  lock.synchronize { scrapes.size }, lock.synchronize { requests })
      break if now >= deadline

      sleep [opts[:every], deadline - now].min
    end
    clients.each(&:join)
    scraper.join(opts[:scrape_seconds] + 60)
    st = puma.stop(:TERM, seconds: 120)
    puma.kill
    stop = File.exist?(File.join(dir, "stop.json")) ? JSON.parse(File.read(File.join(dir, "stop.json"))) : {}
    puts
    puts format("run directory: at most %d part files, %.1f KiB; master VmRSS %.1f MiB at the first line, " \
                "%.1f MiB at the last (max %.1f)", most[0], most[1] / 1024.0, rss.first.to_i / 1024.0,
                rss.last.to_i / 1024.0, rss.compact.max.to_i / 1024.0)
    puts format("stop in after_stopped: %.3f s (the merge and the output), %s part files there, " \
                "process_count %s; master's exit %s", stop["stop_s"].to_f, stop["files"].inspect,
                stop["process_count"].inspect, st.inspect)
    report_weights(dir, scrapes, opts)
  ensure
    puma&.kill
    FileUtils.rm_rf(dir) if dir
  end

  def report_weights(dir, scrapes, opts)
    out = File.join(dir, "cluster.pb.gz")
    return puts("no output written (#{out})") unless File.exist?(out)

    total = by_pid(Rperf::Report.load(out).data)
    scraped = Hash.new(0)
    failed = 0
    scrapes.each do |body|
      next failed += 1 unless body

      f = File.join(dir, "scrape.pb.gz")
      File.binwrite(f, body)
      by_pid(Rperf::Report.load(f).data).each { |pid, w| scraped[pid] += w }
    end
    puts format("per process: the weight summed over %d scrapes (%d failed) against the output's; the scrapes " \
                "cover %d s of every %g", scrapes.size - failed, failed, opts[:scrape_seconds], opts[:scrape_every])
    puts format("  %-8s %12s %12s %7s", "pid", "scrapes (s)", "output (s)", "ratio")
    (total.keys | scraped.keys).sort_by(&:to_i).each do |pid|
      puts format("  %-8s %12.2f %12.2f %7.3f", pid || "master", scraped[pid] / 1e9, total[pid] / 1e9,
                  total[pid].positive? ? scraped[pid].fdiv(total[pid]) : 0)
    end
  end

  def main(argv)
    $stdout.sync = true
    missing = RperfServers.skip_reason("puma")
    abort("bench/soak_cluster.rb: #{missing}") if missing
    run(options(argv))
  end
end

RperfSoakCluster.main(ARGV) if $PROGRAM_NAME == __FILE__
