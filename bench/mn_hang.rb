# frozen_string_literal: true
# bench/mn_hang.rb — how often Ruby 3.3's M:N thread scheduler loses a
# wake-up and hangs a program, with and without the profiler, side by side
# (a measurement, not a test; docs/reliability.md, "Ruby's M:N scheduler").
#
# Two programs, each run in a fresh child Ruby that must print "ok" within
# --timeout seconds (else it is counted as hung and killed with SIGKILL: a
# hung Ruby does not run its SIGTERM handler):
#   main    RUBY_MN_THREADS=1: two threads of the main Ractor loop
#           "spin 1 ms; sleep 1 ms" while two Ractors run, the main thread
#           makes 50 short runs (start, spin 1 ms, stop), then joins them
#   ractor  default environment: a Ractor whose two threads loop the same
#           way, joined by that Ractor after the main thread's 50 runs;
#           two more Ractors run meanwhile
# Configurations, interleaved run by run:
#   off          no profiler (the program's own hang rate)
#   default      Rperf.start with its defaults (1 kHz, the default backend)
#   signal-10k   backend: :signal at 10 kHz (the most scheduler events)
#
#   script/ruby bench/mn_hang.rb [--runs=N] [--timeout=S] [--programs=main,ractor]
#                               [--configs=off,default,signal-10k]

require "rbconfig"

module RperfMnHang
  LIB = File.expand_path("../build/lib", __dir__)
  PROGRAMS = %w[main ractor].freeze
  CONFIGS = { "off" => nil, "default" => {}, "signal-10k" => { backend: :signal, frequency: 10_000 } }.freeze

  module_function

  def spin(sec)
    t = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
    x = 0
    x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t < sec
    x
  end

  # The main thread's 50 runs (or 50 ms of the same spinning when off).
  def cycles(opts)
    50.times do |i|
      Rperf.start(**opts, mode: i.even? ? :cpu : :wall) if opts
      spin(0.001)
      Rperf.stop if opts
      GC.compact if i % 10 == 9
    end
  end

  def child_main(opts)
    stop = false
    ths = Array.new(2) { Thread.new { until stop; spin(0.001); sleep 0.001; end } }
    Array.new(2) { Ractor.new { loop { 2000.times {}; sleep 0.001 } } }
    cycles(opts)
    stop = true
    ths.each(&:join)
  end

  def child_ractor(opts)
    r = Ractor.new do
      stop = false
      ths = Array.new(2) { Thread.new { until stop; RperfMnHang.spin(0.001); sleep 0.001; end } }
      Ractor.receive
      stop = true
      ths.each(&:join)
      :done
    end
    Array.new(2) { Ractor.new { loop { 2000.times {}; sleep 0.001 } } }
    cycles(opts)
    r.send(:go)
    r.respond_to?(:value) ? r.value : r.take   # Ractor#value from Ruby 4.0
  end

  def child(program, config)
    Warning[:experimental] = false
    require "rperf" if CONFIGS.fetch(config)
    send(:"child_#{program}", CONFIGS.fetch(config))
    $stdout.puts "ok"
    $stdout.flush
    exit!(0)     # the two looping Ractors never end
  end

  # true: printed "ok" in time; false: hung (killed)
  def run_one(program, config, timeout)
    env = program == "main" ? { "RUBY_MN_THREADS" => "1" } : { "RUBY_MN_THREADS" => nil }
    r, w = IO.pipe
    pid = Process.spawn(env, RbConfig.ruby, "-I", LIB, __FILE__, "--child=#{program}:#{config}",
                        out: w, err: File::NULL)
    w.close
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    out = +""
    while (left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)).positive?
      break unless r.wait_readable(left)
      chunk = r.read_nonblock(4096, exception: false)
      break if chunk.nil?
      out << chunk unless chunk == :wait_readable
      break if out.include?("ok")
    end
    r.close
    ok = out.include?("ok")
    Process.kill(:KILL, pid) unless ok
    Process.wait(pid)
    ok
  rescue Errno::ESRCH
    Process.wait(pid)
    ok
  end

  def main(argv)
    runs = 100
    timeout = 6.0
    programs = PROGRAMS
    configs = CONFIGS.keys
    argv.each do |a|
      case a
      when /\A--runs=(\d+)\z/ then runs = Integer(Regexp.last_match(1))
      when /\A--timeout=(.+)\z/ then timeout = Float(Regexp.last_match(1))
      when /\A--programs=(.+)\z/ then programs = Regexp.last_match(1).split(",") & PROGRAMS
      when /\A--configs=(.+)\z/ then configs = Regexp.last_match(1).split(",") & CONFIGS.keys
      else abort "mn_hang: unknown option #{a} (--runs=N --timeout=S --programs=main,ractor " \
                 "--configs=#{CONFIGS.keys.join(',')})"
      end
    end
    hung = Hash.new(0)
    runs.times do |i|
      programs.each do |prog|
        configs.rotate(i).each { |cfg| hung[[prog, cfg]] += 1 unless run_one(prog, cfg, timeout) }
      end
    end
    puts "Ruby #{RUBY_VERSION}: runs hung (of #{runs} each, #{timeout} s timeout)"
    puts format("%-8s %-12s %6s %7s", "program", "config", "hung", "rate")
    programs.each do |prog|
      configs.each do |cfg|
        n = hung[[prog, cfg]]
        puts format("%-8s %-12s %6d %6.1f%%", prog, cfg, n, 100.0 * n / runs)
      end
    end
  end
end

if (c = ARGV.find { |a| a.start_with?("--child=") })
  program, config = c.delete_prefix("--child=").split(":", 2)
  RperfMnHang.child(program, config)
else
  RperfMnHang.main(ARGV)
end
