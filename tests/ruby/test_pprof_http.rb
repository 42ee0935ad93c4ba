# frozen_string_literal: true

# tests/ruby/test_pprof_http.rb — the pprof HTTP surface
# (ruby/lib/rperf/pprof_app.rb, ruby/lib/rperf/serve.rb) as its clients see
# it: the Rack app called with plain env Hashes; the listener read by real
# HTTP clients (Net::HTTP, and raw sockets where a client misbehaves on
# purpose): a scraper that behaves like Grafana Alloy's pyroscope.scrape
# (every 2 s, seconds=2, 200 and a valid pprof) whose windows add up to the
# process's sampled time; four scrapes at once next to a user's
# snapshot(clear: true); an answer sent while the request's thread waits
# for the GVL, and a window opened when its request arrives; a heap
# window through the listener; the 400/401/404/405/503 answers; the token
# (no window opened without it); the bind address; a silent client, a full listener, a client that leaves;
# stop; a fork child; RPERF_SERVE and exit in child processes; a real Puma
# cluster (the pinned gem, tests/ruby/servers_helper.rb; omitted when it is
# not installed) scraped through one listener in its master.
#
# Bounded: every HTTP call has open/read timeouts, every thread is joined
# with a deadline, every listener is stopped in teardown. The only timing
# figure asserted is the 5 % sum of the scraper's windows.

require_relative "helper"
require_relative "servers_helper"
require "rperf/serve"
require "rperf/report"
require "net/http"
require "socket"
require "stringio"

PROBE_SO = File.join(File.dirname(RPERF_BUILD_LIB), "tests", "ext", "eintr_probe.so")
require PROBE_SO

# 30,000 Strings kept (the heap routes' test)
def heap_route_strings(keep) = 300.times { keep << Array.new(100) { |i| i.to_s } }

