# frozen_string_literal: true

# bench/idle.rb — what does a profiled process cost while it does nothing?
# (a measurement, not a test; "nearly free to leave on" for a server
# between requests)
#
# Each round runs a child Ruby per configuration, in turn (off first, then
# every backend × mode): 4 threads blocked on a Queue and the main thread
# in `sleep`, profiled at --hz from before the idle spell. The child reports
# its process CPU over --seconds of that spell (after 0.3 s to settle) and
# the wake-ups (voluntary context switches) of the profiler's own threads.
# Prints, per configuration, medians over the rounds: CPU ms per second of
# idle, that over `off`, and the profiler threads' wake-ups per second.
#
# Run: script/ruby bench/idle.rb [--rounds=5] [--seconds=2] [--hz=1000]

require "rbconfig"
require "json"

module RperfIdleBench
  module_function

  CHILD = <<~RUBY
    require "json"
    cfg, mode, hz, secs = ARGV[0], ARGV[1].to_sym, Integer(ARGV[2]), Float(ARGV[3])
    require "rperf"
    def wakes
      Dir["/proc/self/task/*"].sum do |d|
        (File.read("\#{d}/comm").strip.start_with?("rperf-") ?
          File.read("\#{d}/status")[/^voluntary_ctxt_switches:\\s+(\\d+)/, 1].to_i : 0) rescue 0
      end
    end
    q = Queue.new
    th = 4.times.map { Thread.new { q.pop } }
    Rperf.start(backend: cfg.to_sym, mode: mode, frequency: hz) unless cfg == "off"
    sleep 0.3
    c0 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    w0 = wakes
    sleep secs
    c1 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    w1 = wakes
    4.times { q << 1 }
    th.each(&:join)
    Rperf.stop unless cfg == "off"
    puts JSON.dump(cpu_ms_per_s: (c1 - c0) * 1000 / secs, wakes_per_s: (w1 - w0) / secs)
  RUBY

  def median(a) = a.sort[a.size / 2]

  def main(argv)
    opts = { rounds: 5, seconds: 2.0, hz: 1000 }
    argv.each do |a|
      case a
      when /\A--rounds=(\d+)\z/ then opts[:rounds] = Integer($1)
      when /\A--seconds=([\d.]+)\z/ then opts[:seconds] = Float($1)
      when /\A--hz=(\d+)\z/ then opts[:hz] = Integer($1)
      else abort "bench/idle.rb: unknown argument #{a} (accepted: --rounds=N --seconds=S --hz=N)"
      end
    end
    require "rperf"
    configs = [%w[off wall]] + Rperf.backends.product(%w[wall cpu]).map { |b, m| [b.to_s, m] }
    lib = File.dirname($LOAD_PATH.map(&:to_s).find { |d| File.exist?(File.join(d, "rperf.so")) } + "/x")
    got = Hash.new { |h, k| h[k] = [] }
    opts[:rounds].times do
      configs.each do |cfg, mode|
        out = IO.popen([RbConfig.ruby, "-I", lib, "-e", CHILD, cfg, mode, opts[:hz].to_s,
                        opts[:seconds].to_s], &:read)
        got[[cfg, mode]] << JSON.parse(out.lines.last)
      end
    end
    off = median(got[%w[off wall]].map { |r| r["cpu_ms_per_s"] })
    printf("idle process, %d Hz, %d rounds of %.1f s (medians)\n", opts[:hz], opts[:rounds], opts[:seconds])
    printf("%-10s %-5s %12s %8s %18s\n", "backend", "mode", "CPU ms/s", "x off", "profiler wakes/s")
    configs.each do |cfg, mode|
      rs = got[[cfg, mode]]
      cpu = median(rs.map { |r| r["cpu_ms_per_s"] })
      printf("%-10s %-5s %12.2f %8.2f %18.1f\n", cfg, cfg == "off" ? "-" : mode, cpu, cpu / off,
             median(rs.map { |r| r["wakes_per_s"] }))
    end
  end
end

RperfIdleBench.main(ARGV) if $PROGRAM_NAME == __FILE__
