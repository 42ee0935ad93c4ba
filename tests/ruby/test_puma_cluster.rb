# frozen_string_literal: true

# tests/ruby/test_puma_cluster.rb — a real Puma cluster (the pinned gem
# script/setup installs, tests/ruby/servers_helper.rb) profiled from its
# master: config/puma.rb as a user writes it (cluster mode, preload_app!, 2
# workers x 8 threads, Rperf.start(mode: :cpu, output:) in before_fork), a
# Rack app that burns CPU per request, served on a unix socket in a private
# temp dir, with the server's TMPDIR private too.
#
# One cluster run serves every test of this file (the tests read what it
# left): requests until each worker has served 100; a snapshot in the
# master (a thread started in Puma's after_booted hook; the workers write a
# window every RPERF_WINDOW_SECONDS, 1 s here) until it holds both running
# workers; one worker stopped with TERM, as an operator would, and its
# replacement (forked by the master) serving 100 too; then TERM to the
# master. Each worker records its CPU time (CLOCK_PROCESS_CPUTIME_ID, and
# the profiler's own threads' share) in Puma's before_worker_shutdown hook;
# the master records how each worker ended (after_worker_shutdown) and
# what Rperf.snapshot holds in after_stopped (which Puma runs inside its
# SIGTERM trap). Asserted, as a user of the output needs it: every worker,
# the replacement too, in the master's output under its pid; each worker's
# sampled CPU within 10 % of its CPU time; every request answered, every
# worker exiting 0, the output written and no run directory left; the
# master's snapshots holding the running workers, and every process at
# shutdown. Bounded: every wait has a deadline, the server runs in a
# process group of its own, killed whole whatever happens.
#
# The config works around a Puma shutdown hang that is not rperf's (see
# the comment in it).
#
# Skips (omit) only when the gems are not installed.

require_relative "helper"
require_relative "servers_helper"
require "rperf/report"
require "socket"
require "fileutils"

