# frozen_string_literal: true

# bench/middleware.rb — what does Rperf::Middleware cost per request? (a
# measurement, not a test; the throughput target is printed beside it)
#
# Prints µs per call, median of 5 rounds, for:
#   normalize      Rperf::Middleware.normalize over the soak's four URL shapes
#                  (/users/N, /posts/N/comments, /orders/UUID, /items/HEX)
#   label off/on   Rperf.label(endpoint: "GET /users/:id") { } with the
#                  profiler stopped / running (1 kHz, wall)
#   mw off/on      Rperf::Middleware#call around an app that returns at once
#                  (normalize + label + block), profiler stopped / running;
#                  the soak's four routes, each thread's label memo hits
#   mw 20 routes   the same over 20 routes in turn, more than the memo's 16
#                  entries: every call misses (the worst case)
#   nested on      Rperf.label(tenant:) { Rperf.label(endpoint:) { } } running
#
# Run: script/ruby bench/middleware.rb [--n=200000]

require "rperf"
require "rperf/middleware"
require_relative "soak"

module RperfMwBench
  module_function

  def mono = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # µs per call of the block (called n times), median of 5 rounds
  def per_call(n)
    yield(n / 10) # warm-up
    rounds = Array.new(5) do
      t0 = mono
      yield(n)
      (mono - t0) * 1e6 / n
    end
    rounds.sort[2]
  end

  def main(argv)
    n = 200_000
    argv.each { |a| a =~ /\A--n=(\d+)\z/ ? n = Integer(Regexp.last_match(1)) : abort("usage: #{$PROGRAM_NAME} [--n=N]") }
    paths = Array.new(1024) { |i| RperfSoak.url(i) }
    envs = paths.map { |p| { "REQUEST_METHOD" => "GET", "PATH_INFO" => p } }
    mw = Rperf::Middleware.new(->(_env) { [200, {}, []] })
    value = +"GET /users/:id"
    rows = []
    rows << ["normalize", per_call(n) { |k| k.times { |i| Rperf::Middleware.normalize(paths[i & 1023]) } }]
    label = ->(k) { k.times { Rperf.label(endpoint: value.dup) { nil } } }
    call = ->(k) { k.times { |i| mw.call(envs[i & 1023]) } }
    nested = ->(k) { k.times { Rperf.label(tenant: "a") { Rperf.label(endpoint: value.dup) { nil } } } }
    rows << ["label off", per_call(n, &label)]
    rows << ["mw off", per_call(n, &call)]
    Rperf.start(frequency: 1000, mode: :wall)
    rows << ["label on", per_call(n, &label)]
    rows << ["mw on", per_call(n, &call)]
    routes = Array.new(20) { |i| { "REQUEST_METHOD" => "GET", "PATH_INFO" => "/r#{i}/#{i * 7}" } }
    rows << ["mw 20 routes", per_call(n) { |k| k.times { |i| mw.call(routes[i % 20]) } }]
    rows << ["nested on", per_call(n, &nested)]
    Rperf.stop
    rows.each { |name, us| puts format("%-12s %7.3f µs/call", name, us) }
  end
end

RperfMwBench.main(ARGV) if $PROGRAM_NAME == __FILE__