class TestPprofHttp < Test::Unit::TestCase
  include RperfTestHelper

  DEADLINE = 30 # s: any one HTTP exchange (a profile of 2 s included)

  def setup
    @servers = []
    @threads = []
    @sockets = []
    @working = false
  end

  def teardown
    @working = false
    @threads.each { |t| t.join(DEADLINE) || t.kill }
    @sockets.each { |s| s.close unless s.closed? }
    @servers.each(&:stop)
  end

  # ---- helpers -------------------------------------------------------------

  def serve(**opts)
    Rperf.serve(port: 0, **opts).tap { |s| @servers << s }
  end

  # A request as a real client makes it; the response (Net::HTTPResponse).
  def get(server, path, headers = {})
    http = Net::HTTP.new(server.host, server.port)
    http.open_timeout = DEADLINE
    http.read_timeout = DEADLINE
    http.start { |h| h.get(path, headers) }
  end

  # Bytes written as they are, and everything the server sends back.
  def raw(server, bytes)
    sock = TCPSocket.new(server.host, server.port)
    @sockets << sock
    sock.write(bytes)
    read_all(sock)
  end

  def read_all(sock, deadline: DEADLINE)
    out = +""
    until_time = now + deadline
    loop do
      chunk = sock.read_nonblock(65_536, exception: false)
      break if chunk.nil?

      if chunk == :wait_readable
        left = until_time - now
        flunk("no answer within #{deadline} s; got #{out.inspect}") if left <= 0
        IO.select([sock], nil, nil, left)
      else
        out << chunk
      end
    end
    out
  rescue Errno::ECONNRESET
    out
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # A worker that uses the CPU like a busy server thread: most of the time
  # in Ruby code, a short sleep now and then (which also hands the GVL to
  # the listener's threads promptly).
  def start_work
    @working = true
    @threads << Thread.new do
      while @working
        rperf_work_a(0.004)
        sleep 0.001
      end
    end
  end

  # [Rperf::Report::Profile] of a gzipped pprof body, checked.
  def pprof(body, what = "profile")
    assert_equal("\x1f\x8b".b, body.b[0, 2], "#{what}: gzipped pprof")
    Rperf::Report.from_pprof(what, body)
  end

  def weight(data, label = nil)
    samples = data[:aggregated_samples] || []
    samples = samples.select { |s| s[0].any? { |f| f[1] == label } } if label
    samples.sum { |s| s[1] }
  end

  def one_line?(body)
    body.end_with?("\n") && body.count("\n") == 1 && body.start_with?("rperf: ")
  end

  def env(path, query: "", method: "GET", script: "", headers: {})
    { "REQUEST_METHOD" => method, "SCRIPT_NAME" => script, "PATH_INFO" => path, "QUERY_STRING" => query,
      "SERVER_NAME" => "localhost", "SERVER_PORT" => "80", "rack.input" => StringIO.new(+"") }.merge(headers)
  end

  def call(app, *args, **kw)
    status, headers, body = app.call(env(*args, **kw))
    text = +""
    body.each { |c| text << c }
    [status, headers, text]
  end

  # ---- the Rack app, called with env Hashes --------------------------------

  def test_rack_app_routes_and_errors
    app = Rperf::PprofApp.new
    # mounted with map "/debug/pprof" (SCRIPT_NAME) or at the root (PATH_INFO)
    [["/", "/debug/pprof"], ["", "/debug/pprof"], ["/debug/pprof/", ""]].each do |path, script|
      status, headers, body = call(app, path, script: script)
      assert_equal(200, status, "index at #{script}#{path}")
      assert_equal("text/html; charset=utf-8", headers["content-type"])
      assert_match(%r{href="/debug/pprof/profile\?seconds=30"}, body)
      assert_match(%r{href="/debug/pprof/flamegraph\?seconds=30"}, body)
      assert_equal(body.bytesize.to_s, headers["content-length"])
    end
    # no run: the heap routes say so, and how to start one that they serve
    %w[/heap /allocs].each do |path|
      status, headers, body = call(app, path, script: "/debug/pprof")
      assert_equal(503, status, path)
      assert_equal("text/plain; charset=utf-8", headers["content-type"])
      assert(one_line?(body), body)
      assert_match(/\Arperf: profiling is not running: start a run that samples allocations with /, body)
      assert_match(/Rperf\.start\(mode: :alloc\), or allocations: true/, body)
      assert_no_match(/does not sample/, body)
    end
    status, _, body = call(app, "/goroutine", script: "/debug/pprof")
    assert_equal([404, true], [status, one_line?(body)], body)
    status, headers, body = call(app, "/profile", method: "POST", script: "/debug/pprof")
    assert_equal([405, "GET, HEAD", true], [status, headers["allow"], one_line?(body)], body)

    # bad parameters: 400 with one line, before anything waits
    ["seconds=abc", "seconds=0", "seconds=-1", "seconds=1.5", "seconds=3601", "seconds=",
     "seconds=1&seconds=2", "seconds=#{'9' * 40}", "x=#{'a' * 2000}"].each do |q|
      status, _, body = call(app, "/debug/pprof/profile", query: q)
      assert_equal(400, status, q)
      assert(one_line?(body), "#{q}: #{body.inspect}")
    end
    status, _, body = call(Rperf::PprofApp.new(max_seconds: 10), "/debug/pprof/profile", query: "seconds=11")
    assert_equal([400, true], [status, one_line?(body)])
    assert_match(/from 1 to 10/, body)

    # profiling off: 503, one line, and nothing started
    refute(Rperf.running?)
    status, _, body = call(app, "/debug/pprof/profile", query: "seconds=1")
    assert_equal([503, true], [status, one_line?(body)], body)
    assert_match(/\Arperf: profiling is not running: start it with Rperf\.start .*serve with start:/, body)
    refute(Rperf.running?, "a scrape while profiling is off starts nothing")
  end

  # A run with aggregate: false has no window nor snapshot to serve: every
  # profile route says that the run goes without aggregating and to start
  # it again with aggregate: true, not that profiling is off.
  def test_a_run_without_aggregation
    Rperf.start(mode: :cpu, aggregate: false, allocations: true)
    app = Rperf::PprofApp.new(start: true)
    [%w[/profile seconds=1], %w[/flamegraph seconds=1], %w[/heap seconds=1], ["/heap", ""],
     ["/allocs", ""]].each do |path, query|
      status, _, body = call(app, path, query: query, script: "/debug/pprof")
      assert_equal([503, true], [status, one_line?(body)], "#{path}?#{query}: #{body}")
      assert_match(/\Arperf: profiling runs, but with aggregate: false: .*restart it with aggregate: true/, body,
                   "#{path}?#{query}")
      assert_no_match(/not running|not available|start it with Rperf\.start|serve with start:/, body)
    end
    assert(Rperf.running?, "the run goes on")
  end

  def test_rack_app_token
    app = Rperf::PprofApp.new(token: "s3cret-t0ken")
    [{}, { "HTTP_AUTHORIZATION" => "Bearer wrong" }, { "HTTP_AUTHORIZATION" => "Basic s3cret-t0ken" },
     { "HTTP_AUTHORIZATION" => "Bearer s3cret-t0ke" }, { "HTTP_AUTHORIZATION" => "Bearer s3cret-t0ken0" }].each do |h|
      status, headers, body = call(app, "/debug/pprof/", headers: h)
      assert_equal(401, status, h.inspect)
      assert_equal('Bearer realm="rperf"', headers["www-authenticate"])
      assert(one_line?(body), body)
    end
    status, = call(app, "/debug/pprof/", headers: { "HTTP_AUTHORIZATION" => "Bearer s3cret-t0ken" })
    assert_equal(200, status)
    # the token is checked before anything else: a wrong one learns no route
    status, = call(app, "/debug/pprof/heap", headers: { "HTTP_AUTHORIZATION" => "Bearer nope" })
    assert_equal(401, status)
    ["", "has space", 42].each do |bad|
      assert_raise(ArgumentError, bad.inspect) { Rperf::PprofApp.new(token: bad) }
    end
  end

  def test_rack_app_profile_and_flamegraph
    Rperf.start(mode: :cpu, frequency: 1000)
    start_work
    app = Rperf::PprofApp.new
    status, headers, body = call(app, "/profile", query: "seconds=1", script: "/debug/pprof")
    assert_equal(200, status, body)
    assert_equal("application/octet-stream", headers["content-type"])
    assert_equal(body.bytesize.to_s, headers["content-length"])
    prof = pprof(body)
    assert_equal("cpu", prof.type)
    assert_operator(weight(prof.data, "Object#rperf_work_a"), :>, 0, "the workload is in the window")

    status, headers, html = call(app, "/debug/pprof/flamegraph", query: "seconds=1")
    assert_equal(200, status, html[0, 200])
    assert_equal("text/html; charset=utf-8", headers["content-type"])
    assert_match(/default-src 'none'/, headers["content-security-policy"])
    assert_match(/<script type="application\/json" id="rperf-data">/, html)
    assert_match(/rperf_work_a/, html)
    # self-contained: nothing fetched from anywhere (no CDN, no external file)
    assert_no_match(%r{<(?:script|link|img|iframe)[^>]*\s(?:src|href)\s*=}i, html)
    assert_no_match(%r{(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}/}i, html)
  end

  # A run that samples allocations: /heap and /allocs give its heap profile
  # now (Go's four sample types; default inuse_space and alloc_space), as
  # a snapshot that clears nothing; `seconds` is refused with one line.
  def test_heap_and_allocs_of_a_run_that_samples_allocations
    keep = []
    Rperf.start(mode: :alloc, alloc_interval: 16)
    heap_route_strings(keep)
    server = serve
    { "/debug/pprof/heap" => "inuse_space", "/debug/pprof/allocs" => "alloc_space" }.each do |path, type|
      res = get(server, path)
      assert_equal("200", res.code, res.body[0, 200])
      assert_equal("application/octet-stream", res["content-type"])
      prof = pprof(res.body, path)
      assert_equal(type, prof.type, path)
      assert_true(prof.alloc?)
      strings = prof.data[:allocations][:samples].select do |frames, cls, *|
        cls == "String" && frames.any? { |f| f[1] == "Object#heap_route_strings" }
      end
      # 30,000 Strings (Integer#to_s) sampled one in 16: an estimate within 10 %
      assert_in_delta(30_000, strings.sum { |s| s[2] }, 3_000, path)
    end
    res = get(server, "/debug/pprof/heap?seconds=0")
    assert_equal(["400", true], [res.code, one_line?(res.body)], res.body)
    data = Rperf.snapshot(clear: true)
    assert_operator(data[:allocations][:sampled], :>, 1_000, "the scrapes cleared nothing")
    Rperf.stop
    Rperf.start(mode: :cpu)
    res = get(server, "/debug/pprof/heap")
    assert_equal(["404", true], [res.code, one_line?(res.body)], res.body)
    assert_match(/does not sample allocations/, res.body)
    assert_equal(keep.size, 300)
  end

  # heap?seconds=N and allocs?seconds=N: Go's delta profiles — what was
  # allocated during the N seconds, and the change of the objects in use
  # (negative where more were freed), nothing from before; the window
  # crosses a user's clearing snapshot without losing or doubling anything.
  def test_heap_and_allocs_with_seconds_are_delta_profiles
    app = Rperf::PprofApp.new
    before = []
    Rperf.start(mode: :alloc, alloc_interval: 16)
    heap_route_strings(before) # before the window: in no delta
    GC.start                   # in use as of this GC, when the window opens
    kept = []
    dropped = []
    during = lambda do |_seconds|
      heap_route_strings(kept)          # 30,000 Strings, still referenced after
      Rperf.snapshot(clear: true)       # another reader clears meanwhile
      before.clear                      # 30,000 older Strings freed
      300.times { Array.new(100) { |i| i.to_s } } # 30,000 made and dropped
      GC.start
      :done
    end
    status, headers, body = call(app, "/debug/pprof/heap", query: "seconds=1", headers: { "rperf.wait" => during })
    assert_equal(200, status, body[0, 200])
    assert_equal('attachment; filename="heap"', headers["content-disposition"])
    assert_equal("inuse_space", pprof(body, "heap?seconds=1").type)
    # the values as written (go tool pprof reads them so; negative in-use
    # changes included)
    raw = Rperf._decode_pprof(body, "heap?seconds=1")
    types = raw[:sample_types].map(&:first)
    ao, io = types.index("alloc_objects"), types.index("inuse_objects")
    strings = raw[:samples].select { |_, _, labels| labels&.[]("class") == "String" }
    mine = strings.select { |frames, *| frames.any? { |f| f[1] == "Object#heap_route_strings" } }
    # allocated in the window by heap_route_strings: the kept 30,000 only
    assert_in_delta(30_000, mine.sum { |_, v, _| v[ao] }, 3_000, "alloc_objects in the window")
    # in use: +30,000 kept (allocated in the window), -30,000 freed (from
    # before it: a stack of their own, negative)
    assert_in_delta(30_000, mine.select { |_, v, _| v[io].positive? }.sum { |_, v, _| v[io] }, 3_000)
    assert_in_delta(-30_000, mine.select { |_, v, _| v[io].negative? }.sum { |_, v, _| v[io] }, 3_000)
    # the Strings made and dropped in the window: allocated, none in use
    other = strings - mine
    assert_in_delta(30_000, other.sum { |_, v, _| v[ao] }, 3_000)
    assert_in_delta(0, other.sum { |_, v, _| v[io] }, 1_000)
    status, _, body = call(app, "/debug/pprof/allocs", query: "seconds=1")
    assert_equal(200, status, body[0, 200])
    assert_equal("alloc_space", pprof(body, "allocs?seconds=1").type)
    Rperf.stop

    Rperf.start(mode: :cpu)
    status, _, body = call(app, "/debug/pprof/heap", query: "seconds=1")
    assert_equal([404, true], [status, one_line?(body)], body)
    Rperf.stop
    status, _, body = call(app, "/debug/pprof/heap", query: "seconds=1")
    assert_equal(503, status, body)
    assert_match(/\Arperf: profiling is not running: start a run that samples allocations/, body)
    kept.clear
  end

  # start: a request while profiling is off runs its own window on a run
  # that starts for it and stops after it; two at once share it.
  def test_on_demand_start
    app = Rperf::PprofApp.new(start: { mode: :wall, frequency: 500 })
    results = 2.times.map do
      Thread.new { call(app, "/debug/pprof/profile", query: "seconds=1") }
    end.map { |t| t.join(DEADLINE)&.value }
    results.each do |status, _, body|
      assert_equal(200, status, body.to_s[0, 200])
      prof = pprof(body)
      assert_equal("wall", prof.type)
      assert_operator(weight(prof.data), :>, 0)
    end
    refute(Rperf.running?, "the on-demand run stops after its last request")

    # a run the user started is never stopped by a request
    Rperf.start(mode: :cpu)
    status, = call(app, "/debug/pprof/profile", query: "seconds=1")
    assert_equal(200, status)
    assert(Rperf.running?, "the user's run goes on")
    Rperf.stop

    assert_raise(ArgumentError) { Rperf::PprofApp.new(start: { output: "x.pb.gz" }) }
    assert_raise(ArgumentError) { Rperf::PprofApp.new(start: { mode: :memory }) }
    assert_raise(ArgumentError) { Rperf::PprofApp.new(start: { frequency: 0 }) }
    assert_raise(ArgumentError) { Rperf.serve(port: 0, start: "yes") }
  end

  # ---- the listener, read by real clients ----------------------------------

  # A scraper that behaves like pyroscope.scrape, in a process of its own
  # as a real one is: scrapes due every 2 s, each asking seconds=2, each
  # checked (200, a gzipped pprof that decodes); it starts when told and
  # reports when done.
  SCRAPER = <<~'RUBY'
    require "rperf"
    require "rperf/report"
    require "net/http"
    require "json"
    port = Integer(ARGV[0])
    mono = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
    $stdout.sync = true
    puts "ready"
    $stdin.gets
    t0 = mono.()
    responses = 3.times.map do |i|
      due = t0 + 2 * i
      sleep(due - mono.()) if due > mono.()
      Net::HTTP.start("127.0.0.1", port, open_timeout: 30, read_timeout: 30) do |http|
        http.get("/debug/pprof/profile?seconds=2")
      end
    end
    puts "done" # checked afterwards, as a scraper forwards what it got
    results = responses.each_with_index.map do |res, i|
      body = res.body.to_s.b
      gzip = body.start_with?("\x1f\x8b".b)
      data = res.code == "200" && gzip ? Rperf::Report.from_pprof("scrape #{i}", body).data : {}
      samples = data[:aggregated_samples] || []
      { code: res.code, gzip: gzip, total: samples.sum { |s| s[1] },
        work: samples.select { |s| s[0].any? { |f| f[1] == "Object#rperf_work_a" } }.sum { |s| s[1] } }
    end
    puts JSON.generate(results)
  RUBY

  # Its windows add up to what this process sampled over the same span:
  # nothing counted twice, nothing lost but the moments between scrapes
  # (measured: the span's seconds the windows do not cover).
  # cpu mode; wall mode under M:N, where threads sharing a native thread
  # have no CPU clock of their own and the worker's sampled CPU is a small
  # fraction of what it burns, too small next to the listener's own work
  # between windows for a 5 % check (docs/architecture.md).
  def test_scraper_windows_add_up_to_the_sampled_time
    Rperf.start(mode: Rperf._c_main_mn ? :wall : :cpu, frequency: 1000)
    server = serve
    start_work
    Open3.popen3({ "RPERF_ENABLED" => nil, "RPERF_SERVE" => nil },
                 RbConfig.ruby, "-I", RPERF_BUILD_LIB, "-e", SCRAPER, server.port.to_s) do |stdin, stdout, stderr, wait|
      err = Thread.new { stderr.read }
      lines = Queue.new
      reader = Thread.new { while (l = stdout.gets); lines << l; end }
      begin
        assert_equal("ready\n", lines.pop(timeout: DEADLINE), "the scraper starts")
        before = weight(Rperf.snapshot)
        from = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        stdin.puts("go")
        stdin.close
        done = lines.pop(timeout: DEADLINE * 2)
        span = Process.clock_gettime(Process::CLOCK_MONOTONIC) - from
        sampled = weight(Rperf.snapshot) - before
        report = lines.pop(timeout: DEADLINE)
        assert_equal("done\n", done, "the scraper scrapes; stderr: #{err.join(1) && err.value}")
        refute_nil(report, "the scraper reports; stderr: #{err.join(1) && err.value}")
        scrapes = JSON.parse(report, symbolize_names: true)
        assert_equal(3, scrapes.size)
        scrapes.each_with_index do |s, i|
          assert_equal(["200", true], [s[:code], s[:gzip]], "scrape #{i}")
          assert_operator(s[:work], :>, 0, "scrape #{i} holds the workload")
        end
        windows = scrapes.map { |s| s[:total] }
        # The windows cover 6 s of the span: the rest (the scraper's start,
        # the moments between its requests) grows on a busy machine, and
        # the windows' share of what was sampled shrinks with it; never
        # more than all of it.
        covered = [6.0 / span, 1.0].min
        msg = "windows #{windows.map { |w| (w / 1e6).round }} ms add up to #{(windows.sum / 1e6).round} ms; " \
              "the process sampled #{(sampled / 1e6).round} ms over the same #{span.round(2)} s"
        assert_operator(windows.sum.to_f / sampled, :<=, 1.02, "nothing counted twice: #{msg}")
        assert_operator(windows.sum.to_f / sampled, :>=, covered - 0.05, "nothing lost: #{msg}")
      ensure
        Process.kill(:KILL, wait.pid) unless wait.join(DEADLINE)
        reader.join(DEADLINE)
      end
    end
  end

  # Four scrapes at once each get their own window, and none takes
  # anything from a user who clears snapshots meanwhile.
  def test_concurrent_scrapes_and_a_user_clearing
    Rperf.start(mode: :cpu, frequency: 1000)
    server = serve
    start_work
    Rperf.snapshot(clear: true) # the user's windows start here
    scrapes = 4.times.map { Thread.new { get(server, "/debug/pprof/profile?seconds=2") } }
    sleep 1 # the user's clear in the middle of the scrapes (the order matters, not the time)
    user = [Rperf.snapshot(clear: true)]
    responses = scrapes.map { |t| t.join(DEADLINE)&.value }
    user << Rperf.snapshot(clear: true)
    user_work = user.sum { |d| weight(d, "Object#rperf_work_a") }
    responses.each_with_index do |res, i|
      refute_nil(res, "scrape #{i} answered")
      assert_equal("200", res.code, res.body)
      work = weight(pprof(res.body, "scrape #{i}").data, "Object#rperf_work_a")
      assert_operator(work, :>, 0, "scrape #{i}")
      # each scrape's span lies within the user's: a scrape that cleared
      # would leave the user's windows with less than one scrape holds
      assert_operator(work, :<=, user_work, "scrape #{i} vs the user's windows")
    end
  end

  # Scrapes that arrive together are handled side by side, each on a
  # handler thread of its own: two heap?seconds=3 windows (opened by the
  # thread that reads the request) and a profile?seconds=3 window arrive
  # at once and each gets its own complete answer over the same seconds:
  # the 30,000 Strings and the work done while all three are open are in
  # every one. The listener's Ruby threads find the three connections
  # queued together: this thread keeps the GVL (priority 3: an 800 ms time
  # slice, no call that releases it) until the accepting thread (C) has
  # queued them, which the profile request, sent last, shows by having its
  # window opened here. Afterwards the handler threads made for the
  # overlap end once idle: the listener is back to its two threads.
  def test_overlapping_scrapes_are_answered_side_by_side
    Rperf.start(mode: :cpu, allocations: true, alloc_interval: 16)
    server = serve
    server.instance_variable_set(:@handler_idle, 0.1) # HANDLER_IDLE, shortened
    serve_threads = -> { Thread.list.count { |t| t.name == "rperf-serve" && t.alive? } }
    assert(poll { serve_threads.call == 2 }, "an idle listener: the accepting thread and one handler")
    paths = %w[heap?seconds=3 heap?seconds=3 profile?seconds=3]
    before = Rperf._c_window_marks_open
    addr = Socket.sockaddr_in(server.port, server.host)
    priority = Thread.current.priority
    Thread.current.priority = 3
    begin
      socks = paths.map do |path|
        sock = Socket.new(:INET, :STREAM)
        @sockets << sock
        sock.connect_nonblock(addr, exception: false)
        req = "GET /debug/pprof/#{path} HTTP/1.1\r\nHost: localhost\r\n\r\n"
        until_at = now + 0.5
        # the connection completes in the kernel; nothing here gives up the GVL
        until (r = sock.write_nonblock(req, exception: false)).is_a?(Integer) || now > until_at
          sock.connect_nonblock(addr, exception: false) if r.nil?
        end
        sock
      end
      until_at = now + 0.5
      until Rperf._c_window_marks_open > before || now > until_at
      end
    ensure
      Thread.current.priority = priority
    end
    assert(poll { Rperf._c_window_marks_open >= before + 3 }, "the three windows are open at once")
    kept = []
    heap_route_strings(kept) # 30,000 Strings, made while every window is open
    rperf_work_a(0.05)
    answers = socks.zip(paths).map do |sock, path|
      head, body = read_all(sock).split("\r\n\r\n", 2)
      assert_match(%r{\AHTTP/1\.1 200 }, head.to_s, path)
      [path, Rperf._decode_pprof(body.to_s, path)]
    end
    answers.each do |path, raw|
      mine = raw[:samples].select { |frames, *| frames.any? { |f| f[1] == "Object#heap_route_strings" } }
      if path.start_with?("heap")
        ao = raw[:sample_types].map(&:first).index("alloc_objects")
        assert_in_delta(30_000, mine.sum { |_, v, _| v[ao] }, 3_000, "#{path}: the Strings made in the window")
      else
        work = raw[:samples].select { |frames, *| frames.any? { |f| f[1] == "Object#rperf_work_a" } }
        assert_not_empty(work, "#{path}: the work done in the window")
      end
    end
    spans = answers.map { |_, raw| [raw[:time_nanos], raw[:time_nanos] + raw[:duration_nanos]] }
    assert_operator(spans.map(&:first).max, :<, spans.map(&:last).min,
                    "the windows overlap: #{spans.map { |a, b| [a - spans[0][0], b - spans[0][0]] }} ns")
    assert(poll { serve_threads.call == 2 }, "the handlers made for the overlap end once idle")
    kept.clear
  end

  # A profile's answer does not wait for its request's thread: another
  # thread holds the GVL past the window's end in a C call that never
  # checks interrupts (as a busy application can keep the request's thread
  # from the GVL for a time slice of every thread). When that call
  # returns, Ruby runs pending postponed jobs before it hands the GVL on,
  # so the listener's job closes the window there and the send's thread
  # writes the answer; the request's thread, back after that, finds it
  # sent (ruby/window_send.c).
  def test_a_window_is_answered_while_its_thread_waits_for_the_gvl
    Rperf.start(mode: :cpu, frequency: 1000)
    server = serve
    waiting = Queue.new
    outcomes = Queue.new
    server.singleton_class.prepend(Module.new do
      define_method(:wait_client) do |*args|
        waiting << true
        super(*args)
      end
      define_method(:send_window) { |*args| super(*args).tap { |o| outcomes << o } }
    end)
    client = Thread.new { get(server, "/debug/pprof/profile?seconds=1") }
    assert(waiting.pop(timeout: DEADLINE), "the request's window is open and its send made")
    rperf_work_a(0.05)
    EintrProbe.run("nanosleep", 2000, 5) # the GVL held for 2 s
    res = client.join(DEADLINE)&.value
    assert_equal(:sent, outcomes.pop(timeout: DEADLINE), "answered by the send, not by the request's thread")
    assert_equal("200", res&.code, res&.body)
    assert_equal('attachment; filename="profile"', res["content-disposition"])
    assert_operator(weight(pprof(res.body).data, "Object#rperf_work_a"), :>, 0)
  end

  # A profile's window starts when its request arrives, not when a Ruby
  # thread of the listener gets the GVL: the accepting thread (C) reads the
  # request line as it comes and has a postponed job open the window on
  # whichever thread holds the GVL. Here that is this thread, which keeps
  # the GVL from the request's first byte to the end (priority 3: an
  # 800 ms time slice, then a C call that never checks interrupts, past
  # the window's end): no listener thread runs meanwhile, yet the window
  # opened before the C call, and the answer is sent when it returns.
  def test_a_window_starts_when_its_request_arrives
    Rperf.start(mode: :cpu, frequency: 1000)
    server = serve
    outcomes = Queue.new
    server.singleton_class.prepend(Module.new do
      define_method(:send_window) { |*args| super(*args).tap { |o| outcomes << o } }
    end)
    before = Rperf._c_window_marks_open
    priority = Thread.current.priority
    Thread.current.priority = 3
    begin
      sock = TCPSocket.new(server.host, server.port)
      @sockets << sock
      sock.write_nonblock("GET /debug/pprof/profile?seconds=1 HTTP/1.1\r\nHost: localhost\r\n\r\n")
      opened = false
      # Ruby code, no GVL release (the job runs here), well within the
      # 800 ms time slice
      until_at = now + 0.6
      until (opened = Rperf._c_window_marks_open > before) || now > until_at
      end
      held_from = Process.clock_gettime(Process::CLOCK_REALTIME, :nanosecond)
      EintrProbe.run("nanosleep", 1500, 5) # the GVL held past the window's end
    ensure
      Thread.current.priority = priority
    end
    assert(opened, "the window opened while this thread held the GVL")
    head, body = read_all(sock).split("\r\n\r\n", 2)
    assert_match(%r{\AHTTP/1\.1 200 }, head.to_s)
    assert_equal(:sent, outcomes.pop(timeout: DEADLINE))
    data = pprof(body.to_s).data
    assert_operator(data[:start_time_ns], :<, held_from, "the window started before the listener's threads could run")
  end

  # The heap routes' windows through the listener: answered by the send
  # (ruby/window_send.c) with the route's sample type, Go's file name and
  # the allocations of the window.
  def test_heap_window_through_the_listener
    Rperf.start(mode: :alloc, alloc_interval: 16)
    server = serve
    scrape = Thread.new { get(server, "/debug/pprof/heap?seconds=1") }
    assert(poll { Rperf._c_window_marks_open.positive? }, "the heap window is open")
    kept = []
    heap_route_strings(kept) # 30,000 Strings made in the window, still referenced
    res = scrape.join(DEADLINE)&.value
    assert_equal("200", res&.code, res&.body)
    assert_equal('attachment; filename="heap"', res["content-disposition"])
    assert_equal("inuse_space", pprof(res.body, "heap?seconds=1").type)
    raw = Rperf._decode_pprof(res.body, "heap?seconds=1")
    ao = raw[:sample_types].map(&:first).index("alloc_objects")
    mine = raw[:samples].select { |frames, *| frames.any? { |f| f[1] == "Object#heap_route_strings" } }
    assert_in_delta(30_000, mine.sum { |_, v, _| v[ao] }, 6_000, "alloc_objects of the window")
    kept.clear
  end

  def test_listener_answers
    server = serve
    # outside /debug/pprof: nothing is served
    %w[/ /profile /debug /debug/pprofx /etc/passwd].each do |path|
      res = get(server, path)
      assert_equal("404", res.code, path)
      assert(one_line?(res.body), res.body)
    end
    res = get(server, "/debug/pprof/")
    assert_equal(["200", "close"], [res.code, res["connection"]])
    assert_match(/profiling is off/, res.body)
    res = get(server, "/debug/pprof/profile?seconds=1")
    assert_equal(["503", true], [res.code, one_line?(res.body)], res.body)
    res = get(server, "/debug/pprof/profile?seconds=x")
    assert_equal(["400", true], [res.code, one_line?(res.body)], res.body)
    res = get(server, "/debug/pprof/heap")
    assert_equal(["503", true], [res.code, one_line?(res.body)], res.body)
    assert_match(/profiling is not running: start a run that samples allocations/, res.body)
    # malformed or oversized requests: one line, then closed
    ["GARBAGE\r\n\r\n", "GET /debug/pprof/ HTTP/2.0\r\n\r\n", "GET /debug/pprof/ HTTP/1.1\r\nno colon\r\n\r\n",
     "GET /debug/pprof/ HTTP/1.1\r\n#{(1..70).map { |i| "x-h#{i}: v\r\n" }.join}\r\n"].each do |req|
      out = raw(server, req)
      assert_match(%r{\AHTTP/1\.1 (400|431) }, out, req[0, 40])
      assert(one_line?(out.split("\r\n\r\n", 2)[1].to_s), out)
    end
    out = raw(server, "GET /debug/pprof/?#{'a' * 9000} HTTP/1.1\r\n\r\n")
    assert_match(%r{\AHTTP/1\.1 431 }, out)
    # absolute-form targets and HEAD
    assert_match(%r{\AHTTP/1\.1 200 }, raw(server, "GET http://x/debug/pprof/ HTTP/1.1\r\n\r\n"))
    out = raw(server, "HEAD /debug/pprof/ HTTP/1.1\r\n\r\n")
    assert_match(%r{\AHTTP/1\.1 200 }, out)
    assert_equal("", out.split("\r\n\r\n", 2)[1], "HEAD: no body")
  end

  def test_token_and_bind_address
    server = serve(token: "tok-123")
    assert_equal("127.0.0.1", server.host, "loopback unless a host is given")
    assert(server.loopback?)
    res = get(server, "/debug/pprof/")
    assert_equal(["401", 'Bearer realm="rperf"'], [res.code, res["www-authenticate"]])
    assert_equal("401", get(server, "/debug/pprof/", "Authorization" => "Bearer tok-124").code)
    assert_equal("200", get(server, "/debug/pprof/", "Authorization" => "Bearer tok-123").code)
    # a profile request without the token opens no window on its way in
    # (the accepting thread checks the token before it asks for one)
    Rperf.start(mode: :cpu)
    open_before = Rperf._c_window_marks_open
    ["", "Bearer tok-124", "Bearer tok-1234", "Basic tok-123"].each do |auth|
      headers = auth.empty? ? {} : { "Authorization" => auth }
      assert_equal("401", get(server, "/debug/pprof/profile?seconds=1", headers).code, auth)
      assert_equal(open_before, Rperf._c_window_marks_open, "no window for #{auth.inspect}")
    end
    Rperf.stop

    # RPERF_SERVE_TOKEN is the default token
    begin
      ENV["RPERF_SERVE_TOKEN"] = "from-env"
      env_server = serve
    ensure
      ENV.delete("RPERF_SERVE_TOKEN")
    end
    assert_equal("401", get(env_server, "/debug/pprof/").code)
    assert_equal("200", get(env_server, "/debug/pprof/", "Authorization" => "Bearer from-env").code)

    other = Socket.ip_address_list.find { |a| a.ipv4? && !a.ipv4_loopback? }&.ip_address
    omit("no non-loopback IPv4 address on this machine: the bind rule is checked on loopback only") unless other
    # the default listener is not reachable on the machine's other address
    assert_raise(Errno::ECONNREFUSED) { TCPSocket.new(other, server.port).close }
    # all addresses, when asked; without a token that is said on stderr
    err = capture_stderr { @open = serve(host: "0.0.0.0") }
    assert_match(/without a token/, err)
    refute(@open.loopback?)
    sock = TCPSocket.new(other, @open.port)
    @sockets << sock
    sock.write("GET /debug/pprof/ HTTP/1.1\r\n\r\n")
    assert_match(%r{\AHTTP/1\.1 200 }, read_all(sock))
  end

  def capture_stderr
    saved = $stderr
    $stderr = StringIO.new
    yield
    $stderr.string
  ensure
    $stderr = saved
  end

  # A client that connects and sends nothing holds its own connection
  # only, until the read timeout closes it (408).
  def test_silent_client
    patient = serve(read_timeout: 600)
    silent = TCPSocket.new(patient.host, patient.port)
    @sockets << silent
    assert_equal("200", get(patient, "/debug/pprof/").code, "served while a silent client is connected")

    quick = serve(read_timeout: 0.3)
    sock = TCPSocket.new(quick.host, quick.port)
    @sockets << sock
    assert_match(%r{\AHTTP/1\.1 408 }, read_all(sock), "the silent client is answered 408 and closed")

    # stop is not held up by the silent client (it is woken, not waited for)
    stopper = Thread.new { patient.stop }
    assert(stopper.join(DEADLINE), "stop returns with a silent client connected")
    assert(stopper.value)
    assert_equal("", read_all(silent), "the silent client's connection is closed at stop")
  end

  # Past max_connections a connection is answered 503 at once; a client
  # that leaves a profile frees its place for the next.
  def test_connection_and_profile_limits
    server = serve(max_connections: 2)
    2.times { @sockets << TCPSocket.new(server.host, server.port) } # silent: both places taken
    third = TCPSocket.new(server.host, server.port)
    @sockets << third
    out = read_all(third)
    assert_match(%r{\AHTTP/1\.1 503 }, out)
    assert_match(/too many connections/, out)
    @sockets.each(&:close)
    # the handlers notice the closed connections; then a request is served
    res = poll { r = get(server, "/debug/pprof/"); r if r.code == "200" }
    refute_nil(res, "served once the silent clients have left")

    Rperf.start(mode: :cpu)
    one = serve(max_profiles: 1)
    leaving = TCPSocket.new(one.host, one.port)
    leaving.write("GET /debug/pprof/profile?seconds=3600 HTTP/1.1\r\n\r\n")
    assert(wait_profiles(one, 1))
    busy = get(one, "/debug/pprof/profile?seconds=1")
    assert_equal(["503", true], [busy.code, one_line?(busy.body)], "the 3600 s profile holds the only place")
    assert_match(/busy: 1 profile requests in progress/, busy.body)
    leaving.close # the client gives up: its window closes, its place is free
    assert(wait_profiles(one, 0), "the place of a client that left is freed")
    res = get(one, "/debug/pprof/profile?seconds=1")
    assert_equal("200", res.code, res.body)
    pprof(res.body)
  end

  # The block's value once it is truthy (nil after DEADLINE seconds). A
  # connection refused or reset on the way (a full listener closing) is
  # tried again.
  def poll
    deadline = now + DEADLINE
    while now < deadline
      begin
        v = yield
        return v if v
      rescue Errno::ECONNRESET, Errno::EPIPE, EOFError
        nil
      end
      sleep 0.05
    end
    nil
  end

  # Once the index says `n` profile requests are in progress: true (nil
  # after DEADLINE seconds).
  def wait_profiles(server, n, headers = {})
    poll { get(server, "/debug/pprof/", headers).body.match?(/;\s+#{n} of at most/) }
  end

  def test_stop
    server = serve(max_profiles: 1)
    port = server.port
    Rperf.start(mode: :cpu)
    pending = Thread.new { get(server, "/debug/pprof/profile?seconds=3600") }
    assert(wait_profiles(server, 1), "the 3600 s profile is in progress; other requests are served meanwhile")
    stopper = Thread.new { server.stop }
    assert(stopper.join(DEADLINE), "stop returns while a profile is in progress")
    assert_equal([true, false], [stopper.value, server.stop], "stop is idempotent")
    res = pending.join(DEADLINE)&.value
    assert_equal("503", res&.code, "the profile in progress is told the server stops")
    assert(server.stopped?)
    refute_includes(Rperf::Server.all, server)
    assert_raise(Errno::ECONNREFUSED) { TCPSocket.new("127.0.0.1", port).close }
    TCPServer.new("127.0.0.1", port).close # the port is free again
    assert(Rperf.running?, "stopping the listener leaves profiling alone")
    assert_equal(0, Thread.list.count { |t| t.name == "rperf-serve" && t.alive? }, "no listener thread left")
  end

  def test_threads_are_named_and_labelled
    Rperf.start(mode: :cpu)
    server = serve
    start_work
    # the flame graph: its window is closed and encoded on the listener's
    # thread (a pprof's mostly is not: a job and a thread of C do it)
    scrape = Thread.new { get(server, "/debug/pprof/flamegraph?seconds=1") }
    assert(wait_profiles(server, 1))
    # the accepting thread and the one handling the profile (the index's
    # own thread may be gone already)
    assert_operator(Thread.list.count { |t| t.name == "rperf-serve" && t.alive? }, :>=, 2)
    assert_equal("200", scrape.join(DEADLINE)&.value&.code)
    data = Rperf.stop
    serve_sets = data[:label_sets].each_index.select { |i| data[:label_sets][i] == { rperf: "serve" } }
    served = data[:aggregated_samples].select { |s| serve_sets.include?(s[3]) }
    assert_not_empty(served, "the listener's work carries rperf=serve")
    work_sets = data[:aggregated_samples].select { |s| s[0].any? { |f| f[1] == "Object#rperf_work_a" } }.map { |s| s[3] }
    refute(work_sets.any? { |set| serve_sets.include?(set) }, "the application's threads are not labelled")
  end

  # ---- processes -----------------------------------------------------------

  # A fork child does not keep the listening socket: once the parent stops
  # its listener, the port is free while the child still runs.
  def test_fork_child_drops_the_listener
    run = run_child(<<~RUBY, timeout: 60)
      require "rperf/serve"
      server = Rperf.serve(port: 0)
      port = server.port
      r, w = IO.pipe
      ready_r, ready_w = IO.pipe
      pid = fork do
        w.close
        ready_r.close
        own = Rperf.serve(port: 0) # a child may serve on a port of its own
        ok = Rperf::Server.all == [own]
        own.stop
        ready_w.close # the child is running its own code: the fork hook is done
        r.read # until the parent is done
        exit!(ok ? 0 : 3)
      end
      r.close
      ready_w.close
      ready_r.read
      server.stop
      rebound = begin
        TCPServer.new("127.0.0.1", port).close
        true
      rescue Errno::EADDRINUSE
        false
      end
      w.close
      _, status = Process.wait2(pid)
      child_report(rebound: rebound, child_status: status.exitstatus)
    RUBY
    assert_child_ok(run)
    assert_equal({ "rebound" => true, "child_status" => 0 }, run.report, run.describe)
  end

  # RPERF_SERVE starts the listener at require (with RPERF_SERVE_START, an
  # on-demand run per request); exit with a profile in progress neither
  # hangs nor loses the process's exit status.
  def test_environment_and_exit
    script = <<~RUBY
      require "net/http"
      server = Rperf::Server.all.first
      res = Net::HTTP.get_response(URI(server.url + "profile?seconds=1"))
      report = { host: server.host, code: res.code, running_after: Rperf.running? }
      # the second request's client is another process, as a scraper is (a
      # client thread of this process ending while Ruby 3.4's M:N threads
      # tear the VM down can crash Ruby itself), on 1:1 threads for the same
      # reason
      spawn({ "RUBY_MN_THREADS" => nil, "RPERF_SERVE" => nil, "RPERF_SERVE_START" => nil }, RbConfig.ruby,
            "-rnet/http", "-e", "Net::HTTP.get_response(URI(ARGV[0])) rescue nil",
            server.url + "profile?seconds=3600", out: File::NULL, err: File::NULL)
      sleep 0.05 until Rperf.running?  # the on-demand run of the second request
      child_report(report)
      exit 7
    RUBY
    env = { "RPERF_SERVE" => "127.0.0.1:0", "RPERF_SERVE_START" => "cpu" }
    run = run_child(script, env: env, timeout: 120)
    assert_equal(7, run.status&.exitstatus, run.describe)
    refute(run.timed_out)
    assert_equal({ "host" => "127.0.0.1", "code" => "200", "running_after" => false }, run.report)
    assert_empty(run.stderr)

    run = run_child("child_report(code: Net::HTTP.get_response(URI(Rperf::Server.all.first.url + 'profile')).code)",
                    env: { "RPERF_SERVE" => "0" }, ruby_args: ["-rnet/http"], timeout: 60)
    assert_child_ok(run)
    assert_equal("503", run.report["code"], "without RPERF_SERVE_START a scrape starts nothing")

    run = run_child("1", env: { "RPERF_SERVE" => "localhost:http" }, timeout: 60)
    refute(run.success?)
    assert_match(/RPERF_SERVE must be PORT, HOST:PORT/, run.stderr)

    # a port taken already (a spawned program inheriting the variable):
    # one line, and the program runs
    taken = TCPServer.new("127.0.0.1", 0)
    begin
      run = run_child("child_report(servers: Rperf::Server.all.size)",
                      env: { "RPERF_SERVE" => taken.local_address.ip_port.to_s }, timeout: 60)
    ensure
      taken.close
    end
    assert_child_ok(run)
    assert_equal(0, run.report["servers"])
    assert_match(/\Arperf: RPERF_SERVE=\d+: not serving: .*in use.*\n\z/i, run.stderr)
  end

  # ---- a Puma cluster: one listener in the master -------------------------

  PUMA_APP = <<~RUBY
    # each request burns CPU in a method of its own; answers the worker's pid
    module ScrapedApp
      def self.burn(seconds)
        deadline = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + seconds
        x = 0
        x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < deadline
        x
      end

      def self.call(env)
        burn(0.005) if env["PATH_INFO"] == "/burn"
        [200, { "content-type" => "text/plain" }, [Process.pid.to_s]]
      end
    end
  RUBY

  def puma_config(dir)
    <<~RUBY
      require "rperf"
      require "rperf/serve"
      require_relative "app"
      workers 2
      threads 2, 2
      bind "unix://#{dir}/puma.sock"
      preload_app!
      app ScrapedApp
      # as docs/continuous-profiling.md gives it, plus the port for the test
      before_fork do
        unless Rperf.running?
          Rperf.start(mode: :cpu, frequency: 1000)
          server = Rperf.serve(port: 0)
          File.write("#{dir}/port.tmp", server.port.to_s)
          File.rename("#{dir}/port.tmp", "#{dir}/port")
        end
      end
    RUBY
  end

  # The inode of the TCP socket listening on `port` (from /proc/net/tcp).
  def listen_inode(port)
    File.readlines("/proc/net/tcp").drop(1).each do |l|
      f = l.split
      return f[9] if f[1].end_with?(format(":%04X", port)) && f[3] == "0A"
    end
    nil
  end

  def socket_inodes(pid)
    Dir.glob("/proc/#{pid}/fd/*").filter_map { |fd| File.readlink(fd)[/\Asocket:\[(\d+)\]\z/, 1] rescue nil }
  end

  # While both workers serve requests, two scrapes at once of the master's
  # listener each hold the workers' samples (labelled with their pids);
  # no worker holds the listening socket.
  def test_puma_cluster_scraped_from_the_master
    reason = RperfServers.skip_reason("puma")
    omit("Puma cluster scrape skipped: #{reason}") if reason

    dir = Dir.mktmpdir("rperf-puma-scrape")
    tmp = File.join(dir, "tmp") # the cluster's run directory goes there
    Dir.mkdir(tmp, 0o700)
    File.write(File.join(dir, "app.rb"), PUMA_APP)
    File.write(File.join(dir, "puma.rb"), puma_config(dir))
    sock = File.join(dir, "puma.sock")
    puma = RperfServers::Server.new(RperfServers.env.merge("TMPDIR" => tmp, "RPERF_WINDOW_SECONDS" => "1"),
                                    [RbConfig.ruby, "-I", RPERF_BUILD_LIB, RperfServers.bin("puma"), "-C", "puma.rb"],
                                    chdir: dir, log: File.join(dir, "puma.log"))
    request = lambda do
      UNIXSocket.open(sock) do |s|
        s.timeout = DEADLINE
        s.write("GET /burn HTTP/1.0\r\nHost: localhost\r\n\r\n")
        head, body = s.read.split("\r\n\r\n", 2)
        head.to_s.start_with?("HTTP/1.1 200", "HTTP/1.0 200") ? body.to_i : nil
      end
    rescue Errno::ENOENT, Errno::ECONNREFUSED
      nil
    end
    workers = []
    ready = RperfServers.wait_for(60, unless_gone: puma) do
      File.exist?(File.join(dir, "port")) && (pid = request.call) && (workers |= [pid]).size >= 2
    end
    assert(ready, "the cluster serves from two workers\n#{puma.tail}")
    port = Integer(File.read(File.join(dir, "port")))
    master = Struct.new(:host, :port).new("127.0.0.1", port)

    driving = true
    clients = Array.new(4) { Thread.new { request.call while driving } }
    begin
      scrapes = Array.new(2) { Thread.new { get(master, "/debug/pprof/profile?seconds=4") } }
      responses = scrapes.map { |t| t.join(DEADLINE)&.value }
    ensure
      driving = false
      clients.each { |t| t.join(DEADLINE) }
    end
    responses.each_with_index do |res, i|
      refute_nil(res, "scrape #{i} answered")
      assert_equal("200", res.code, res.body)
      data = pprof(res.body, "scrape #{i}").data
      by_pid = data[:aggregated_samples].each_with_object(Hash.new(0)) do |(frames, w, _, set), h|
        h[data[:label_sets][set][:pid]] += w if frames.any? { |f| f[1] == "ScrapedApp.burn" }
      end
      # each worker sends its window every second (RPERF_WINDOW_SECONDS=1):
      # 4 seconds hold both, each under its pid, and nothing else burns
      assert_equal(workers.sort, by_pid.keys.sort, "scrape #{i}: CPU in ScrapedApp.burn by pid: #{by_pid}")
    end

    inode = listen_inode(port)
    refute_nil(inode, "the master listens on #{port}")
    assert_includes(socket_inodes(puma.pid), inode)
    workers.each { |w| refute_includes(socket_inodes(w), inode, "worker #{w} holds no copy of the listener") }
  ensure
    puma&.kill
    FileUtils.rm_rf(dir) if dir
  end
end