class TestPumaCluster < Test::Unit::TestCase
  BURN = 0.010         # CPU seconds each request burns in ClusterApp.burn
  PER_WORKER = 100     # requests each worker serves at least
  MAX_REQUESTS = 4000  # bounds on the client, whatever the balance between workers
  CLIENTS = 8          # client threads (one connection per request)
  BOOT_WAIT = 60       # s: the cluster answers, a replacement worker answers
  DRIVE_WAIT = 120     # s: one phase of requests
  STOP_WAIT = 90       # s: the master exits after its TERM (Puma kills a worker stuck 30 s)
  LIVE_WAIT = 30       # s: the master's snapshot holds both running workers

  APP = <<~RUBY
    # A Rack app: each request burns CPU in a method of its own and answers
    # with the worker's pid (the client counts requests per worker).
    module ClusterApp
      def self.burn(seconds)
        deadline = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + seconds
        x = 0
        x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < deadline
        x
      end

      def self.call(env)
        burn(#{BURN}) if env["PATH_INFO"] == "/burn"
        [200, { "content-type" => "text/plain" }, [Process.pid.to_s]]
      end
    end
  RUBY

  # config/puma.rb as docs/servers.md gives it, plus the test's records.
  def self.config(dir)
    <<~RUBY
      require "json"
      require "rperf"
      require_relative "app"

      #{RperfServers::PUMA_NOTIFY_NONBLOCKING}
      workers 2
      threads 8, 8
      bind "unix://#{dir}/puma.sock"
      preload_app!
      app ClusterApp

      before_fork do
        Rperf.start(mode: :cpu, frequency: 1000, output: "#{dir}/cluster.pb.gz") unless Rperf.running?
      end

      # in each worker as it stops: its own CPU time since its fork, and
      # how much of it the profiler's own threads (rperf-timer,
      # rperf-worker: never sampled) used
      before_worker_shutdown do
        own = Dir.glob("/proc/self/task/*").sum do |t|
          File.read("\#{t}/comm").start_with?("rperf-") ? File.read("\#{t}/schedstat").split[0].to_i / 1e9 : 0
        rescue SystemCallError
          0 # the thread has just ended
        end
        File.write("#{dir}/worker-\#{Process.pid}.cpu",
                   JSON.dump("cpu" => Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID), "profiler" => own))
      end

      # in the master while the workers run: what Rperf.snapshot holds,
      # rewritten every 0.2 s until the test has read it (stop-live)
      after_booted do
        Thread.new do
          until File.exist?("#{dir}/stop-live")
            snap = Rperf.snapshot or break
            rec = { "process_count" => snap[:process_count],
                    "pids" => (snap[:label_sets] || []).filter_map { |s| s[:pid] }.uniq.sort }
            File.write("#{dir}/live.tmp", JSON.dump(rec))
            File.rename("#{dir}/live.tmp", "#{dir}/live.json")
            sleep 0.2
          end
        end
      end

      # in the master, as it reaps a worker: how the worker ended
      after_worker_shutdown do |worker|
        File.write("#{dir}/exits.txt", "\#{worker.pid} \#{worker.process_status.inspect}\n", mode: "a")
      end

      # in the master, every worker stopped (Puma runs it in its TERM trap)
      after_stopped do
        rec = begin
          snap = Rperf.snapshot
          { "process_count" => snap[:process_count],
            "pids" => snap[:label_sets].filter_map { |s| s[:pid] }.uniq.sort }
        rescue Exception => e # rubocop:disable Lint/RescueException
          { "error" => "\#{e.class}: \#{e.message}", "at" => e.backtrace.first(3) }
        end
        File.write("#{dir}/root.json", JSON.dump(rec))
      end
    RUBY
  end

  # What the run left, read by the tests.
  Run = Struct.new(:profile, :worker_cpu, :served, :root, :live, :status, :tmp_left, :failures, :retries, :exits,
                   :log, keyword_init: true)

  class << self
    # The cluster run, made by the first test that needs it (an error in it
    # is raised again in every test).
    def cluster_run
      @cluster_run ||= begin
        ClusterRun.new.call
      rescue StandardError, Test::Unit::AssertionFailedError => e
        e
      end
      raise @cluster_run if @cluster_run.is_a?(Exception)

      @cluster_run
    end
  end

  # Starts the cluster, drives it, restarts a worker, stops it, collects.
  class ClusterRun
    def initialize
      @dir = Dir.mktmpdir("rperf-puma")
      @tmp = File.join(@dir, "tmp") # the server's TMPDIR: only its run directory goes there
      Dir.mkdir(@tmp, 0o700)
      @sock = File.join(@dir, "puma.sock")
      @served = Hash.new(0)
      @failures = []
      @lock = Mutex.new
    end

    def call
      File.write(File.join(@dir, "app.rb"), APP)
      File.write(File.join(@dir, "puma.rb"), TestPumaCluster.config(@dir))
      @server = RperfServers::Server.new(RperfServers.env.merge("TMPDIR" => @tmp, "RPERF_WINDOW_SECONDS" => "1"),
                                         [RbConfig.ruby, "-I", RPERF_BUILD_LIB, RperfServers.bin("puma"), "-C", "puma.rb"],
                                         chdir: @dir, log: File.join(@dir, "puma.log"))
      RperfServers.wait_for(BOOT_WAIT, unless_gone: @server) { request("/ping") } or fail_run("the cluster did not answer")
      drive { workers_with(PER_WORKER).size >= 2 }
      live = live_snapshot(workers_with(PER_WORKER))
      first = workers_with(PER_WORKER).min
      Process.kill(:TERM, first) # as an operator would; the master forks a replacement
      drive { (workers_with(PER_WORKER) - [first]).size >= 2 }
      # TERM to the master, as at a deploy: it stops its workers and exits
      status = @server.stop(:TERM, seconds: STOP_WAIT) or fail_run("the master did not exit #{STOP_WAIT} s after TERM")
      collect(status).tap { |run| run.live = live }
    ensure
      @server&.kill # whatever is left of its process group (a failure mid-run)
      FileUtils.remove_entry(@dir)
    end

    private

    def fail_run(why)
      raise Test::Unit::AssertionFailedError, "#{why}; served: #{@served}\n#{@server.tail}"
    end

    # The master's snapshot once it holds both running workers (each
    # writes a window every RPERF_WINDOW_SECONDS), or the last one seen
    # after LIVE_WAIT; the master's snapshot thread ends then.
    def live_snapshot(workers)
      path = File.join(@dir, "live.json")
      read = -> { File.exist?(path) ? JSON.parse(File.read(path)) : {} }
      RperfServers.wait_for(LIVE_WAIT, unless_gone: @server) { (workers - read.call.fetch("pids", [])).empty? }
      read.call.merge("running" => workers.sort)
    ensure
      File.write(File.join(@dir, "stop-live"), "")
    end

    def workers_with(count)
      @lock.synchronize { @served.select { |_, n| n >= count }.keys }
    end

    # CLIENTS threads send /burn requests until `done` holds, within
    # MAX_REQUESTS and DRIVE_WAIT.
    def drive(&done)
      deadline = RperfServers.now + DRIVE_WAIT
      sent = 0
      go = lambda do
        @lock.synchronize do
          next false if sent >= MAX_REQUESTS || RperfServers.now > deadline

          sent += 1
        end
      end
      Array.new(CLIENTS) { Thread.new { request("/burn") while go.call && !done.call } }.each(&:join)
      done.call or fail_run("requests did not reach every worker after #{sent}")
    end

    # One request over a new connection; counts the answering worker.
    # -> true when answered 200. A connection the server closed before
    # answering anything (a worker stopping as it is restarted) is tried
    # once more, as a proxy retries an idempotent GET; the retries are
    # counted in the context.
    def request(path, retried: false)
      UNIXSocket.open(@sock) do |s|
        s.timeout = 30
        s.write("GET #{path} HTTP/1.0\r\nHost: localhost\r\n\r\n")
        head, body = s.read.split("\r\n\r\n", 2)
        ok = head.to_s.start_with?("HTTP/1.1 200", "HTTP/1.0 200")
        @lock.synchronize { ok ? @served[body.to_i] += 1 : @failures << "#{path}: #{head.to_s.lines.first.inspect}" }
        ok
      end
    rescue Errno::ENOENT, Errno::ECONNREFUSED
      false # not listening yet
    rescue Errno::EPIPE, Errno::ECONNRESET => e
      @lock.synchronize { (retried ? @failures : (@retries ||= [])) << "#{path}: #{e.class}: #{e.message}" }
      retried ? false : request(path, retried: true)
    rescue IOError, SystemCallError => e
      @lock.synchronize { @failures << "#{path}: #{e.class}: #{e.message}" }
      false
    end

    def read(name)
      path = File.join(@dir, name)
      File.exist?(path) ? File.read(path) : nil
    end

    def collect(status)
      cpu = Dir.glob(File.join(@dir, "worker-*.cpu")).to_h { |f| [f[/worker-(\d+)/, 1].to_i, JSON.parse(File.read(f))] }
      out = File.join(@dir, "cluster.pb.gz")
      Run.new(profile: File.exist?(out) ? Rperf::Report.load(out) : nil, worker_cpu: cpu, served: @served.dup,
              root: read("root.json")&.then { |j| JSON.parse(j) }, status: status, tmp_left: Dir.children(@tmp),
              failures: @failures.dup, retries: (@retries || []).dup, exits: read("exits.txt").to_s, log: @server.tail)
    end
  end

  def setup
    reason = RperfServers.skip_reason("puma")
    omit("Puma cluster test skipped: #{reason}") if reason
    @run = self.class.cluster_run
  end

  # pid => sum of the weights of the samples labelled with it (nil: the master's)
  def weight_by_pid
    data = @run.profile.data
    data[:aggregated_samples].each_with_object(Hash.new(0)) do |(_f, w, _seq, set), h|
      h[data[:label_sets][set][:pid]] += w
    end
  end

  # pid => function names on its samples
  def functions_by_pid
    data = @run.profile.data
    data[:aggregated_samples].each_with_object(Hash.new { |h, k| h[k] = [] }) do |(frames, _w, _seq, set), h|
      h[data[:label_sets][set][:pid]].concat(frames.map { |f| f[1] })
    end
  end

  def context
    "served: #{@run.served}, worker CPU: #{@run.worker_cpu}, root: #{@run.root}, live: #{@run.live}, failed requests: " \
      "#{@run.failures.first(5)}, retried: #{@run.retries}\nworker exits:\n#{@run.exits}#{@run.log}"
  end

  # Puma's master ends by raising SignalException for TERM
  # (raise_exception_on_sigterm, true by default): at_exit blocks run,
  # then Ruby ends the process by that signal.
  def test_master_exits_cleanly_and_writes_the_output
    st = @run.status
    assert_true(st.success? || st.termsig == Signal.list["TERM"],
                "the master ends as Puma ends it after TERM: #{st.inspect}\n#{context}")
    assert_empty(@run.failures, "every request answered 200\n#{context}")
    # a worker killed (Puma SIGKILLs one stuck at its stop) writes nothing
    assert_equal(["exit 0"] * @run.served.size, @run.exits.scan(/(exit \d+|signal \d+)/).flatten,
                 "each worker exits 0\n#{context}")
    assert_not_nil(@run.profile, "the master wrote cluster.pb.gz at exit\n#{context}")
  end

  def test_every_worker_is_in_the_output_under_its_pid
    assert_not_nil(@run.profile, context)
    workers = @run.served.keys.sort
    assert_equal(3, workers.size, "two workers, then the restarted one's replacement served\n#{context}")
    assert_equal(workers, @run.worker_cpu.keys.sort, "each worker ran its shutdown hook\n#{context}")
    by_pid = functions_by_pid
    assert_equal([nil, *workers].sort_by(&:to_i), by_pid.keys.sort_by(&:to_i),
                 "samples of the master (no pid label) and of each worker, the replacement too\n#{context}")
    workers.each do |pid|
      assert_include(by_pid[pid], "ClusterApp.burn", "worker #{pid}'s requests are in its samples")
    end
    assert_not_include(by_pid[nil], "ClusterApp.burn", "the master serves no request")
  end

  # An accounting check, not a timing threshold: the samples of a worker
  # weigh the CPU its Ruby threads used (cpu mode), so their sum is the
  # worker's own CPU time less what the profiler's own threads used (its
  # timer thread's share grows with wall time, so on a loaded machine or
  # under M:N threads it is 3-6 % of such a short-lived worker's CPU) and
  # the instants around the fork and the exit.
  def test_each_workers_sampled_cpu_matches_its_cpu_time
    assert_not_nil(@run.profile, context)
    sampled = weight_by_pid
    @run.worker_cpu.each do |pid, rec|
      cpu = rec["cpu"] - rec["profiler"]
      got = sampled[pid] / 1e9
      assert_in_delta(cpu, got, cpu * 0.10,
                      "worker #{pid}: sampled #{got.round(3)} s of CPU; it used #{rec['cpu'].round(3)} s, " \
                      "#{rec['profiler'].round(3)} s of it in the profiler's threads\n#{context}")
    end
  end

  def test_no_run_directory_is_left
    assert_empty(@run.tmp_left.grep(/\Arperf-run-/), "the master removed its run directory\n#{context}")
  end

  # Each running worker writes its window every RPERF_WINDOW_SECONDS (1 s
  # here, 5 s by default): the master's snapshot holds them while they run.
  def test_root_snapshot_holds_running_workers
    assert_equal(@run.live["running"], @run.live["pids"], "a snapshot in the master while both workers run\n#{context}")
    assert_equal(3, @run.live["process_count"], "the master and its two workers\n#{context}")
  end

  # Puma's after_stopped hook runs in the master's SIGTERM trap, every
  # worker stopped: a snapshot there holds the master and each worker that
  # ran (process_count), their pids as labels.
  def test_root_snapshot_at_shutdown_counts_every_process
    rec = @run.root
    assert_not_nil(rec, "the after_stopped hook ran\n#{context}")
    assert_nil(rec["error"], "Rperf.snapshot in Puma's after_stopped hook (a trap handler)\n#{context}")
    assert_equal(1 + @run.served.size, rec["process_count"], context)
    assert_equal(@run.served.keys.sort, rec["pids"], context)
  end
end
