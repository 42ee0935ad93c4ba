# frozen_string_literal: true

# bench/stress_ractor_spin.rb — does a Ractor whose threads spin ever hang the
# process under the profiler? (figures in docs/reliability.md)
#
# Shape: a Ractor starts N spinning threads (`loop {}` / `while true; end`)
# and one sleeper, waits until all of them ran (Thread::Queue), and returns;
# Ruby then kills the threads (rb_thread_terminate_all) and each thread's
# `ensure` sends :ok to the main Ractor, which waits for N+1 of them. The
# program runs in a child Ruby with the env auto-start (RPERF_ENABLED=1), with
# a per-run timeout, while two busy shell loops load the CPUs (they are
# always killed, also on error or Ctrl-C). A run that does not finish in time
# is a hang.
#
# Configurations: spinning threads 1..4 × mode cpu/wall × backend
# signal/nanosleep × 1 kHz/10 kHz (32), plus "off" (no profiler) as the
# control. Runs are interleaved (configuration after configuration, round
# after round).
#
# Run:
#   script/ruby bench/stress_ractor_spin.rb              # 10 rounds: 360 runs (~3-5 min)
#   script/ruby bench/stress_ractor_spin.rb --rounds=3   # fewer
# Options (ARGV or ENV):
#   --rounds=N   | RPERF_SPIN_ROUNDS   runs per configuration (default 10)
#   --timeout=S  | RPERF_SPIN_TIMEOUT  seconds per run before it counts as a hang (default 15)
#   --no-load    | RPERF_SPIN_LOAD=0   without the two busy loops
#   --no-control | RPERF_SPIN_CONTROL=0  skip the unprofiled runs
#
# tests/ruby/test_stress_ractor_spin.rb runs a CI-sized sample of the same.
require "rbconfig"
require "tmpdir"

