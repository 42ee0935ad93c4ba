# frozen_string_literal: true
#
# Shared helpers for the Ruby tests of the sampling engine.
#
# Loaded two ways:
#   * by a test file (`require_relative "helper"`): loads test-unit and rperf,
#     defines the workload methods and the RperfTestHelper assertions module;
#   * by a child Ruby started with `run_child` (ENV["RPERF_TEST_CHILD"] = "1"):
#     loads rperf and the workload methods only (no test-unit autorunner), plus
#     `child_report(hash)` to send a JSON result back to the parent.
#
# Workload methods are top-level on purpose, so their frames are labelled
# "Object#<name>" and their path is this file.

require "rbconfig"
require "json"
require "open3"
require "tmpdir"
require "rperf"

RPERF_TEST_CHILD = ENV["RPERF_TEST_CHILD"] == "1"
require "test/unit" unless RPERF_TEST_CHILD

# Directory holding rperf.so (script/ruby puts it on the load path).
RPERF_BUILD_LIB = $LOAD_PATH.find { |d| File.exist?(File.join(d.to_s, "rperf.so")) } ||
                  File.join(ENV.fetch("RPERF_BUILD_DIR", File.expand_path("../../build", __dir__)), "lib")
RPERF_HELPER_PATH = File.expand_path(__FILE__)

RPERF_BACKENDS = %i[holder signal nanosleep].freeze
RPERF_MODES = %i[cpu wall].freeze

GVL_BLOCKED = ["<GVL>", "[GVL blocked]"].freeze
GVL_WAIT = ["<GVL>", "[GVL wait]"].freeze
GC_MARKING = ["<GC>", "[GC marking]"].freeze
GC_SWEEPING = ["<GC>", "[GC sweeping]"].freeze
SYNTHETIC_FRAMES = [GVL_BLOCKED, GVL_WAIT, GC_MARKING, GC_SWEEPING].freeze

# ---- workloads ---------------------------------------------------------------

def thread_cpu_now
  Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
end

# Busy loop until this thread has used `seconds` of CPU time. Returns the CPU
# time actually used (seconds, Float). Pure Ruby arithmetic between clock reads
# so that most samples land in this method itself.
def cpu_spin(seconds)
  start = thread_cpu_now
  deadline = start + seconds
  x = 0
  while thread_cpu_now < deadline
    i = 0
    while i < 2000
      x += i
      i += 1
    end
  end
  thread_cpu_now - start
end

# Distinctly named callers of cpu_spin, for attribution tests.
def rperf_work_a(seconds) = cpu_spin(seconds)
def rperf_work_b(seconds) = cpu_spin(seconds)
def rperf_outer(seconds) = rperf_inner(seconds)
def rperf_inner(seconds) = cpu_spin(seconds)

# Recurse `depth` levels (one frame of Object#rperf_deep per level), then
# yield at the bottom.
def rperf_deep(depth, &blk)
  depth <= 0 ? blk.call : rperf_deep(depth - 1, &blk)
end

# Allocation-heavy loop for `seconds` of thread CPU time; retains a fraction of
# the objects so that both minor and major GCs (marking and lazy sweeping)
# happen.
def rperf_alloc_work(seconds)
  deadline = thread_cpu_now + seconds
  keep = []
  while thread_cpu_now < deadline
    1000.times do |i|
      s = "x" * 64
      a = [s, i, { i => s }]
      keep << a if i % 8 == 0
    end
    keep = [] if keep.size > 40_000
  end
  keep.size
end

# The value of a finished Ractor on every Ruby (#value from 4.0, #take before).
def ractor_value(r) = r.respond_to?(:value) ? r.value : r.take

# ---- result inspection -------------------------------------------------------

def rperf_labels_of(frames)
  frames.map { |f| f[1] }
end

# Samples (aggregated by default) whose stack contains a frame with `label`.
def rperf_samples_with(result, label, key: :aggregated_samples)
  (result[key] || []).select { |s| s[0].any? { |f| f[1] == label } }
end

def rperf_weight_with(result, label, key: :aggregated_samples)
  rperf_samples_with(result, label, key: key).sum { |s| s[1] }
end

def rperf_total_weight(result, key: :aggregated_samples)
  (result[key] || []).sum { |s| s[1] }
end

# Samples whose leaf (frames[0]) is the given [path, label] pair.
def rperf_samples_with_leaf(result, frame, key: :aggregated_samples)
  (result[key] || []).select { |s| s[0][0] == frame }
end

def rperf_describe(result, limit: 15)
  return "nil result" unless result
  samples = (result[:aggregated_samples] || []).sort_by { |s| -s[1] }.first(limit)
  lines = samples.map do |fr, w, ts, ls|
    "  #{w}ns t#{ts} l#{ls}: #{fr.first(6).map { |f| f[1] }.join(' <- ')}"
  end
  head = result.reject { |k, _| %i[aggregated_samples raw_samples].include?(k) }
  "#{head.inspect}\n#{lines.join("\n")}"
end

# ---- child processes ---------------------------------------------------------

