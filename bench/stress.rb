# frozen_string_literal: true

# bench/stress.rb — the lifecycle stress suite (a measurement, not a test):
# every window where a profiler can hurt its host, hammered, with what was
# done and what was lost printed per scenario. Lost must be 0 everywhere.
#
#   cycles   start/stop cycles per backend (GC.stress on for part of them,
#            GC.compact between cycles, threads and Ractors alive across)
#   threads  threads created and exiting while profiling at 10 kHz (wall and
#            cpu): their sampled weight against their own measured time
#   forks    forks while profiling at 10 kHz with 8 busy labelling threads,
#            from the main thread and from the others; every child exits 0
#            and profiles itself; the parent's result stays complete
#   exits    processes that exit while profiling (no stop), per backend x
#            mode, half of them with 4 Ractors spinning
#   storms   stop/start/snapshot storms from the main Ractor while 8 Ractors
#            label and spin
#   windows  wall-mode snapshot/stop storms (a window's close reads the stacks
#            of threads parked off the GVL) while main-Ractor threads are
#            created, parked, woken or killed while parked, with GC.compact;
#            4 threads stay parked since before the first start, and every
#            result must hold 4 x its duration on their call (ratio)
#
# Run:   script/ruby bench/stress.rb                 # full size (several minutes)
#        script/ruby bench/stress.rb --scale=0.05    # what CTest runs
# Options: --scale=F (sizes x F, at least 1 each), --only=cycles,forks,
#          --json (one "RPERF_STRESS {json}" line per scenario, for tests).
# Each scenario runs in its own child Ruby with a watchdog, so a crash or a
# hang is counted, not fatal. docs/reliability.md records a full run.

require "json"
require "open3"
require "rbconfig"

