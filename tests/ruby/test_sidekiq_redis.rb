# frozen_string_literal: true

# tests/ruby/test_sidekiq_redis.rb — a real Sidekiq server (the pinned gem
# script/setup installs, tests/ruby/servers_helper.rb) against a real
# redis-server (Debian's, on a unix socket in a private temp dir, no
# persistence), profiled as docs/servers.md says: the app file adds
# Rperf::Sidekiq to the server middleware and starts the profiler (cpu
# mode, output written at exit). A client process enqueues jobs of two
# classes in two queues; each burns CPU in a method of its own. When every
# job has run (each appends a line to a file), TERM stops Sidekiq.
#
# One run serves every test of this file. Asserted: Sidekiq exits 0 after
# TERM and the profile is written; every sample inside a job carries job:
# <its class> and queue: <its queue>; samples outside jobs (boot,
# Sidekiq's own threads, a method the server runs at startup) carry
# neither. Bounded: every wait has a deadline; Redis and Sidekiq run in
# process groups of their own, stopped (or killed) whatever happens.
#
# Skips (omit) only when redis-server or the gems are not installed.

require_relative "helper"
require_relative "servers_helper"
require "rperf/report"
require "socket"
require "fileutils"

class TestSidekiqRedis < Test::Unit::TestCase
  JOBS = 20          # per class
  BURN = 0.02        # CPU seconds per job
  START_WAIT = 60    # s: Redis answers, Sidekiq has started
  RUN_WAIT = 120     # s: every job has run
  STOP_WAIT = 60     # s: Sidekiq exits after TERM (its own shutdown timeout: 10 s)

  # Loaded by the Sidekiq server (-r) and by the client that enqueues. The
  # job methods have names of their own, so their samples are found by
  # frame; each job appends a line to $JOBS_DONE when it has run.
  APP = <<~RUBY
    require "sidekiq"
    require "rperf"
    require "rperf/sidekiq"

    def burn_cpu(seconds)
      deadline = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + seconds
      nil while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < deadline
    end

    def job_done(name)
      File.write(ENV.fetch("JOBS_DONE"), "\#{name}\\n", mode: "a")
    end

    class AlphaJob
      include Sidekiq::Job
      sidekiq_options queue: "alpha"

      def perform(seconds) = alpha_work(seconds)

      def alpha_work(seconds)
        burn_cpu(seconds)
        job_done("alpha")
      end
    end

    class BetaJob
      include Sidekiq::Job
      sidekiq_options queue: "beta"

      def perform(seconds) = beta_work(seconds)

      def beta_work(seconds)
        burn_cpu(seconds)
        job_done("beta")
      end
    end

    # CPU the server burns outside any job, once it has started
    def outside_work(seconds) = burn_cpu(seconds)

    Sidekiq.configure_server do |config|
      config.server_middleware { |chain| chain.add Rperf::Sidekiq }
      Rperf.start(mode: :cpu, frequency: 1000, output: ENV.fetch("PROFILE_OUT"))
      config.on(:startup) do
        outside_work(0.05)
        File.write(ENV.fetch("SERVER_READY"), Process.pid.to_s)
      end
    end
  RUBY

  ENQUEUE = <<~RUBY
    require_relative "app"
    Sidekiq::Client.push_bulk("class" => AlphaJob, "args" => Array.new(#{JOBS}) { [#{BURN}] })
    Sidekiq::Client.push_bulk("class" => BetaJob, "args" => Array.new(#{JOBS}) { [#{BURN}] })
  RUBY

  Run = Struct.new(:profile, :status, :done, :log, keyword_init: true)

  class << self
    # The run, made by the first test that needs it (an error in it is
    # raised again in every test).
    def sidekiq_run
      @sidekiq_run ||= begin
        SidekiqRun.new.call
      rescue StandardError, Test::Unit::AssertionFailedError => e
        e
      end
      raise @sidekiq_run if @sidekiq_run.is_a?(Exception)

      @sidekiq_run
    end
  end

  # Redis, then Sidekiq, the jobs, Sidekiq's stop; Redis stopped last.
  class SidekiqRun
    def initialize
      @dir = Dir.mktmpdir("rperf-sidekiq")
      @redis_sock = File.join(@dir, "redis.sock")
      @done = File.join(@dir, "done")
      @ready = File.join(@dir, "ready")
      @out = File.join(@dir, "sidekiq.pb.gz")
    end

    def call
      File.write(File.join(@dir, "app.rb"), APP)
      File.write(File.join(@dir, "enqueue.rb"), ENQUEUE)
      start_redis
      start_sidekiq
      enqueue
      RperfServers.wait_for(RUN_WAIT, unless_gone: @sidekiq) { done_count >= 2 * JOBS } or
        fail_run("#{done_count} of #{2 * JOBS} jobs ran")
      status = @sidekiq.stop(:TERM, seconds: STOP_WAIT) or fail_run("Sidekiq did not exit #{STOP_WAIT} s after TERM")
      Run.new(profile: File.exist?(@out) ? Rperf::Report.load(@out) : nil, status: status, done: done_count,
              log: @sidekiq.tail)
    ensure
      @sidekiq&.kill
      stop_redis
      FileUtils.remove_entry(@dir)
    end

    private

    def fail_run(why)
      raise Test::Unit::AssertionFailedError, "#{why}\n--- sidekiq ---\n#{@sidekiq&.tail}\n--- redis ---\n#{@redis&.tail}"
    end

    def done_count
      File.exist?(@done) ? File.foreach(@done).count : 0
    end

    def start_redis
      @redis = RperfServers::Server.new(
        {}, [RperfServers.redis_server, "--port", "0", "--unixsocket", @redis_sock, "--unixsocketperm", "700",
             "--save", "", "--appendonly", "no", "--dir", @dir],
        chdir: @dir, log: File.join(@dir, "redis.log")
      )
      RperfServers.wait_for(START_WAIT, unless_gone: @redis) { redis_ping } or fail_run("Redis did not answer")
    end

    # An inline PING over the socket.
    def redis_ping
      UNIXSocket.open(@redis_sock) do |s|
        s.timeout = 5
        s.write("PING\r\n")
        s.gets == "+PONG\r\n"
      end
    rescue IOError, SystemCallError
      false
    end

    # TERM (Redis exits at once: nothing to save), KILL if it does not.
    def stop_redis
      return unless @redis

      @redis.stop(:TERM, seconds: 10) || @redis.kill
    end

    def env
      RperfServers.env.merge("REDIS_URL" => "unix://#{@redis_sock}", "JOBS_DONE" => @done,
                             "SERVER_READY" => @ready, "PROFILE_OUT" => @out)
    end

    def start_sidekiq
      cmd = [RbConfig.ruby, "-I", RPERF_BUILD_LIB, RperfServers.bin("sidekiq"), "-r", "./app.rb",
             "-c", "4", "-q", "alpha", "-q", "beta", "-t", "10"]
      @sidekiq = RperfServers::Server.new(env, cmd, chdir: @dir, log: File.join(@dir, "sidekiq.log"))
      RperfServers.wait_for(START_WAIT, unless_gone: @sidekiq) { File.exist?(@ready) } or
        fail_run("Sidekiq did not start")
    end

    def enqueue
      run = run_command([RbConfig.ruby, "-I", RPERF_BUILD_LIB, File.join(@dir, "enqueue.rb")], env: env, timeout: 60)
      run.success? or fail_run("enqueueing failed\n#{run.describe}")
    end
  end

  def setup
    reason = RperfServers.redis_server ? RperfServers.skip_reason("sidekiq") : "redis-server is not installed " \
                                                                              "(Debian package redis-server; script/setup installs it)"
    omit("Sidekiq test skipped: #{reason}") if reason
    @run = self.class.sidekiq_run
  end

  JOB_FRAMES = { "AlphaJob#alpha_work" => { job: "AlphaJob", queue: "alpha" },
                 "BetaJob#beta_work" => { job: "BetaJob", queue: "beta" } }.freeze
  MIDDLEWARE_FRAME = "Rperf::Sidekiq#call"

  # [function names, weight, label set] of every sample
  def samples
    data = @run.profile.data
    data[:aggregated_samples].map { |frames, w, _seq, set| [frames.map { |f| f[1] }, w, data[:label_sets][set]] }
  end

  def describe(list)
    list.first(8).map { |names, w, labels| "  #{w / 1e6} ms #{labels} #{names.first(6).join(' <- ')}" }.join("\n")
  end

  def test_sidekiq_runs_every_job_and_writes_the_profile_at_exit
    assert_equal(2 * JOBS, @run.done, @run.log)
    assert_true(@run.status.success?, "Sidekiq exits 0 after TERM: #{@run.status.inspect}\n#{@run.log}")
    assert_not_nil(@run.profile, "the profile was written at exit\n#{@run.log}")
  end

  def test_samples_inside_jobs_carry_their_class_and_queue
    assert_not_nil(@run.profile, @run.log)
    JOB_FRAMES.each do |frame, labels|
      inside = samples.select { |names, _w, _l| names.include?(frame) }
      # about JOBS x BURN of CPU each: far more than a few samples
      assert_operator(inside.sum { |_n, w, _l| w }, :>, JOBS * BURN * 1e9 / 2, "#{frame} is sampled")
      wrong = inside.reject { |_n, _w, l| l == labels }
      assert_empty(wrong, "every sample in #{frame} carries exactly #{labels}:\n#{describe(wrong)}")
    end
    # inside the job: below the middleware's profile block (its own code
    # before the block, naming the job, is not the job yet)
    in_jobs = samples.select do |names, _w, _l|
      i = names.index("Rperf.profile")
      names.include?(MIDDLEWARE_FRAME) && i && i.positive?
    end
    assert_operator(in_jobs.size, :>, 0)
    unlabelled = in_jobs.reject { |_n, _w, l| JOB_FRAMES.value?(l) }
    assert_empty(unlabelled, "every sample inside a job carries the job's labels:\n#{describe(unlabelled)}")
  end

  def test_samples_outside_jobs_carry_no_job_labels
    assert_not_nil(@run.profile, @run.log)
    outside = samples.reject { |names, _w, _l| names.include?(MIDDLEWARE_FRAME) }
    assert_operator(outside.count { |names, _w, _l| names.include?("Object#outside_work") }, :>, 0,
                    "the server's own work outside jobs is sampled")
    labelled = outside.select { |_n, _w, l| l.key?(:job) || l.key?(:queue) }
    assert_empty(labelled, "no sample outside a job carries job: or queue:\n#{describe(labelled)}")
  end
end
