# frozen_string_literal: true

# tests/ruby/test_descriptors.rb — a profiled program sees the descriptor
# table it would see unprofiled, during a run and after it: the profiler
# holds no descriptor between ticks (a program that scans /proc/self/fd, a
# daemon that closes every descriptor, IO.for_fd on a number it expects to
# be free). The :holder backend reads a holder's task state from /proc
# before it signals it; that read opens and closes its file in one go.
# Two ways make those reads happen on every tick or nearly: the conservative
# form for unverified Rubies (every tick by signal) and a holder that blocks
# in C with the GVL held (direct triggers missed, ticks by signal).

require_relative "helper"

class TestDescriptors < Test::Unit::TestCase
  include RperfTestHelper

  PROBE_SO = File.join(File.dirname(RPERF_BUILD_LIB), "tests", "ext", "eintr_probe.so")

  # The child lists its descriptors before start, 10 times 20 times during
  # the run (the 20 of a group 1 ms of work apart, ticks in between) and
  # after stop. A descriptor the profiler holds shows in all 20 listings of
  # a group; one opened and closed within a read shows in a listing only
  # when the listing falls inside that read, which 20 listings in a row
  # spread over more than 20 ms do not all do.
  SCRIPT = <<~RUBY
    def fds = Dir.children("/proc/self/fd").sort
    probe = ENV["PROBE_SO"]
    require probe if probe
    before = fds
    Rperf.start(backend: :holder, mode: :wall, frequency: 10_000)
    seen = []
    worker = Thread.new do
      10.times do
        cpu_spin(0.003)
        EintrProbe.run("nanosleep", 6, 2) if probe
        seen << Array.new(20) { cpu_spin(0.001); fds }
      end
    end
    worker.join
    data = Rperf.stop
    after = fds
    child_report(before: before, seen: seen, after: after, samples: data[:sampling_count])
  RUBY

  def check(env)
    r = run_child(SCRIPT, env: env)
    assert(r.success?, r.stderr)
    rep = r.report
    before = rep["before"]
    assert_operator(rep["samples"], :>, 0)
    held = rep["seen"].map { |group| group.map { |l| l - before }.reduce(:&) }.reject(&:empty?)
    assert_equal([], held, "descriptors present in 20 listings in a row during the run")
    assert_equal(before, rep["after"], "descriptors after stop")
  end

  def test_every_tick_by_signal_holds_no_descriptor
    check("RPERF_UNVERIFIED_RUBY" => "1")
  end

  def test_a_holder_blocked_in_c_with_the_gvl_holds_no_descriptor
    omit("tests/ext/eintr_probe.so not built") unless File.exist?(PROBE_SO)
    check("PROBE_SO" => PROBE_SO)
  end
end