# In a child: print one machine-readable result line.
def child_report(hash)
  $stdout.puts "RPERF_RESULT #{JSON.dump(hash)}"
  $stdout.flush
end

ChildRun = Struct.new(:status, :stdout, :stderr, :timed_out) do
  # Parsed hashes from every `child_report` line (String keys).
  def reports
    stdout.lines.grep(/\ARPERF_RESULT /).map { |l| JSON.parse(l.sub("RPERF_RESULT ", "")) }
  end

  def report
    reports.last
  end

  def success?
    !timed_out && status&.success?
  end

  def describe
    sig = status&.termsig
    "status=#{status.inspect}#{sig ? " (killed by signal #{sig} #{Signal.signame(sig)})" : ''}" \
      "#{timed_out ? ' TIMED OUT' : ''}\n--- stdout ---\n#{stdout}\n--- stderr ---\n#{stderr}"
  end
end

# Run `script` (Ruby source) in a fresh Ruby with build/lib on the load path and
# this helper preloaded (child mode). Returns a ChildRun. The child is killed
# after `timeout` seconds (a watchdog for hangs, not a timing assertion).
def run_child(script, env: {}, timeout: 120, ruby_args: [])
  cmd = [RbConfig.ruby, "-I", RPERF_BUILD_LIB, *ruby_args, "-r", RPERF_HELPER_PATH, "-e", script]
  run_command(cmd, env: { "RPERF_TEST_CHILD" => "1" }.merge(env), timeout: timeout)
end

def run_command(cmd, env: {}, timeout: 120)
  Open3.popen3(env, *cmd) do |stdin, stdout, stderr, wait|
    stdin.close
    out = Thread.new { stdout.read }
    err = Thread.new { stderr.read }
    timed_out = false
    unless wait.join(timeout)
      timed_out = true
      begin
        Process.kill(:KILL, wait.pid)
      rescue Errno::ESRCH
        nil
      end
      wait.join
    end
    # children print UTF-8 (names, JSON) whatever the locale (POSIX: US-ASCII)
    ChildRun.new(wait.value, out.value.force_encoding(Encoding::UTF_8),
                 err.value.force_encoding(Encoding::UTF_8), timed_out)
  end
end

def jemalloc_path
  Dir.glob("/usr/lib/*/libjemalloc.so.2").first
end

# ---- test-case mixin ---------------------------------------------------------

unless RPERF_TEST_CHILD
  module RperfTestHelper
    def self.included(base)
      base.teardown do
        # Never let one failing test leave the profiler running for the next.
        begin
          Rperf.stop if Rperf.running?
        rescue StandardError
          nil
        end
      end
    end

    # Yields each (backend, mode) pair.
    def each_combo(backends: RPERF_BACKENDS, modes: RPERF_MODES)
      backends.each do |b|
        modes.each { |m| yield b, m }
      end
    end

    def assert_frame_shape(frame, msg = nil)
      assert_kind_of(Array, frame, msg)
      assert_equal(2, frame.size, "frame must be [path, label]: #{frame.inspect} #{msg}")
      assert_kind_of(String, frame[0], "frame path: #{frame.inspect} #{msg}")
      assert_kind_of(String, frame[1], "frame label: #{frame.inspect} #{msg}")
    end

    # [frames, weight, thread_seq, label_set_id] (+ timestamp when raw)
    def assert_sample_shape(sample, raw: false, msg: nil)
      assert_kind_of(Array, sample, msg)
      assert_equal(raw ? 5 : 4, sample.size, "sample tuple size: #{sample.inspect[0, 300]} #{msg}")
      frames, weight, thread_seq, label_set_id = sample
      assert_kind_of(Array, frames, msg)
      assert_not_empty(frames, "frames must not be empty #{msg}")
      assert_operator(frames.size, :<=, 513, "at most 512 Ruby frames + 1 synthetic #{msg}")
      frames.each { |f| assert_frame_shape(f, msg) }
      assert_kind_of(Integer, weight, msg)
      assert_operator(weight, :>, 0, "weight must be > 0: #{sample.inspect[0, 300]} #{msg}")
      assert_kind_of(Integer, thread_seq, msg)
      assert_operator(thread_seq, :>=, 0, msg)
      assert_kind_of(Integer, label_set_id, msg)
      assert_operator(label_set_id, :>=, 0, msg)
      return unless raw

      assert_kind_of(Integer, sample[4], "raw timestamp #{msg}")
      assert_operator(sample[4], :>, 0, "raw timestamp #{msg}")
    end

    def assert_has_label(result, label, msg = nil)
      assert_not_empty(rperf_samples_with(result, label),
                       "expected a stack containing #{label.inspect} #{msg}\n#{rperf_describe(result)}")
    end

    def refute_has_label(result, label, msg = nil)
      assert_empty(rperf_samples_with(result, label),
                   "expected no stack containing #{label.inspect} #{msg}\n#{rperf_describe(result)}")
    end

    def assert_child_ok(run, msg = nil)
      assert(run.success?, "child process failed #{msg}\n#{run.describe}")
    end
  end
end