module RactorSpinStress
  SPINNERS = (1..4).freeze
  MODES = %w[cpu wall].freeze
  BACKENDS = %w[signal nanosleep].freeze
  FREQUENCIES = [1000, 10_000].freeze

  Config = Struct.new(:spinners, :mode, :backend, :frequency) do
    def profiled? = !mode.nil?
    def label = profiled? ? "#{spinners} spin #{mode} #{backend} #{frequency / 1000}kHz" : "#{spinners} spin off"
  end

  # The program of the issue, with `spinners` spinning threads.
  def self.program(spinners)
    spin = Array.new(spinners) do |i|
      body = i.even? ? "loop {}" : "while true; end"
      "Thread.new do\n q << true\n #{body}\n ensure\n main << :ok\n end"
    end
    <<~RUBY
      Warning[:experimental] = false
      Ractor.new Ractor.current do |main|
        q = Thread::Queue.new
        #{spin.join("\n  ")}
        Thread.new do
          q << true
          sleep 1
        ensure
          main << :ok
        end
        #{spinners + 1}.times { q.pop }
      end
      got = #{spinners + 1}.times.map { Ractor.receive }.tally
      puts(got == { ok: #{spinners + 1} } ? "ok" : "wrong: \#{got}")
    RUBY
  end

  def self.all_configs(control: true)
    profiled = SPINNERS.to_a.product(MODES, BACKENDS, FREQUENCIES).map { |a| Config.new(*a) }
    control ? profiled + SPINNERS.map { |n| Config.new(n, nil, nil, nil) } : profiled
  end

  # Two `while :; do :; done` shell loops; yields, then kills them whatever
  # happens in the block.
  def self.with_cpu_load(enabled = true)
    pids = enabled ? Array.new(2) { Process.spawn("sh", "-c", "while :; do :; done", pgroup: true) } : []
    yield
  ensure
    pids&.each do |pid|
      begin
        Process.kill(:KILL, -pid)
      rescue Errno::ESRCH
        nil
      end
      Process.wait(pid)
    end
  end

  # One child run: :ok, :hang (timeout) or [:failed, status, output].
  def self.run_once(config, lib:, out_path:, timeout:)
    env = { "RUBYOPT" => nil }
    if config.profiled?
      env.merge!("RPERF_ENABLED" => "1", "RPERF_MODE" => config.mode, "RPERF_BACKEND" => config.backend,
                 "RPERF_FREQUENCY" => config.frequency.to_s, "RPERF_OUTPUT" => out_path)
    end
    cmd = [RbConfig.ruby, "-I", lib, "-r", "rperf", "-e", program(config.spinners)]
    r, w = IO.pipe
    pid = Process.spawn(env, *cmd, out: w, err: w, pgroup: true)
    w.close
    reader = Thread.new { r.read }
    reader.report_on_exception = false
    waiter = Process.detach(pid)
    if waiter.join(timeout).nil?
      begin
        Process.kill(:KILL, -pid)
      rescue Errno::ESRCH
        nil
      end
      waiter.join
      reader.join
      return :hang
    end
    output = reader.value
    waiter.value.success? && output.include?("ok\n") && !output.include?("wrong") ? :ok : [:failed, waiter.value, output]
  ensure
    r&.close
  end

  # Runs every config `rounds` times (interleaved); yields (config, result)
  # after each run; returns { config => { runs:, hangs:, failures: [] } }.
  def self.run(configs, rounds:, lib:, timeout:, load: true)
    stats = configs.to_h { |c| [c, { runs: 0, hangs: 0, failures: [] }] }
    Dir.mktmpdir("rperf-spin") do |dir|
      out_path = File.join(dir, "profile.data")
      with_cpu_load(load) do
        rounds.times do
          configs.each do |c|
            res = run_once(c, lib: lib, out_path: out_path, timeout: timeout)
            s = stats[c]
            s[:runs] += 1
            s[:hangs] += 1 if res == :hang
            s[:failures] << res unless res == :ok || res == :hang
            yield c, res if block_given?
          end
        end
      end
    end
    stats
  end
end

if $PROGRAM_NAME == __FILE__
  opt = lambda do |name, env, default|
    arg = ARGV.find { |a| a.start_with?("--#{name}=") }
    arg ? arg.split("=", 2)[1] : ENV.fetch(env, default)
  end
  rounds = Integer(opt.call("rounds", "RPERF_SPIN_ROUNDS", "10"))
  timeout = Float(opt.call("timeout", "RPERF_SPIN_TIMEOUT", "15"))
  load = !ARGV.include?("--no-load") && ENV["RPERF_SPIN_LOAD"] != "0"
  control = !ARGV.include?("--no-control") && ENV["RPERF_SPIN_CONTROL"] != "0"
  lib = $LOAD_PATH.find { |d| File.exist?(File.join(d.to_s, "rperf.so")) } or abort "run with script/ruby"
  configs = RactorSpinStress.all_configs(control: control)
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  puts "#{configs.size} configurations × #{rounds} rounds, timeout #{timeout} s, CPU load #{load ? 'on' : 'off'}"
  stats = RactorSpinStress.run(configs, rounds: rounds, lib: lib, timeout: timeout, load: load) do |c, res|
    warn "  #{c.label}: #{res == :hang ? 'HANG' : res.inspect[0, 300]}" unless res == :ok
  end
  elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
  puts format("%-30s %5s %5s %8s", "configuration", "runs", "hangs", "failures")
  stats.each { |c, s| puts format("%-30s %5d %5d %8d", c.label, s[:runs], s[:hangs], s[:failures].size) }
  prof = stats.select { |c, _| c.profiled? }.values
  ctrl = stats.reject { |c, _| c.profiled? }.values
  sum = ->(list, k) { list.sum { |s| k == :failures ? s[k].size : s[k] } }
  puts "profiled: #{sum.(prof, :runs)} runs, #{sum.(prof, :hangs)} hangs, #{sum.(prof, :failures)} failures"
  puts "control:  #{sum.(ctrl, :runs)} runs, #{sum.(ctrl, :hangs)} hangs, #{sum.(ctrl, :failures)} failures" unless ctrl.empty?
  %w[mode backend frequency spinners].each do |k|
    by = stats.select { |c, _| c.profiled? }.group_by { |c, _| c[k] }
    puts "by #{k}: " + by.map { |v, l| "#{v}=#{l.sum { |_, s| s[:hangs] }}/#{l.sum { |_, s| s[:runs] }}" }.join(", ")
  end
  puts format("elapsed %.0f s", elapsed)
  exit(sum.(prof, :hangs) + sum.(prof, :failures) + sum.(ctrl, :hangs) + sum.(ctrl, :failures)).zero?
end