module RperfStress
  LIB = File.expand_path("../build/lib", __dir__)
  LIB_DIR = ENV["RPERF_BUILD_DIR"] ? File.join(ENV["RPERF_BUILD_DIR"], "lib") : LIB
  BACKENDS = %w[holder signal nanosleep].freeze

  module_function

  def opts
    @opts ||= begin
      o = { scale: 1.0, only: nil, json: false }
      ARGV.each do |a|
        case a
        when /\A--scale=(.+)\z/ then o[:scale] = Float(Regexp.last_match(1))
        when /\A--only=(.+)\z/ then o[:only] = Regexp.last_match(1).split(",")
        when "--json" then o[:json] = true
        else abort "bench/stress.rb: unknown argument #{a}"
        end
      end
      o
    end
  end

  def n(full) = [(full * opts[:scale]).round, 1].max

  # Run Ruby source in a child with rperf loaded; returns [status, stdout, stderr, timed_out].
  def child(src, timeout:, env: {})
    cmd = [RbConfig.ruby, "-I", LIB_DIR, "-rrperf", "-rjson", "-e", src]
    Open3.popen3(env, *cmd) do |i, o, e, w|
      i.close
      out = Thread.new { o.read }
      err = Thread.new { e.read }
      timed_out = !w.join(timeout)
      if timed_out
        dump_threads(w.pid)
        begin
          Process.kill(:KILL, w.pid)
        rescue Errno::ESRCH
          nil
        end
      end
      [w.value, out.value, err.value, timed_out]
    end
  end

  # A hung child's native stacks, on stderr, before it is killed (gdb, when
  # installed): what the hang was waiting for.
  def dump_threads(pid)
    gdb = ENV.fetch("PATH", "").split(":").map { |d| File.join(d, "gdb") }.find { |f| File.executable?(f) }
    return warn("stress: child #{pid} timed out (no gdb for its stacks)") unless gdb

    out, = Open3.capture2e(gdb, "-p", pid.to_s, "-batch", "-nx", "-ex", "thread apply all bt 30")
    warn "stress: child #{pid} timed out; its threads:\n#{out.lines.grep(/^(Thread|#)/).join}"
  rescue StandardError => e
    warn "stress: child #{pid} timed out; stacks not taken (#{e.class}: #{e.message})"
  end

  # A child that prints one "RESULT {json}" line.
  def child_result(src, timeout:)
    st, out, err, to = child(src, timeout: timeout)
    line = out.lines.grep(/\ARESULT /).last
    res = line ? JSON.parse(line.sub("RESULT ", "")) : {}
    ok = !to && st.success? && line
    res["crashed"] = ok ? 0 : 1
    res["timed_out"] = to
    res["error"] = "status=#{st.inspect}#{to ? ' TIMED OUT' : ''} #{err.lines.last(3).join.strip}" unless ok
    res
  end

  SPIN = "def spin(s) = (t = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID); " \
         "x = 0; x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t < s; x)"

  # Child-side: run the block for 0...count, an exception counted in
  # `errors` (not fatal); returns how many ran through.
  STORM = 'def storm(count, errors) = count.times.count { |i| ' \
          'begin; yield i; true; rescue => e; errors << "#{e.class}: #{e.message}"; false; end }'

  # Child-side: print the child's one RESULT line. exit_now leaves at once
  # (exit!): Ractors still looping would keep the child from exiting.
  REPORT = 'def report(res, exit_now: false) = ' \
           '(puts "RESULT " + JSON.dump(res); $stdout.flush; exit!(0) if exit_now)'

  def cycles
    BACKENDS.map do |backend|
      count = n(1000)
      res = child_result(<<~RUBY, timeout: 60 + count)
        Warning[:experimental] = false
        #{SPIN}
        #{REPORT}
        stop = false
        ths = 2.times.map { Thread.new { until stop; spin(0.001); sleep 0.001; end } }
        rs = 2.times.map { Ractor.new { loop { 2000.times {}; sleep 0.001 } } }
        lost = dropped = 0
        stress_cycles = [#{count} / 20, 1].max
        #{count}.times do |i|
          GC.stress = true if i < stress_cycles
          Rperf.start(frequency: 10_000, backend: :#{backend}, mode: i.even? ? :cpu : :wall)
          spin(0.001)
          r = Rperf.stop
          GC.stress = false
          lost += 1 unless r.is_a?(Hash) && r[:aggregated_samples].is_a?(Array) && !r[:aggregated_samples].empty?
          dropped += r[:dropped_samples] if r
          GC.compact if i % 10 == 9
        end
        stop = true
        ths.each(&:join)
        report({ "did" => "#{count} cycles", "lost" => lost, "dropped" => dropped }, exit_now: true)
      RUBY
      res.merge("scenario" => "cycles/#{backend}")
    end
  end

  def threads
    %w[cpu wall].flat_map do |mode|
      BACKENDS.map do |backend|
        count = n(1000)
        res = child_result(<<~RUBY, timeout: 60 + count / 5)
          #{SPIN}
          #{REPORT}
          mode = :#{mode}
          measured = 0
          Rperf.start(frequency: 10_000, backend: :#{backend}, mode: mode)
          (#{count} / 10.0).ceil.times do
            ts = 10.times.map do
              Thread.new do
                w0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
                spin(0.002)
                c = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID, :nanosecond)
                mode == :cpu ? c : Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - w0
              end
            end
            measured += ts.sum(&:value)
          end
          r = Rperf.stop
          main = r[:threads].find { |t| t[:thread_seq] == 1 }
          seqs = r[:threads].map { |t| t[:thread_seq] } - [main && main[:thread_seq]]
          weight = r[:aggregated_samples].select { |s| seqs.include?(s[2]) }.sum { |s| s[1] }
          # Under M:N threads a thread CPU clock is a native thread's, shared
          # by many Ruby threads: no reference for cpu mode there.
          ratio = mode == :cpu && ENV["RUBY_MN_THREADS"] == "1" ? nil : (weight.to_f / measured).round(4)
          out = { "did" => "\#{seqs.size} threads", "lost" => r[:dropped_samples] }
          out["weight_ratio"] = ratio if ratio
          report(out)
        RUBY
        res.merge("scenario" => "threads/#{backend}/#{mode}")
      end
    end
  end

  def forks
    BACKENDS.map do |backend|
      count = n(100)
      res = child_result(<<~RUBY, timeout: 120 + count * 2)
        #{SPIN}
        #{REPORT}
        stop = false
        # children start stopped here (inherit: false) and profile themselves
        Rperf.start(frequency: 10_000, backend: :#{backend}, mode: :wall, inherit: false)
        workers = 8.times.map do |i|
          Thread.new do
            k = 0
            until stop
              Rperf.label(worker: i.to_s, k: (k += 1) % 13) { spin(0.0005) }
            end
          end
        end
        bad = 0
        errors = []
        do_fork = lambda do
          pid = fork do
            ok = !Rperf.running?
            Rperf.label(child: "yes") { }
            Rperf.start(frequency: 1000, backend: :#{backend})
            spin(0.005)
            r = Rperf.stop
            ok &&= r && !r[:aggregated_samples].empty?
            exit!(ok ? 0 : 3)
          end
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
          st = nil
          until (st = Process.wait2(pid, Process::WNOHANG)&.last)
            if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
              Process.kill(:KILL, pid)
              st = Process.wait2(pid).last
              errors << "hang"
              break
            end
            sleep 0.01
          end
          st
        end
        #{count}.times do |i|
          st = i.even? ? do_fork.call : Thread.new { do_fork.call }.value
          next if st.success?
          bad += 1
          errors << st.inspect
        end
        stop = true
        workers.each(&:join)
        r = Rperf.stop
        seen = r[:aggregated_samples].map { |s| r[:label_sets][s[3]][:worker] rescue nil }.compact.uniq.size
        lost = bad + (seen == 8 ? 0 : 1) + r[:dropped_samples]
        report({ "did" => "#{count} forks", "lost" => lost, "children_failed" => bad,
                 "workers_seen" => seen, "dropped" => r[:dropped_samples], "errors" => errors.first(3) })
      RUBY
      res.merge("scenario" => "forks/#{backend}")
    end
  end

  def exits
    BACKENDS.product(%w[cpu wall]).map do |backend, mode|
      count = n(200)
      failed = []
      count.times do |i|
        extra = i.odd? ? "Warning[:experimental] = false; 4.times { Ractor.new { loop { 1000.times {} } } };" : ""
        src = "#{extra} Rperf.start(frequency: 10_000, backend: :#{backend}, mode: :#{mode}); " \
              "x = 0; 200_000.times { x += 1 }"
        st, _, err, to = child(src, timeout: 60)
        failed << "status=#{st.inspect}#{to ? ' TIMED OUT' : ''} #{err.lines.last}" unless !to && st.success?
      end
      { "scenario" => "exits/#{backend}/#{mode}", "did" => "#{count} exits", "lost" => failed.size,
        "crashed" => 0, "errors" => failed.first(3) }
    end
  end

  def storms
    count = n(600)
    res = child_result(<<~RUBY, timeout: 120 + count / 2)
      Warning[:experimental] = false
      #{SPIN}
      #{REPORT}
      rs = 8.times.map do |i|
        Ractor.new(i) do |n|
          k = 0
          loop { Rperf.label(ractor: n.to_s, k: (k += 1) % 17) { 300.times {} }; Rperf.labels }
        end
      end
      #{STORM}
      errors = []
      ops = storm(#{count}, errors) do |i|
        case i % 6
        when 0 then Rperf.start(frequency: 10_000, backend: %i[holder signal nanosleep][(i / 6) % 3], mode: :wall)
        when 1, 3 then Rperf.snapshot(clear: i % 4 == 1) if Rperf.running?
        when 5 then r = Rperf.stop; errors << "no result" unless r.is_a?(Hash)
        else spin(0.001)
        end
      end
      Rperf.stop
      report({ "did" => "\#{ops} ops with 8 Ractors labelling", "lost" => errors.size,
               "errors" => errors.first(3) }, exit_now: true)
    RUBY
    [res.merge("scenario" => "storms")]
  end

  def windows
    count = n(800)
    res = child_result(<<~RUBY, timeout: 120 + count / 2)
      #{SPIN}
      #{REPORT}
      def parked_wait(q) = q.pop
      pool = Queue.new
      parked = 4.times.map { Thread.new { parked_wait(pool) } }
      Thread.pass until parked.all?(&:stop?)
      churn = true
      churned = 0
      churners = 2.times.map do
        Thread.new do
          while churn
            q = Queue.new
            t = Thread.new { q.pop; spin(0.0002) }
            Thread.pass
            rand < 0.5 ? t.kill : q << 1
            t.join
            churned += 1
          end
        end
      end
      #{STORM}
      errors = []
      ratios = []
      check = lambda do |r|
        next errors << "no result" unless r.is_a?(Hash)
        on = r[:aggregated_samples].sum { |f, w, *| f.any? { |x| x[1] == "Object#parked_wait" } ? w : 0 }
        ratio = on.to_f / (4 * r[:duration_ns])
        ratios << ratio
        errors << "parked threads' weight \#{ratio.round(3)} x their time" unless (0.9..1.1).cover?(ratio)
      end
      ops = storm(#{count}, errors) do |i|
        case i % 8
        when 0 then Rperf.start(frequency: 1000, backend: %i[holder signal nanosleep][(i / 8) % 3], mode: :wall)
        when 1, 2, 4, 5 then check.(Rperf.snapshot(clear: i.odd?))
        when 3 then GC.compact
        when 7 then check.(Rperf.stop)
        else sleep(0.002)   # the churners run meanwhile
        end
        Thread.pass
      end
      Rperf.stop
      churn = false
      churners.each(&:join)
      parked.size.times { pool << 1 }
      parked.each(&:join)
      report({ "did" => "\#{ops} ops, \#{churned} threads churned", "lost" => errors.size,
               "ratio" => [ratios.min&.round(3), ratios.max&.round(3)], "errors" => errors.first(3) },
             exit_now: true)
    RUBY
    [res.merge("scenario" => "windows")]
  end

  def run
    names = %w[cycles threads forks exits storms windows]
    names &= opts[:only] if opts[:only]
    rows = []
    names.each do |name|
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      send(name).each do |row|
        row["seconds"] = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0).round(1)
        rows << row
        if opts[:json]
          puts "RPERF_STRESS #{JSON.dump(row)}"
        else
          extra = row.reject { |k, _| %w[scenario did lost crashed seconds error errors].include?(k) }
          printf("%-26s %-34s lost=%-3d crashed=%d %s %s\n", row["scenario"], row["did"], row["lost"].to_i,
                 row["crashed"], extra.map { |k, v| "#{k}=#{v}" }.join(" "),
                 [row["error"], *row["errors"]].compact.first(2).join(" | "))
        end
        $stdout.flush
      end
    end
    total = rows.sum { |r| r["lost"].to_i + r["crashed"].to_i }
    puts "total lost+crashed: #{total}" unless opts[:json]
    total
  end
end

exit(RperfStress.run.zero? ? 0 : 1) if $PROGRAM_NAME == __FILE__
