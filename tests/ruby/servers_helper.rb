# frozen_string_literal: true

# tests/ruby/servers_helper.rb — where the real servers of the server tests
# (test_puma_cluster.rb, test_sidekiq_redis.rb) and bench/cluster.rb, and
# the peer profilers of bench/alloc.rb, come from: pinned gems that script/setup installs with the project's Ruby into
# $RPERF_CACHE/gems/<Ruby version> (default ~/.cache/rperf), and Debian's
# redis-server. This file is the one place that names the versions and the
# directory: script/setup asks it which gems to install and where.
#
# Plain Ruby, no rperf and no test-unit: script/setup loads it before
# anything is built, and the bench loads it outside the tests. A process
# that runs a server gets the gems through GEM_PATH (RperfServers.env); the
# rperf extension itself is loaded as before (-I build/lib), so the rperf
# gem keeps no runtime dependency.

module RperfServers
  # [name, version], each after what it depends on: `gem install` of the
  # whole list then finds every dependency already there at its pinned
  # version (with --conservative) instead of resolving a newer one.
  # Puma 8 needs no Rack; Sidekiq 8 needs Rack >= 3.2 (Debian 12's
  # ruby-rack is 2.2), a JSON and a Logger newer than Ruby 3.3's defaults,
  # and Redis >= 7.0 (Debian 12 has 7.0.15).
  GEMS = [
    %w[nio4r 2.7.5], %w[puma 8.0.2],
    %w[connection_pool 3.0.2], %w[redis-client 0.31.0], %w[rack 3.2.8],
    %w[logger 1.7.0], %w[json 3.1.0], %w[sidekiq 8.1.7],
    # the peers bench/alloc.rb measures beside rperf (allocation sampling)
    %w[stackprof 0.2.28], %w[vernier 1.12.0]
  ].freeze

  # For config/puma.rb of a cluster. Puma (8.0.2 and before) on Ruby 3.3
  # can hang a worker at its stop without any profiler: the TERM trap's
  # blocking write to the server's notify pipe races the server thread's
  # IO#close of that pipe, the close waits for ever, and the master
  # SIGKILLs the worker after worker_shutdown_timeout (a SIGKILLed worker
  # writes no profile). Measured: 9 of 40 TERMed workers hung unprofiled;
  # 0 of 40, profiled or not, with the write made non-blocking (no wait for
  # the closer to track), as here.
  PUMA_NOTIFY_NONBLOCKING = <<~RUBY
    require "puma/server"
    Puma::Server.prepend(Module.new do
      def notify_safely(message)
        @notify.write_nonblock(message)
      rescue IOError, NoMethodError, SystemCallError
        nil # the server is already shutting down
      end
    end)
  RUBY

  module_function

  def cache_dir
    ENV.fetch("RPERF_CACHE", nil).then { |d| d && !d.empty? ? d : File.join(Dir.home, ".cache", "rperf") }
  end

  # Per Ruby version: nio4r, puma and json have C extensions built for it.
  def gem_dir(ruby_version = RUBY_VERSION)
    File.join(cache_dir, "gems", ruby_version)
  end

  # "name:version" of every pinned gem not installed yet, in install order
  # (what script/setup passes to `gem install`).
  def missing
    GEMS.reject { |name, ver| File.exist?(File.join(gem_dir, "specifications", "#{name}-#{ver}.gemspec")) }
        .map { |name, ver| "#{name}:#{ver}" }
  end

  # The pinned gems `names` need, with what they depend on: puma alone, or
  # sidekiq and its dependencies.
  NEEDS = { "puma" => %w[nio4r puma], "sidekiq" => %w[connection_pool redis-client rack logger json sidekiq] }.freeze

  def installed?(*names)
    wanted = names.flat_map { |n| NEEDS.fetch(n, [n]) }
    missing.none? { |spec| wanted.include?(spec.split(":").first) }
  end

  # Why a server test skips, or nil when it can run.
  def skip_reason(*names)
    return nil if installed?(*names)

    "#{names.join(' and ')} (pinned: #{GEMS.to_h.values_at(*names).join(', ')}) not installed in #{gem_dir}; " \
      "script/setup installs them"
  end

  # The environment of a process that loads the gems: GEM_PATH puts the
  # cached gems before Ruby's own (default and bundled gems stay visible
  # through GEM_HOME's default); nothing from a Bundler context leaks in.
  def env
    { "GEM_PATH" => gem_dir, "GEM_HOME" => nil, "BUNDLE_GEMFILE" => nil, "RUBYOPT" => nil }
  end

  # A gem's executable, run as `ruby BIN ...` by the project's Ruby.
  def bin(name)
    File.join(gem_dir, "bin", name)
  end

  # Debian's redis-server, or nil.
  def redis_server
    ["/usr/bin/redis-server", *ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).map { |d| File.join(d, "redis-server") }]
      .find { |p| File.executable?(p) }
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # Polls the block (a readiness check, not a timer) until it returns
  # true; false after `seconds`, or as soon as `unless_gone` (a Server)
  # has exited.
  def wait_for(seconds, unless_gone: nil)
    deadline = now + seconds
    until yield
      return false if now > deadline || (unless_gone && !unless_gone.alive?)

      sleep 0.05
    end
    true
  end

  # A server process in a process group of its own, its output in `log`:
  # stop signals it and waits, kill ends the whole group (workers a
  # master left behind included). Every wait has a deadline.
  class Server
    attr_reader :pid, :log

    def initialize(env, cmd, chdir:, log:)
      @log = log
      @pid = Process.spawn(env, *cmd, chdir: chdir, pgroup: true, in: File::NULL, out: log, err: %i[child out])
      @waiter = Process.detach(@pid)
    end

    def alive?
      @waiter.alive?
    end

    # Process::Status, or nil while it runs.
    def status
      alive? ? nil : @waiter.value
    end

    # `signal` to the process; its status once it has exited, nil if it
    # has not within `seconds`.
    def stop(signal = :TERM, seconds: 60)
      Process.kill(signal, @pid) if alive?
      @waiter.join(seconds) ? @waiter.value : nil
    rescue Errno::ESRCH
      @waiter.join(seconds) && @waiter.value
    end

    # KILL to the whole group, then reap.
    def kill
      Process.kill(:KILL, -@pid)
    rescue Errno::ESRCH, Errno::EPERM
      nil
    ensure
      @waiter.join(10)
    end

    # The last `bytes` of the output.
    def tail(bytes = 4000)
      return "" unless File.exist?(@log)

      text = File.binread(@log)
      text.bytesize > bytes ? text.byteslice(-bytes, bytes) : text
    end
  end
end
