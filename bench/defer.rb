# frozen_string_literal: true
#
# bench/defer.rb — what a deferred run (Rperf.start(defer: true)) costs and
# records when a process spends most of its time outside requests.
#
#   script/ruby bench/defer.rb [SECONDS_PER_PHASE]   (default 2)
#
# Per backend, 1 kHz, cpu and wall:
#   idle      the main thread sleeps, another thread computes outside any
#             profile block: ticks taken (a deferred run takes none) and the
#             CPU time of the profiler's tick thread (rperf-timer, parked)
#   requests  a loop of 5 ms CPU "requests" inside Rperf.profile with 5 ms
#             of CPU outside between them: ticks, the sampled time against
#             the CPU time spent inside the blocks (the ratio is below 1 by
#             each block's last partial interval, which is not recorded)
# Nothing here is asserted; tests/ruby/test_defer.rb checks the behaviour.

require "rperf"

SECONDS = Float(ARGV[0] || 2)

def cpu_now = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)

def spin(seconds)
  t = cpu_now + seconds
  x = 0
  x += 1 while cpu_now < t
  x
end

def bench_request(seconds) = spin(seconds)
def bench_outside(seconds) = spin(seconds)

# CPU ms of this process's threads named `name` (Linux /proc).
def task_cpu_ms(name)
  tick = 100.0 # USER_HZ
  Dir.glob("/proc/self/task/*").sum do |t|
    next 0 unless (File.read("#{t}/comm").strip rescue "") == name

    f = File.read("#{t}/stat").split(") ", 2).last.split
    (f[11].to_i + f[12].to_i) * 1000 / tick
  rescue Errno::ENOENT
    0
  end
end

def idle_phase(backend, mode)
  Rperf.start(defer: true, backend: backend, mode: mode, frequency: 1000)
  timer0 = task_cpu_ms("rperf-timer")
  stop = false
  worker = Thread.new { bench_outside(0.01) until stop }
  sleep SECONDS
  stop = true
  worker.join
  timer = task_cpu_ms("rperf-timer") - timer0
  data = Rperf.stop
  [data[:trigger_count], timer]
end

def request_phase(backend, mode)
  Rperf.start(defer: true, backend: backend, mode: mode, frequency: 1000)
  inside = 0.0
  deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + SECONDS
  while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
    t0 = cpu_now
    Rperf.profile(endpoint: "GET /x") { bench_request(0.005) }
    inside += cpu_now - t0
    bench_outside(0.005)
  end
  data = Rperf.stop
  sampled = data[:aggregated_samples].sum { |s| s[1] } / 1e9
  outside = data[:aggregated_samples].select { |f, *| f.any? { |fr| fr[1] == "Object#bench_outside" } }.sum { |s| s[1] }
  [data[:trigger_count], sampled / inside, outside]
end

puts format("%-10s %-5s %14s %16s %14s %16s %14s", "backend", "mode", "idle ticks", "idle timer ms",
            "request ticks", "sampled/inside", "outside ns")
Rperf.backends.each do |backend|
  %i[cpu wall].each do |mode|
    ticks, timer = idle_phase(backend, mode)
    rticks, ratio, outside = request_phase(backend, mode)
    puts format("%-10s %-5s %14d %16.1f %14d %16.3f %14d", backend, mode, ticks, timer, rticks, ratio, outside)
  end
end
