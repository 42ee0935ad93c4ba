# frozen_string_literal: true

# bench/soak.rb — long-running server soak (a measurement, not a
# test): does a server left profiled for days keep flat memory, cheap minor
# GCs and its throughput while it serves many distinct URLs and takes
# Rperf.snapshot(clear: true) at every window?
#
# Two parts, each with three configurations run side by side:
#   off         no profiler, no middleware (the bare app)
#   raw         Rperf.start(frequency: 1000, mode: :wall) + Rperf::Middleware
#               with label: :raw — every URL is its own label set (the stress)
#   normalized  the same with the default label (ids folded: 4 label sets)
#   profiled    the profiler alone, no middleware (not in the default set:
#               --configs=off,profiled,normalized separates the profiler's
#               cost from the middleware's)
#   tick        no profiler: a bare timer thread waking at the profiler's
#               frequency (bench/floor_tick.c), the floor of what any
#               sampling profiler at that rate costs this machine; with it
#               in --configs the summary also prints each profiled
#               configuration against it (rps/tick, +µs/req over tick)
#
#   server  a real Rack app (Rack::Handler::WEBrick) served by WEBrick over
#           loopback in a child Ruby per configuration; this process is the
#           client: 4 threads, one connection per request (HTTP/1.0, raw
#           sockets). Default 50,000 requests over 25,000 URLs, a window
#           (snapshot(clear: true)) every 5,000.
#   inproc  the same app driven through the middleware directly (no server),
#           in a child Ruby per configuration, to reach the label counts:
#           200,000 requests over 100,000 URLs, a window every 20,000.
#
# The children are interleaved window by window (off/raw/normalized, the
# order rotating each window), so load changes on a shared machine hit every
# configuration alike; throughput and GC ratios are medians over windows of
# per-window ratios. Each child keeps its profiler running for the whole
# part (one start, a snapshot(clear: true) per window). Per window a child
# reports, measured inside the served process:
#   rss       VmRSS (/proc/self/status) at the window's end, after the
#             snapshot
#   gc ms     GC.stat(:time) delta over the window (requests + snapshot),
#             with the minor/major GC counts of the window
#   ms/minor  gc ms / minor GCs, for windows without a major GC
#   mark ms   wall time of one forced minor GC (GC.start(full_mark:
#             false, immediate_sweep: false): marking, sweeping left lazy;
#             median of 5) at the window's end, before the snapshot: what a
#             minor GC costs with a full window of profile data (the forced
#             GCs are counted in the next window's gc ms)
#   heap MiB  Ruby's object heap (allocated pages), old k = old objects
#             (thousands): how much of the RSS is Ruby objects
#   req/s     requests of the window / their wall time (client side for the
#             server part); the snapshot is not inside it (snap ms)
#   cpu µs    the served process's CPU (CLOCK_PROCESS_CPUTIME_ID: every
#             thread, the profiler's timer and worker included) per request
#             over the window, the snapshot excluded; +µs/req in the summary
#             is the per-window difference against off (median): the
#             profiler's CPU per request, less noisy than req/s on a loaded
#             machine (client and server share the 2 cores here)
#   samples   sampling_count of the window; sets = non-empty label sets in
#             the table (the window's new sets + the last window's,
#             quarantined for late samples); used = distinct sets the
#             window's samples reference; ovf = label_sets_overflowed;
#             drop = dropped_samples; prof MiB = profiler_memory_bytes
#
# Targets (printed next to the measured ratios, not asserted), the same for
# every profiled configuration (raw and normalized alike; the summary ends
# with one line per configuration: each figure, its target, ok or MISS):
# RSS flat after the second window (within 10 %), GC time, ms per minor GC
# and the forced minor GC within 1.5x of unprofiled, throughput within 5 %
# of unprofiled.
#
# Rack and WEBrick: Debian's ruby-rack and ruby-webrick (script/setup
# installs them); only their own lib directories are put on the load path.
#
# Run:   script/ruby bench/soak.rb                  # full (several minutes)
#        script/ruby bench/soak.rb --quick          # scale 0.1
# Options: --scale=F (requests and URLs x F), --requests=N (server part;
#          the in-process part gets 4 N), --part=server|inproc (default
#          both), --configs=off,raw,normalized, --max-label-sets=N,
#          --backend=NAME (default: Rperf's default), --frequency=HZ
#          (default 1000), --mode=wall|cpu (default wall),
#          --json (one "RPERF_SOAK {json}" line per part).
# tests/ruby/test_soak.rb runs a short version through RperfSoak.run.

