# frozen_string_literal: true

# bench/tick_schedule.rb — what a bare timer thread (bench/floor_tick.c, no
# profiler) costs this machine per wake-up on a fixed grid against one
# wake-up at a drawn moment of each period, the two schedules of the
# profiler's tick thread (docs/backends.md, "Tick timing": a grid while
# one thread holds its GVL, a fresh draw at every change of holder). A
# measurement, not a test: it asserts nothing.
#
# Each round runs the workload unprofiled (U), then with the grid tick,
# then unprofiled again and with the drawn tick; each figure is
# (CPU P − CPU U) / wake-ups against the U just before it, median over the
# rounds (one discarded warm-up round). Workloads: `fib` (one thread
# computing) and `threadsN` (N threads sharing fib(25) units, as
# bench/overhead.rb's).
#
#   script/ruby bench/tick_schedule.rb
#   script/ruby bench/tick_schedule.rb --rounds=15 --hz=10000 --workloads=threads64

require_relative "floor_tick"

module TickSchedule
  OPTS = { rounds: 10, hz: 10_000, workloads: %w[fib threads64] }
  ARGV.each do |a|
    case a
    when /\A--rounds=(\d+)\z/ then OPTS[:rounds] = Integer(Regexp.last_match(1))
    when /\A--hz=(\d+)\z/ then OPTS[:hz] = Integer(Regexp.last_match(1))
    when /\A--workloads=(.+)\z/ then OPTS[:workloads] = Regexp.last_match(1).split(",")
    else abort "bench/tick_schedule.rb: unknown argument #{a.inspect}"
    end
  end
  abort "bench/tick_schedule.rb: no C compiler or Fiddle here" unless FloorTick.available?

  module_function

  def fib(n) = n < 2 ? n : fib(n - 1) + fib(n - 2)

  def workload(name)
    case name
    when "fib" then -> { 24.times.sum { fib(25) } }
    when /\Athreads(\d+)\z/
      count = Integer(Regexp.last_match(1))
      -> { Array.new(count) { Thread.new { [64 / count, 1].max.times.sum { fib(25) } } }.sum(&:value) }
    else abort "bench/tick_schedule.rb: unknown workload #{name.inspect} (fib, threadsN)"
    end
  end

  def cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID, :nanosecond)

  def measure
    GC.start
    c0 = cpu
    yield
    cpu - c0
  end

  def median(a)
    s = a.sort
    (s[(s.size - 1) / 2] + s[s.size / 2]) / 2.0
  end

  def run
    puts "bench/tick_schedule.rb — Ruby #{RUBY_VERSION}, #{OPTS[:hz]} Hz, #{OPTS[:rounds]} rounds; " \
         "CPU per wake-up of a bare timer thread above the unprofiled run just before it"
    puts
    puts "| workload | grid: ns/wake | drawn: ns/wake | grid ÷ drawn | grid ÷ drawn per round (min–max) |"
    puts "|---|---:|---:|---:|---|"
    OPTS[:workloads].each do |name|
      work = workload(name)
      per = { false => [], true => [] }
      ratios = []
      (OPTS[:rounds] + 1).times do |round|
        got = {}
        [false, true].each do |drawn|
          u = measure(&work)
          wakes = 0
          p = measure do
            FloorTick.start(OPTS[:hz], drawn: drawn)
            work.call
            wakes = FloorTick.stop
          end
          got[drawn] = (p - u).to_f / [wakes, 1].max
        end
        next if round.zero?

        per[false] << got[false]
        per[true] << got[true]
        ratios << got[false] / got[true] if got[true].positive?
      end
      g = median(per[false])
      d = median(per[true])
      span = ratios.empty? ? "–" : format("%.2f–%.2f", ratios.min, ratios.max)
      printf("| %s | %.0f | %.0f | %.2f | %s |\n", name, g, d, d.positive? ? g / d : Float::NAN, span)
    end
  end
end

TickSchedule.run
