# frozen_string_literal: true

# tests/ruby/test_interop_pprof_http.rb — the pprof listener (Rperf.serve)
# read by Go's own client: `go tool pprof -raw` and `-top` fetching
# /debug/pprof/profile?seconds=N over HTTP (the URL as a user types it, and
# the bare host:port, to which pprof adds /debug/pprof/profile itself),
# several at once, in cpu and wall mode; and a fetched body checked by
# pprof-strict (Go's `profile` package: parse + CheckValid). Label: interop;
# skips (exit 77) when go or pprof-strict is missing.
#
# Bounded: each go command runs under a watchdog, the listener and the
# workload are stopped in teardown.

require_relative "helper"
require_relative "../interop/helper"
require "rperf/serve"
require "net/http"

H = InteropHelper
H.require_readers!([["pprof-strict (#{H::PPROF_STRICT})", File.executable?(H::PPROF_STRICT)],
                    ["go (golang-go)", !H.go.nil?]])

class TestInteropPprofHttp < Test::Unit::TestCase
  include RperfTestHelper

  WATCHDOG = 120 # s: one go command (a 2 s profile plus Go's start-up)

  def setup
    @dir = Dir.mktmpdir("rperf-pprof-http")
    @working = false
    @server = nil
  end

  def teardown
    @working = false
    @worker&.join(WATCHDOG)
    @server&.stop
    FileUtils.rm_rf(@dir)
  end

  def start_work
    @working = true
    @worker = Thread.new do
      while @working
        rperf_work_a(0.002)
        sleep 0.001
      end
    end
  end

  # `go tool pprof ARGS` -> [stdout, stderr, status]; pprof keeps the
  # profiles it fetches in PPROF_TMPDIR (our temporary directory).
  def go_pprof(*args)
    run = run_command([H.go, "tool", "pprof", *args], env: { "PPROF_TMPDIR" => @dir }, timeout: WATCHDOG)
    assert(!run.timed_out, "go tool pprof #{args.join(' ')} timed out")
    [run.stdout, run.stderr, run.status]
  end

  # Several fetches at once, each its own window: the -raw dump of the URL
  # a user types, the -top of the bare address, a body fetched by Ruby and
  # checked by pprof-strict.
  def test_go_tool_pprof_reads_the_endpoint
    Rperf.start(mode: :cpu, frequency: 1000)
    @server = Rperf.serve(port: 0)
    start_work
    base = "http://127.0.0.1:#{@server.port}"
    raw = Thread.new { go_pprof("-raw", "#{base}/debug/pprof/profile?seconds=2") }
    top = Thread.new { go_pprof("-top", "-seconds", "2", base) }
    body = Thread.new { Net::HTTP.get_response(URI("#{base}/debug/pprof/profile?seconds=2")) }

    out, err, status = raw.value
    assert(status.success?, "go tool pprof -raw failed: #{err}")
    assert_match(%r{Fetching profile over HTTP from #{Regexp.escape(base)}/debug/pprof/profile\?seconds=2}, err)
    assert_match(/^PeriodType: cpu nanoseconds$/, out)
    assert_match(/^Comment: rperf #{Regexp.escape(Rperf::VERSION)}$/, out)
    assert_match(/^Duration: 2\.\d\d$/, out, "a window of the 2 seconds asked")
    assert_match(/Object#rperf_work_a \S*helper\.rb/, out)

    out, err, status = top.value
    assert(status.success?, "go tool pprof -top failed: #{err}")
    assert_match(%r{from #{Regexp.escape(base)}/debug/pprof/profile\?seconds=2}, err,
                 "pprof adds the default path and seconds to the bare address")
    assert_match(/^Type: cpu$/, out)
    assert_match(/ Object#rperf_work_a$/, out)

    res = body.value
    assert_equal("200", res.code)
    path = File.join(@dir, "fetched.pb.gz")
    File.binwrite(path, res.body)
    out, err, status = H.run_cmd(H::PPROF_STRICT, path)
    assert(status.success?, "pprof-strict rejected the served profile: #{err}")
    assert_match(%r{: OK types=\[cpu/nanoseconds\] samples=[1-9]}, out)
  end

  def test_wall_mode
    Rperf.start(mode: :wall, frequency: 500)
    @server = Rperf.serve(port: 0)
    start_work
    out, err, status = go_pprof("-raw", "http://127.0.0.1:#{@server.port}/debug/pprof/profile?seconds=1")
    assert(status.success?, "go tool pprof -raw failed: #{err}")
    assert_match(/^PeriodType: wall nanoseconds$/, out)
    assert_match(/^Period: 2000000$/, out)
    assert_match(/\[GVL blocked\] <GVL>/, out, "the sleeping worker and the waiting listener")
    assert_match(/rperf:\[serve\]/, out, "the listener's own samples carry rperf=serve")
  end

  # What pprof tells its user when there is no profile to read: the
  # status and our one line (X-Go-Pprof, as Go's handlers send). pprof
  # sends no Authorization header: behind a token, fetch the profile with a
  # client that does (docs/continuous-profiling.md) and read the file.
  def test_errors_reach_the_user
    @server = Rperf.serve(port: 0, token: "t0k")
    _, err, status = go_pprof("-raw", "http://127.0.0.1:#{@server.port}/debug/pprof/profile?seconds=1")
    refute(status.success?)
    assert_match(/401 Unauthorized - rperf: unauthorized/, err)
    @server.stop

    # no run: what to start
    @server = Rperf.serve(port: 0)
    _, err, status = go_pprof("-raw", "http://127.0.0.1:#{@server.port}/debug/pprof/heap")
    refute(status.success?)
    assert_match(/503 Service Unavailable - rperf: profiling is not running: start a run that samples allocations/,
                 err)
    _, err, status = go_pprof("-raw", "http://127.0.0.1:#{@server.port}/debug/pprof/profile?seconds=1")
    refute(status.success?)
    assert_match(/503 Service Unavailable - rperf: profiling is not running: start it with Rperf\.start/, err)
    # a run without allocations: no heap profile
    Rperf.start(mode: :cpu)
    _, err, status = go_pprof("-raw", "http://127.0.0.1:#{@server.port}/debug/pprof/heap")
    refute(status.success?)
    assert_match(/404 Not Found - rperf: no memory profile: the run does not sample allocations/, err)
  end
end