require "json"
require "rbconfig"
require "socket"

module RperfSoak
  LIB = File.expand_path("../build/lib", __dir__)
  CONFIGS = %w[off raw normalized profiled tick].freeze
  UNPROFILED = %w[off tick].freeze
  DEFAULT_CONFIGS = %w[off raw normalized].freeze
  # [requests, urls, window] at scale 1
  PARTS = { "server" => [50_000, 25_000, 5_000], "inproc" => [200_000, 100_000, 20_000] }.freeze
  CLIENTS = 4
  TARGETS = { rss: 1.10, gc: 1.5, rps: 0.95 }.freeze
  # [summary key, label, :max or :min, TARGETS key]: what each profiled
  # configuration is held to
  CHECKS = [["rss_growth", "rss w_n/w2", :max, :rss], ["gc_ratio", "gc/off", :max, :gc],
            ["ms_per_minor_ratio", "ms/minor/off", :max, :gc], ["mark_ratio", "mark/off", :max, :gc],
            ["rps_ratio", "rps/off", :min, :rps]].freeze

  module_function

  # -- Rack and WEBrick from Debian's packages ---------------------------------

  # Debian ships each as a gem directory under rubygems-integration (older
  # releases: vendor_ruby); only those lib directories go on the load path,
  # never the system Ruby's own tree.
  def load_rack!
    %w[rack webrick].each do |name|
      dir = Dir.glob("/usr/share/rubygems-integration/all/gems/#{name}-[0-9]*/lib").max ||
            (File.exist?("/usr/lib/ruby/vendor_ruby/#{name}.rb") && "/usr/lib/ruby/vendor_ruby/#{name}")
      next unless dir

      # vendor_ruby holds other libraries too: load the one file by path
      dir.end_with?("/#{name}") ? require(dir) : $LOAD_PATH.unshift(dir)
    end
    require "rack"
    require "webrick"
    require "rack/handler/webrick"
  rescue LoadError => e
    abort "soak: Rack/WEBrick not found (#{e.message}); script/setup installs ruby-rack and ruby-webrick"
  end

  # -- the application -----------------------------------------------------------

  # URL i of n: four routes, ids of four kinds (the middleware's :id, :uuid,
  # :hex and a nested :id).
  def url(i)
    case i % 4
    when 0 then "/users/#{i}"
    when 1 then "/posts/#{i}/comments"
    when 2 then format("/orders/%08x-%04x-4000-8000-%012x", i, i & 0xffff, i * 7919)
    else format("/items/%024x", i * 2_654_435_761)
    end
  end

  # A small JSON endpoint: splits the path, builds a record and renders it.
  class App
    def call(env)
      parts = env["PATH_INFO"].split("/").reject(&:empty?)
      record = { "route" => parts[0], "id" => parts[1], "method" => env["REQUEST_METHOD"],
                 "items" => Array.new(8) { |k| { "n" => k, "name" => "#{parts[0]}-#{k}", "price" => k * 1.5 } },
                 "tags" => parts.map(&:upcase), "ok" => true }
      body = JSON.generate(record)
      [200, { "content-type" => "application/json", "content-length" => body.bytesize.to_s }, [body]]
    end
  end

  def app(config, o)
    inner = App.new
    return inner if config == "off"

    if config == "tick"
      require_relative "floor_tick"
      FloorTick.start(o[:frequency])
      return inner
    end

    require "rperf"
    require "rperf/middleware"
    Rperf.start(frequency: o[:frequency], mode: o[:mode].to_sym, backend: o[:backend]&.to_sym,
                **(o[:max_label_sets] ? { max_label_sets: o[:max_label_sets] } : {}))
    return inner if config == "profiled"

    Rperf::Middleware.new(inner, label: config.to_sym)
  end

  # -- child: one configuration, one window per command ---------------------------

  def rss_kib
    File.read("/proc/self/status")[/^VmRSS:\s+(\d+)/, 1].to_i
  end

  def mono
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  def cpu_now
    Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
  end

  # wall ms of one forced minor GC without sweeping (GC.stat counts whole
  # milliseconds only), median of 5
  def forced_minor_mark_ms
    Array.new(5) do
      t = mono
      GC.start(full_mark: false, immediate_sweep: false)
      (mono - t) * 1000
    end.sort[2]
  end

  # Closes a window: snapshot(clear: true), then the window's figures.
  def window_end(config, gc0)
    mark_ms = forced_minor_mark_ms # the window's state, before the clear
    t = mono
    res = UNPROFILED.include?(config) ? nil : Rperf.snapshot(clear: true)
    snap_ms = (mono - t) * 1000
    gc = GC.stat
    fig = { "gc_ms" => gc[:time] - gc0[:time], "minor" => gc[:minor_gc_count] - gc0[:minor_gc_count],
            "major" => gc[:major_gc_count] - gc0[:major_gc_count], "snap_ms" => snap_ms }
    if res
      sets = res[:label_sets] || []
      used = (res[:aggregated_samples] || []).map { |s| s[3] }.uniq
      fig.merge!("samples" => res[:sampling_count], "sets" => sets.count { |h| !h.empty? },
                 "used" => used.size, "ovf" => res[:label_sets_overflowed],
                 "drop" => res[:dropped_samples], "prof_bytes" => res[:profiler_memory_bytes],
                 "stacks" => (res[:aggregated_samples] || []).size,
                 "threads" => Thread.list.size)
    end
    res = sets = used = nil # rubocop:disable Lint/UselessAssignment
    fig["mark_ms"] = mark_ms
    fig["rss_kib"] = rss_kib
    fig["heap_kib"] = GC.stat(:heap_allocated_pages) * GC::INTERNAL_CONSTANTS[:HEAP_PAGE_SIZE] / 1024
    fig["old_k"] = GC.stat(:old_objects) / 1000
    fig
  end

  def child_main(part, config, o)
    load_rack!
    $stdout.sync = true
    app = app(config, o)
    if part == "server"
      log = WEBrick::Log.new(File::NULL)
      server = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: 0, Logger: log, AccessLog: [],
                                       MaxClients: 64)
      server.mount("/", Rack::Handler::WEBrick, app)
      Thread.new { server.start }
      puts JSON.generate("port" => server.listeners[0].addr[1])
    else
      puts JSON.generate("ready" => true)
    end
    gc0 = GC.stat
    cpu0 = cpu_now
    while (line = $stdin.gets)
      cmd, from, count, urls = line.split
      break if cmd == "quit"

      fig = {}
      if cmd == "run" # in-process: drive the middleware directly
        from = Integer(from); count = Integer(count); urls = Integer(urls)
        bad = 0
        t = mono
        count.times do |k|
          env = { "REQUEST_METHOD" => "GET", "PATH_INFO" => url((from + k) % urls), "QUERY_STRING" => "",
                  "SERVER_NAME" => "soak", "SERVER_PORT" => "80", "rack.url_scheme" => "http" }
          status, _, body = app.call(env)
          bad += 1 unless status == 200
          body.close if body.respond_to?(:close)
        end
        fig = { "secs" => mono - t, "bad" => bad }
      end
      fig["cpu_s"] = cpu_now - cpu0 # the window's requests, not its snapshot
      fig.merge!(window_end(config, gc0))
      gc0 = GC.stat
      cpu0 = cpu_now
      puts JSON.generate(fig)
    end
    server&.shutdown
    Rperf.stop if !UNPROFILED.include?(config) && Rperf.running?
  rescue Exception => e # rubocop:disable Lint/RescueException
    puts JSON.generate("error" => "#{e.class}: #{e.message}", "where" => e.backtrace.first(5))
    raise
  end

  # -- parent ------------------------------------------------------------------

  Child = Struct.new(:config, :io, :pid, :port)

  def spawn_child(part, config, lib, max_label_sets, backend, frequency, mode)
    args = [RbConfig.ruby, "-I", lib, __FILE__, "--child=#{part}:#{config}",
            "--frequency=#{frequency}", "--mode=#{mode}"]
    args << "--backend=#{backend}" if backend
    args << "--max-label-sets=#{max_label_sets}" if max_label_sets
    io = IO.popen(args, "r+")
    hello = JSON.parse(io.gets || raise("soak: #{config} child exited at start"))
    Child.new(config, io, io.pid, hello["port"])
  end

  def ask(child, line)
    child.io.puts(line)
    child.io.flush
    reply = child.io.gets or raise "soak: #{child.config} child exited (#{part_status(child)})"
    fig = JSON.parse(reply)
    raise "soak: #{child.config} child: #{fig['error']} #{fig['where']&.join(' < ')}" if fig["error"]

    fig
  end

  def part_status(child)
    child.io.close
    $?.inspect
  end

  # CLIENTS threads, one connection per request; -> [seconds, bad responses]
  def drive(port, from, count, urls)
    next_k = 0
    mu = Mutex.new
    bad = 0
    t = mono
    Array.new(CLIENTS) do
      Thread.new do
        loop do
          k = mu.synchronize { next_k < count ? (next_k += 1) - 1 : nil }
          break unless k

          s = TCPSocket.new("127.0.0.1", port)
          s.write("GET #{url((from + k) % urls)} HTTP/1.0\r\nHost: soak\r\n\r\n")
          resp = s.read
          s.close
          mu.synchronize { bad += 1 } unless resp.start_with?("HTTP/1.1 200 ", "HTTP/1.0 200 ")
        end
      end
    end.each(&:join)
    [mono - t, bad]
  end

  # Runs one part; -> { "windows" => [{config => figures}, ...], ... }
  def run(part:, requests:, urls:, window:, configs: DEFAULT_CONFIGS, lib: LIB, max_label_sets: nil, backend: nil,
          frequency: 1000, mode: "wall", progress: nil)
    children = configs.map { |c| spawn_child(part, c, lib, max_label_sets, backend, frequency, mode) }
    windows = []
    from = 0
    (requests.to_f / window).ceil.times do |w|
      count = [window, requests - from].min
      row = {}
      children.rotate(w % children.size).each do |ch|
        row[ch.config] =
          if part == "server"
            secs, bad = drive(ch.port, from, count, urls)
            ask(ch, "window").merge("secs" => secs, "bad" => bad)
          else
            ask(ch, "run #{from} #{count} #{urls}")
          end
        row[ch.config]["requests"] = count
      end
      windows << row
      from += count
      progress&.call(w, row)
    end
    codes = children.map do |ch|
      ch.io.puts("quit")
      ch.io.close
      $?.exitstatus
    end
    { "part" => part, "requests" => requests, "urls" => urls, "window" => window,
      "configs" => configs, "windows" => windows, "exit" => codes }
  end

  # -- report --------------------------------------------------------------------

  def median(xs)
    xs = xs.compact.sort
    return nil if xs.empty?

    xs.size.odd? ? xs[xs.size / 2] : (xs[xs.size / 2 - 1] + xs[xs.size / 2]) / 2.0
  end

  def rps(fig) = fig["requests"] / fig["secs"]

  # process CPU (every thread of the served process) per request, in µs
  def cpu_us(fig) = fig["cpu_s"] * 1e6 / fig["requests"]

  def ms_per_minor(fig) = fig["major"].zero? && fig["minor"].positive? ? fig["gc_ms"].to_f / fig["minor"] : nil

  def fmt(v, spec = "%.2f") = v.nil? ? "-" : format(spec, v)

  def print_window_table(out, res)
    out.puts
    out.puts "== #{res['part']}: #{res['requests']} requests over #{res['urls']} URLs, " \
             "snapshot(clear: true) every #{res['window']}"
    out.puts format("%-3s %-10s %8s %7s %9s %8s %5s %7s %5s %4s %8s %7s %7s %7s %7s %6s %6s %5s %4s %8s",
                    "win", "config", "req/s", "cpu µs", "rss MiB", "heap MiB", "old k", "gc ms", "minor", "maj", "ms/minor", "mark ms",
                    "snap ms", "samples", "stacks", "sets", "used", "ovf", "drop", "prof MiB")
    res["windows"].each_with_index do |row, w|
      res["configs"].each do |c|
        f = row[c]
        out.puts format("%-3d %-10s %8.0f %7.1f %9.1f %8.1f %5d %7d %5d %4d %8s %7s %7.1f %7s %7s %6s %6s %5s %4s %8s",
                        w + 1, c, rps(f), cpu_us(f), f["rss_kib"] / 1024.0, f["heap_kib"] / 1024.0, f["old_k"], f["gc_ms"], f["minor"], f["major"],
                        fmt(ms_per_minor(f)), fmt(f["mark_ms"], "%.3f"), f["snap_ms"],
                        f["samples"] || "-", f["stacks"] || "-", f["sets"] || "-", f["used"] || "-",
                        f["ovf"] || "-", f["drop"] || "-",
                        f["prof_bytes"] ? format("%.1f", f["prof_bytes"] / 1048576.0) : "-")
      end
    end
  end

  # Ratios against "off": per-window ratio, median over windows.
  def summary(res)
    ws = res["windows"]
    res["configs"].to_h do |c|
      rss = ws.map { |r| r[c]["rss_kib"] }
      s = { "rss_growth" => rss.size >= 2 ? rss.last.to_f / rss[1] : nil,
            "rss_max_over_w2" => rss.size >= 2 ? rss[1..].max.to_f / rss[1] : nil,
            "rps" => median(ws.map { |r| rps(r[c]) }),
            "cpu_us" => median(ws.map { |r| cpu_us(r[c]) }),
            "gc_ms" => median(ws.map { |r| r[c]["gc_ms"] }),
            "mark_ms" => median(ws.map { |r| r[c]["mark_ms"] }),
            "ms_per_minor" => median(ws.map { |r| ms_per_minor(r[c]) }),
            "bad" => ws.sum { |r| r[c]["bad"] }, "drop" => ws.sum { |r| r[c]["drop"] || 0 } }
      if res["configs"].include?("tick") && !UNPROFILED.include?(c)
        s["rps_tick_ratio"] = median(ws.map { |r| rps(r[c]) / rps(r["tick"]) })
        s["cpu_over_tick_us"] = median(ws.map { |r| cpu_us(r[c]) - cpu_us(r["tick"]) })
      end
      if res["configs"].include?("off") && c != "off"
        ratio = ->(&f) { median(ws.map { |r| (a = f.call(r[c])) && (b = f.call(r["off"])) && b.positive? ? a.to_f / b : nil }) }
        s["rps_ratio"] = ratio.call { |f| rps(f) }
        s["cpu_extra_us"] = median(ws.map { |r| cpu_us(r[c]) - cpu_us(r["off"]) })
        s["gc_ratio"] = ratio.call { |f| f["gc_ms"] }
        s["mark_ratio"] = ratio.call { |f| f["mark_ms"] }
        s["ms_per_minor_ratio"] = ratio.call { |f| ms_per_minor(f) }
      end
      [c, s]
    end
  end

  # Each profiled configuration against TARGETS (the same for all):
  # {config => [[label, value, :max|:min, target, ok (nil: no figure)], ...]}
  def verdicts(sum)
    sum.reject { |c, _| UNPROFILED.include?(c) }.to_h do |c, s|
      [c, CHECKS.map do |key, label, op, target|
        v = s[key]
        t = TARGETS[target]
        [label, v, op, t, v.nil? ? nil : op == :max ? v <= t : v >= t]
      end]
    end
  end

  def print_summary(out, res)
    sum = summary(res)
    out.puts
    out.puts "-- #{res['part']}: medians over windows; ratios are per-window profiled/off, median"
    out.puts format("%-10s %8s %8s %7s %7s %10s %9s %9s %10s %11s %8s %8s %8s %6s %5s",
                    "config", "req/s", "rps/off", "cpu µs", "+µs/req", "rss w_n/w2", "max/w2", "gc ms", "gc/off", "ms/minor",
                    "/off", "mark ms", "/off", "bad", "drop")
    sum.each do |c, s|
      out.puts format("%-10s %8.0f %8s %7.1f %7s %10s %9s %9.1f %10s %11s %8s %8.3f %8s %6d %5d",
                      c, s["rps"], fmt(s["rps_ratio"], "%.3f"), s["cpu_us"], fmt(s["cpu_extra_us"], "%.1f"),
                      fmt(s["rss_growth"], "%.3f"),
                      fmt(s["rss_max_over_w2"], "%.3f"), s["gc_ms"], fmt(s["gc_ratio"]),
                      fmt(s["ms_per_minor"]), fmt(s["ms_per_minor_ratio"]), s["mark_ms"],
                      fmt(s["mark_ratio"]), s["bad"], s["drop"])
    end
    out.puts format("targets:   rps/off >= %.2f   rss w_n/w2 <= %.2f   gc/off, ms/minor/off, mark/off <= %.1f",
                    TARGETS[:rps], TARGETS[:rss], TARGETS[:gc])
    verdicts(sum).each do |c, checks|
      out.puts format("  %-10s %s", c, checks.map { |label, v, op, t, ok|
        format("%s %s %s %.2f %s", label, fmt(v, "%.3f"), op == :max ? "<=" : ">=", t, ok.nil? ? "-" : ok ? "ok" : "MISS")
      }.join("   "))
    end
    against_tick = sum.select { |_, s| s["rps_tick_ratio"] }
    unless against_tick.empty?
      out.puts "against tick (a bare timer thread at the same frequency, no profiler; per-window, median):"
      against_tick.each do |c, s|
        out.puts format("  %-10s rps/tick %.3f   +µs/req over tick %.1f", c, s["rps_tick_ratio"], s["cpu_over_tick_us"])
      end
    end
    sum
  end

  def options(argv)
    o = { scale: 1.0, requests: nil, parts: PARTS.keys, configs: DEFAULT_CONFIGS, max_label_sets: nil,
          backend: nil, frequency: 1000, mode: "wall", json: false }
    argv.each do |a|
      case a
      when /\A--scale=(.+)\z/ then o[:scale] = Float(Regexp.last_match(1))
      when "--quick" then o[:scale] = 0.1
      when /\A--requests=(\d+)\z/ then o[:requests] = Integer(Regexp.last_match(1))
      when /\A--part=(server|inproc)\z/ then o[:parts] = [Regexp.last_match(1)]
      when /\A--configs=(.+)\z/
        o[:configs] = Regexp.last_match(1).split(",")
        bad = o[:configs] - CONFIGS
        abort "soak: --configs accepts #{CONFIGS.join(', ')}; got #{bad.join(', ')}" unless bad.empty?
      when /\A--max-label-sets=(\d+)\z/ then o[:max_label_sets] = Integer(Regexp.last_match(1))
      when /\A--backend=(\w+)\z/ then o[:backend] = Regexp.last_match(1)
      when /\A--frequency=(\d+)\z/ then o[:frequency] = Integer(Regexp.last_match(1))
      when /\A--mode=(wall|cpu)\z/ then o[:mode] = Regexp.last_match(1)
      when "--json" then o[:json] = true
      when /\A--child=/ then nil
      else abort "soak: unknown option #{a} (--scale=F --quick --requests=N --part=server|inproc " \
                 "--configs=LIST --max-label-sets=N --backend=NAME --frequency=HZ --mode=wall|cpu --json)"
      end
    end
    o
  end

  # sizes of a part: requests, urls (half the requests), window (a tenth)
  def sizes(part, o)
    req, urls, win = PARTS[part]
    req = o[:requests] ? (part == "inproc" ? 4 * o[:requests] : o[:requests]) : (req * o[:scale]).round
    req = [req, 10].max
    [req, [(req * urls.to_f / PARTS[part][0]).round, 1].max, [(req * win.to_f / PARTS[part][0]).round, 1].max]
  end

  def main(argv)
    if (child = argv.find { |a| a.start_with?("--child=") })
      part, config = child.delete_prefix("--child=").split(":")
      o = options(argv)
      return child_main(part, config, o)
    end
    o = options(argv)
    lib = ENV["RPERF_BUILD_DIR"] ? File.join(ENV["RPERF_BUILD_DIR"], "lib") : LIB
    $stdout.sync = true
    puts "soak: Ruby #{RUBY_VERSION}, #{Etc.nprocessors} CPUs, backend #{o[:backend] || 'default'}, #{o[:mode]} #{o[:frequency]} Hz, load #{File.read('/proc/loadavg').split[0, 3].join(' ')}"
    o[:parts].each do |part|
      requests, urls, window = sizes(part, o)
      t = mono
      res = run(part: part, requests: requests, urls: urls, window: window, configs: o[:configs], lib: lib,
                max_label_sets: o[:max_label_sets], backend: o[:backend], frequency: o[:frequency], mode: o[:mode],
                progress: ->(w, _) { $stderr.print "\r#{part}: window #{w + 1}" })
      $stderr.puts
      print_window_table($stdout, res)
      sum = print_summary($stdout, res)
      puts format("(%s part: %.0f s, load now %s)", part, mono - t, File.read("/proc/loadavg").split[0, 3].join(" "))
      puts "RPERF_SOAK #{JSON.generate(res.merge('summary' => sum, 'verdicts' => verdicts(sum)))}" if o[:json]
    end
  end
end

if $PROGRAM_NAME == __FILE__
  require "etc"
  RperfSoak.main(ARGV)
end
