# frozen_string_literal: true

# examples/demo_app.rb — the example program that `script/demo` profiles.
#
# Four clearly separated parts, so each shows up under its own name in a
# profile:
#   Demo::Cpu.fib     — pure CPU-bound recursion (a few hundred ms)
#   Demo::Pool.work   — a thread pool: several threads doing CPU work and
#                       sleeping, so they contend for the GVL (wall mode shows
#                       "[GVL wait]" / "[GVL blocked]" frames)
#   Demo::Alloc.churn — allocation-heavy work that keeps the GC busy
#                       ("[GC marking]" / "[GC sweeping]" frames)
#   Demo::Workers.job — two Ractors doing CPU work in parallel, each request
#                       labelled with Rperf.label inside its Ractor (the
#                       result's :threads table names their Ractors)
#
# As a library:  require_relative "examples/demo_app"; Demo.run
# As a script:   script/ruby examples/demo_app.rb   (prints timings per part)
#
# Everything is deterministic (fixed inputs, no randomness); the sizes can be
# scaled with DEMO_SCALE (a float, default 1.0).

module Demo
  # Scale factor for all three parts (DEMO_SCALE=0.5 halves the work).
  def self.scale
    s = Float(ENV.fetch("DEMO_SCALE", "1.0"), exception: false)
    s && s.positive? ? s : 1.0
  end

  # CPU-bound part: naive recursive Fibonacci.
  module Cpu
    def self.fib(n)
      n < 2 ? n : fib(n - 1) + fib(n - 2)
    end

    # fib(30) takes roughly 60–80 ms on Ruby 3.3 without YJIT; 4 rounds.
    def self.run(scale = 1.0)
      rounds = [(4 * scale).round, 1].max
      rounds.times.sum { fib(30) }
    end
  end

  # Thread pool with GVL contention and sleeps.
  module Pool
    # One job: a little arithmetic (holds the GVL), then a short sleep
    # (releases it).
    def self.work(job)
      acc = 0
      40_000.times { |i| acc = (acc + i * job) % 1_000_003 }
      sleep 0.002
      acc
    end

    def self.run(scale = 1.0, threads: 4, jobs: (160 * scale).round)
      queue = Queue.new
      jobs.times { |j| queue << j }
      threads.times { queue << nil }
      workers = Array.new(threads) do |t|
        Thread.new do
          Thread.current.name = "pool-#{t}"
          sum = 0
          while (job = queue.pop)
            sum += work(job)
          end
          sum
        end
      end
      workers.sum(&:value)
    end
  end

  # Allocation-heavy part: short-lived strings, arrays and hashes.
  module Alloc
    def self.churn(n)
      kept = []
      n.times do |i|
        row = Array.new(16) { |k| "item-#{i}-#{k}" }
        h = { id: i, row: row, joined: row.join(",") }
        kept << h if (i % 1000).zero? # keep a few so the heap grows a little
      end
      kept.size
    end

    def self.run(scale = 1.0)
      churn((50_000 * scale).round)
    end
  end

  # Ractor workers: each Ractor handles a few labelled "requests".
  module Workers
    def self.job(n)
      Cpu.fib(n)
    end

    def self.run(scale = 1.0, ractors: 2)
      Warning[:experimental] = false
      requests = [(4 * scale).round, 1].max
      Array.new(ractors) do |r|
        Ractor.new(r, requests) do |id, count|
          count.times.sum do |i|
            if defined?(Rperf) then Rperf.label(worker: id, request: i % 2) { Workers.job(25) }
            else Workers.job(25)
            end
          end
        end
      end.sum(&:take)
    end
  end

  # Run the four parts in order; returns { part => seconds }.
  def self.run(scale: self.scale, io: nil)
    timings = {}
    { "Demo::Cpu.fib" => -> { Cpu.run(scale) },
      "Demo::Pool.work" => -> { Pool.run(scale) },
      "Demo::Alloc.churn" => -> { Alloc.run(scale) },
      "Demo::Workers.job" => -> { Workers.run(scale) } }.each do |name, part|
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      part.call
      timings[name] = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
      io&.printf("%-18s %7.1f ms\n", name, timings[name] * 1000)
    end
    timings
  end
end

Demo.run(io: $stdout) if $PROGRAM_NAME == __FILE__
